"""Across targets: with two targets or more, one table of every target at the widest arm they
all ran, ordered by speedup, and per metric which neighbours differ beyond their intervals.

It presents results/<experiment>/analysis/summary.csv (medians and bootstrap intervals per target
and arm); the cells behind every row are the target's cells of that arm and of its serial arm.
"""

from __future__ import annotations

import pandas as pd

from slotbench.analysis.across import common_arm, ordered, separations
from slotbench.core.cells import SERIAL_ARM, arm_name
from slotbench.core.fmt import DASH, fmt_num, missing, with_ci
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table
from slotbench.report.traps import TargetContext

METRICS = {"speedup": "speedup", "user_ratio": "per-user change", "ttft_ratio": "TTFT ratio",
           "efficiency": "efficiency", "gen_gain": "gen_gain"}
ACROSS_ID = "across"


def _cell(row, metric: str) -> str:
    return DASH if missing(row.get(metric)) else with_ci(row, metric, lambda x: fmt_num(x, 2))


def blocks(summary: pd.DataFrame, index: prov.CellIndex, ci: str) -> list:
    targets = sorted(set(summary["target"].dropna().astype(str)))
    arm = common_arm(summary)
    if len(targets) < 2 or arm is None:
        return []
    rows = ordered(summary, arm)
    name = arm_name(arm)
    out: list = [Heading(2, "Across targets"),
                 Paragraph(f"Every target at {name}, the widest arm they all ran, ordered by "
                           f"speedup (highest first); medians with {ci} intervals over the "
                           "reps.")]
    columns = ["target", *(f"{label} [{ci}]" for label in METRICS.values()),
               "aggregate tok/s", "per-user tok/s", "reps"]
    table = [[r["target"], *(_cell(r, m) for m in METRICS),
              fmt_num(r["agg_tps"], 1), fmt_num(r["user_tps"], 1), str(int(r["n_reps"]))]
             for r in rows.to_dict("records")]
    out.append(Table(f"Targets at {name}", columns, table, "The cells behind each row are that "
                     f"target's {name} and serial-1 cells, listed below.", anchor=ACROSS_ID))
    sentences = []
    for metric, label in METRICS.items():
        pairs = separations(rows, metric)
        beyond = [f"{a} and {b}" for a, b, apart in pairs if apart]
        if pairs:
            sentences.append(f"{label}: " + ("; ".join(beyond) + " differ beyond their intervals"
                                             if beyond else "no neighbours differ beyond "
                                             "their intervals"))
    if sentences:
        out.append(Paragraph("Neighbours in this order, " + ". ".join(sentences) + "."))
    labels = [lab for t in rows["target"] for a in (arm, SERIAL_ARM)
              for lab in index.labels(t, arm=a)]
    ref = prov.Ref(ACROSS_ID, "table", f"Targets at {name}", prov.with_roles((labels, "source")),
                   ACROSS_ID)
    out.append(TargetContext("", labels, index).sources(labels, ACROSS_ID, (ref,)))
    return out
