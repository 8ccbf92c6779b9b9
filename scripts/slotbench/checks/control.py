"""Trap: how much a shared, cacheable prompt would inflate the parallel arms (the control arm).

With ``control_arm: true`` every rep ends with a control cell at the largest concurrency whose
requests share one prompt and may use the server's prefix cache (MLPerf TEST04's idea). Its
median agg_tps against the measured cells of the same target and arm, minus one, is what a
benchmark without nonces would have booked as gain. It is a measurement, never a headline.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, records
from slotbench.core import stats
from slotbench.core.cells import arm_name, label_series
from slotbench.core.fmt import fmt_change

TRAP = "control"
TITLE = "Shared-prefix inflation (control arm)"
ORDER = 60
TABLES = ("control",)

CONTROL_COLUMNS = ["target", "arm", "control_cells", "control_agg_tps", "measured_agg_tps",
                   "inflation", "cells", "measured_cells"]


def control_effect(control: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Per (target, arm): control cells' median agg_tps against the measured cells'."""
    rows = []
    for (target, arm), ctrl in control.groupby(["target", "arm"], sort=True):
        measured = cells[(cells["target"] == target) & (cells["arm"] == arm)]
        c_tps, m_tps = stats.median(ctrl["agg_tps"]), stats.median(measured["agg_tps"])
        rows.append({
            "target": target, "arm": int(arm), "control_cells": len(ctrl),
            "control_agg_tps": c_tps, "measured_agg_tps": m_tps,
            "inflation": c_tps / m_tps - 1 if m_tps > 0 else float("nan"),
            "cells": ";".join(label_series(ctrl).sort_values()),
            "measured_cells": ";".join(label_series(measured).sort_values()),
        })
    return pd.DataFrame(rows, columns=CONTROL_COLUMNS)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    table = control_effect(tables.control, tables.cells)
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target].sort_values("arm")
        if rows.empty:
            why = "control arm off" if tables.control.empty else "no control cells for this target"
            verdicts.append(Verdict(
                TRAP, TITLE, target, assessable=False, fired=False, verdict="off", summary=why,
                sentence="Control arm off: set control_arm: true to measure how much a shared "
                "prefix would inflate the parallel arms." if tables.control.empty else
                f"The control arm measured no cell of {target}.",
            ))
            continue
        top = rows.iloc[-1]
        lines = [
            f"Control (shared prompt, cache allowed): {arm_name(r['arm'])} would have shown "
            f"{r['control_agg_tps']:.1f} tok/s instead of {r['measured_agg_tps']:.1f} tok/s "
            f"({fmt_change(1 + r['inflation'])}) \u2014 not part of the headline."
            for r in rows.to_dict("records")
        ]
        verdicts.append(Verdict(
            TRAP, TITLE, target, assessable=True, fired=False, verdict="n/a (a measurement)",
            summary=(f"measured: a shared prompt would have shown "
                     f"{fmt_change(1 + top['inflation'])} at {arm_name(top['arm'])} "
                     "(not in the headline)"),
            sentence=" ".join(lines),
            evidence={"inflation": top["inflation"], "arm": int(top["arm"]),
                      "control_cells": int(rows["control_cells"].sum()), "rows": records(rows)},
            cells=sorted({c for cs in rows["cells"] for c in cs.split(";") if c}),
        ))
    return verdicts, {"control": table}
