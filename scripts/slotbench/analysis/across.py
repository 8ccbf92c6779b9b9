"""Targets side by side: the widest arm they all ran, their order by speedup there, and which
neighbours in that order differ beyond their intervals (presented by report/across.py)."""

from __future__ import annotations

import pandas as pd

from slotbench.core.cells import SERIAL_ARM
from slotbench.core.fmt import missing


def common_arm(summary: pd.DataFrame) -> int | None:
    """The widest parallel arm every target ran."""
    arms = [set(g["arm"].astype(int)) - {SERIAL_ARM} for _, g in summary.groupby("target")]
    shared = set.intersection(*arms) if arms else set()
    return max(shared) if shared else None


def ordered(summary: pd.DataFrame, arm: int) -> pd.DataFrame:
    """The targets' rows of ``arm``, by speedup, highest first (ties by name)."""
    rows = summary[summary["target"].notna() & (summary["arm"].astype(int) == arm)].copy()
    rows["target"] = rows["target"].astype(str)
    return rows.sort_values(["speedup", "target"], ascending=[False, True], kind="stable")


def separations(rows: pd.DataFrame, metric: str) -> list[tuple[str, str, bool]]:
    """(target, the next one in the order, True when their intervals do not overlap)."""
    out = []
    records = rows.to_dict("records")
    for a, b in zip(records, records[1:]):
        lo_a, hi_a, lo_b, hi_b = (a.get(f"{metric}_lo"), a.get(f"{metric}_hi"),
                                  b.get(f"{metric}_lo"), b.get(f"{metric}_hi"))
        if any(missing(x) for x in (lo_a, hi_a, lo_b, hi_b)):
            continue
        out.append((a["target"], b["target"], hi_b < lo_a or hi_a < lo_b))
    return out
