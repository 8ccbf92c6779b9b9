"""Trap: the machine drifting during the run, seen in the serial arm
(docs/method.md#thermal-state-and-drift).

The serial arm does the same work in every rep, so a trend in its throughput is the machine
drifting (heat, power, background load), not concurrency. Burst is the median agg_tps of the
first quarter of the serial cells in time order (runs pooled), plateau the median of the last
half; change = plateau / burst - 1, so the article's loss reads -8.2%. A loss beyond the
threshold fires. Rotation spreads a drift over the arms, so it does not refuse the headline,
but absolute tok/s depend on when they were measured.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slotbench.checks.base import Tables, Verdict, constant, judged, not_assessable, setting
from slotbench.core import stats
from slotbench.core.cells import SERIAL_ARM, cell_labels, label_key
from slotbench.core.fmt import count, fmt_change, fmt_num, fmt_pct

TRAP = "drift"
TITLE = "Drift (serial arm, burst vs plateau)"
ORDER = 80
TABLES = ("burst",)
CONFIG_KEY = "checks.drift_threshold"
ARTICLE_DRIFT = -0.082
# the serial cells, in time order, that make the burst (the first quarter) and the plateau (the
# second half) the drift compares (docs/method.md#constants)
BURST_FRAC = 0.25
PLATEAU_FRAC = 0.5
BURST_COLUMNS = [
    "target", "n_serial", "burst_tps", "plateau_tps", "change", "span_s",
    "burst_cells", "plateau_cells",
]


def burst_vs_plateau(
    cells: pd.DataFrame,
    burst_frac: float = BURST_FRAC,
    plateau_frac: float = PLATEAU_FRAC,
    by: tuple[str, ...] = ("target",),
) -> pd.DataFrame:
    """Serial-arm throughput at the start versus the end, per target (runs pooled in time order).

    Each of burst and plateau is at least one cell. With fewer than two serial cells there is
    no trend to see and change is NaN. ``by=("target", "run")`` looks within runs.
    """
    for name, frac in (("burst_frac", burst_frac), ("plateau_frac", plateau_frac)):
        if not 0 < frac <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {frac}")
    keys = list(by)
    serial = cells.loc[(cells["arm"] == SERIAL_ARM) & cells["agg_tps"].notna()]
    rows = []
    for key, grp in serial.groupby(keys, sort=True):
        grp = grp.sort_values(["t_start_unix", "run", "rep"], kind="stable")
        n = len(grp)
        burst = grp.iloc[: max(1, int(n * burst_frac))]
        plateau = grp.iloc[n - max(1, int(n * plateau_frac)) :]
        burst_tps, plateau_tps = stats.median(burst["agg_tps"]), stats.median(plateau["agg_tps"])
        key = key if isinstance(key, tuple) else (key,)
        rows.append({
            **dict(zip(keys, key, strict=True)), "n_serial": n,
            "burst_tps": burst_tps, "plateau_tps": plateau_tps,
            "change": plateau_tps / burst_tps - 1.0 if n >= 2 and burst_tps else np.nan,
            "span_s": float(grp["t_start_unix"].iloc[-1] - grp["t_start_unix"].iloc[0]),
            "burst_cells": ";".join(cell_labels(burst)),
            "plateau_cells": ";".join(cell_labels(plateau)),
        })
    columns = keys + [c for c in BURST_COLUMNS if c not in keys]
    return pd.DataFrame(rows, columns=columns)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    threshold = float(setting(settings, CONFIG_KEY))
    table = burst_vs_plateau(tables.cells)
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target]
        if rows.empty:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no serial cells to compare",
                "Drift: no serial cells to compare.", threshold=threshold, config_key=CONFIG_KEY,
            ))
            continue
        r = rows.iloc[0].to_dict()
        change, n = r["change"], int(r["n_serial"])
        burst = [c for c in str(r["burst_cells"]).split(";") if c]
        plateau = [c for c in str(r["plateau_cells"]).split(";") if c]
        evidence = {"change": change, "burst_tps": r["burst_tps"], "plateau_tps": r["plateau_tps"],
                    "n_serial": n, "span_s": r["span_s"], "burst_cells": burst,
                    "plateau_cells": plateau, "article_change": ARTICLE_DRIFT,
                    "burst_frac": BURST_FRAC, "plateau_frac": PLATEAU_FRAC}
        if pd.isna(change):
            summary = f"too few serial cells ({n}) to see a trend"
            verdicts.append(not_assessable(
                TRAP, TITLE, target, summary, f"Drift: {summary}; run more reps to compare the "
                "first serial cells with the last.", threshold=threshold, config_key=CONFIG_KEY,
                evidence=evidence, cells=burst + plateau,
            ))
            continue
        fired = bool(change <= -threshold)
        summary = (f"serial arm: burst {fmt_num(r['burst_tps'])} tok/s, plateau "
                   f"{fmt_num(r['plateau_tps'])} tok/s ({fmt_change(1 + change, 1)})")
        sentence = (f"Drift: {summary} over {count(n, 'serial cell')} (burst: the first "
                    f"{fmt_pct(BURST_FRAC)} of them in time order, plateau: the last "
                    f"{fmt_pct(PLATEAU_FRAC)}; "
                    f"{constant(BURST_FRAC=BURST_FRAC, PLATEAU_FRAC=PLATEAU_FRAC)})")
        sentence += (
            f"; a loss beyond {fmt_pct(threshold)} means the machine slowed during the " "run."
            if fired
            else f", within the {fmt_pct(threshold)} threshold."
        )
        verdicts.append(judged(
            TRAP, TITLE, target, fired, summary, sentence, threshold=threshold,
            config_key=CONFIG_KEY, evidence=evidence,
            cells=sorted(set(burst) | set(plateau), key=label_key),
        ))
    return verdicts, {"burst": table}
