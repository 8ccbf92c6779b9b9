"""Trap: a closed loop that understates the waiting users would see at the same request rate.

A closed-loop arm of N sends the next request only when one finishes: requests never pile up
beyond N, so its TTFT shows a queue the client itself keeps short. Users who arrive on their own
(an open loop) arrive in bursts at the same average rate, and a burst waits. This check puts the
two side by side: each cell of a closed-loop arm N > 1 is paired with the cell of the rate arm,
in the same rep, whose achieved rate (cells.parquet: achieved_rate) is nearest the closed cell's
(n_requests / wall_s), when it is within ±30% (NEAR) of it: further apart, the two loads are not
the same load. A rate arm found overloaded (checks/overload.py) is never paired: its TTFT
percentiles depend on the cell's length.

Per pair, the ratio of the rate cell's TTFT p95 (counted from the planned arrivals) to the
closed cell's; per closed arm, the median ratio over its pairs (reps, runs pooled) with a
bootstrap interval. When the interval lies above 1 the closed loop understated waiting: a
warning goes before the headline. A closed arm with fewer than 2 pairs has no interval and is
not judged. When no rate arm came near any closed arm the check is not assessable and says which
rates would (the closed arms' achieved rates). A target without rate arms gets no verdict.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, constant, judged, not_assessable, plain
from slotbench.checks.overload import overloaded_arms, rate_text, seconds_text
from slotbench.core import stats
from slotbench.core import stats
from slotbench.core.cells import arm_name, arm_order, cell_label, label_key
from slotbench.core.cells import arm_name, arm_order, cell_label, label_key
from slotbench.core.fmt import fmt_times

TRAP = "closed_loop_understatement"
TITLE = "Closed-loop understatement (TTFT p95 at the same rate, arriving at random)"
ORDER = 14
TABLES = ("closed_loop_understatement",)
# a rate cell pairs with a closed cell whose achieved rate is within this share of its own: the
# open loop then offers the same load, give or take the rep-to-rep spread of achieved rates
NEAR = 0.30
WHY = ("A closed loop sends the next request only when one finishes; users who arrive on "
       "their own at the same rate queue behind each other's bursts.")
# pairs a closed arm needs for an interval on its ratio
MIN_PAIRS = 2
PAIR_COLUMNS = [
    "target", "run", "rep", "arm", "closed_rate", "closed_ttft_p95_s", "rate_arm",
    "rate_achieved", "rate_ttft_p95_s", "ratio", "closed_cell", "rate_cell",
]


def closed_rates(cells: pd.DataFrame) -> pd.Series:
    """Each cell's achieved request rate: a closed cell's requests over its wall clock, a rate
    cell's achieved_rate (from its first planned arrival to its last completion)."""
    closed = cells["n_requests"].astype(float) / cells["wall_s"].astype(float)
    if "achieved_rate" not in cells:
        return closed.where(cells["arm"] > 0)
    return closed.where(cells["arm"] > 0, cells["achieved_rate"].astype(float))


def pairs(cells: pd.DataFrame, overloaded: dict[str, set[int]]) -> pd.DataFrame:
    """Each closed-loop cell of an arm N > 1 with the rate cell of its rep nearest its achieved
    rate, within ±NEAR; overloaded rate arms left out."""
    if not len(cells) or not (cells["arm"] < 0).any():
        return pd.DataFrame(columns=PAIR_COLUMNS)
    cells = cells.assign(_rate=closed_rates(cells))
    if "ttft_p95_s" not in cells:
        cells = cells.assign(ttft_p95_s=float("nan"))
    rows = []
    for (target, run, rep), grp in cells.groupby(["target", "run", "rep"], sort=True):
        skip = overloaded.get(str(target), set())
        rate = grp[(grp["arm"] < 0) & ~grp["arm"].isin(skip) & grp["_rate"].notna()
                   & grp["ttft_p95_s"].notna()]
        for _, closed in grp[grp["arm"] > 1].sort_values("arm").iterrows():
            cr = closed["_rate"]
            if not cr > 0 or pd.isna(closed["ttft_p95_s"]) or rate.empty:
                continue
            gap = (rate["_rate"] - cr).abs()
            near = rate[gap <= NEAR * cr]
            if near.empty:
                continue
            best = near.loc[(near["_rate"] - cr).abs().sort_values(kind="stable").index[0]]
            rows.append({
                "target": str(target), "run": str(run), "rep": int(rep), "arm": int(closed["arm"]),
                "closed_rate": float(cr), "closed_ttft_p95_s": float(closed["ttft_p95_s"]),
                "rate_arm": int(best["arm"]), "rate_achieved": float(best["_rate"]),
                "rate_ttft_p95_s": float(best["ttft_p95_s"]),
                "ratio": float(best["ttft_p95_s"]) / float(closed["ttft_p95_s"]),
                "closed_cell": cell_label(target, run, rep, closed["arm"]),
                "rate_cell": cell_label(target, run, rep, best["arm"]),
            })
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def per_arm(paired: pd.DataFrame, settings: dict) -> list[dict]:
    """Per closed arm: its pairs, the median ratio with a bootstrap interval over them, and the
    medians of what was paired."""
    analysis = settings["analysis"]
    n_boot, ci = int(analysis["bootstrap"]), float(analysis["ci"])
    seed = int(settings["seed"])
    rows = []
    for arm, grp in paired.groupby("arm", sort=True):
        ratio, lo, hi = stats.median_ci(grp["ratio"], stats.resample_indices(len(grp), n_boot,
                                                                             seed), ci)
        rows.append({
            "arm": int(arm), "pairs": len(grp), "closed_rate": stats.median(grp["closed_rate"]),
            "closed_ttft_p95_s": stats.median(grp["closed_ttft_p95_s"]),
            "rate_ttft_p95_s": stats.median(grp["rate_ttft_p95_s"]),
            "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi,
            "rate_arms": sorted({int(a) for a in grp["rate_arm"]}, key=lambda a: -a),
        })
    return rows


def _clause(row: dict) -> str:
    names = ", ".join(arm_name(a) for a in row["rate_arms"])
    text = (f"{row['arm']}-way closed loop: TTFT p95 {seconds_text(row['closed_ttft_p95_s'])}; "
            f"arriving at random at the same {rate_text(row['closed_rate'])} req/s ({names}): "
            f"{seconds_text(row['rate_ttft_p95_s'])} ")
    if row["pairs"] < MIN_PAIRS:
        return text + f"({fmt_times(row['ratio'], 1)}, one pair only: no interval)"
    return text + (f"({fmt_times(row['ratio'], 1)} [{fmt_times(row['ratio_lo'], 1)}, "
                   f"{fmt_times(row['ratio_hi'], 1)}])")


def _achieved(cells: pd.DataFrame, which: pd.Series) -> dict[int, float]:
    """arm -> its median achieved rate over its cells, for the arms ``which`` selects, in arm
    order."""
    rates = closed_rates(cells)
    arms = sorted(set(cells["arm"][which].astype(int)), key=arm_order)
    return {a: stats.median(rates[cells["arm"] == a]) for a in arms}


def _suggestion(cells: pd.DataFrame, overloaded: set[int]) -> str:
    """The not-assessable sentence's middle: the closed arms' achieved rates, what the rate arms
    achieved, and the rate arms that would pair."""
    closed = _achieved(cells, cells["arm"] > 1)
    opened = _achieved(cells, cells["arm"] < 0)
    achieved = ", ".join(f"{arm_name(a)} {rate_text(r)} req/s" for a, r in closed.items())
    got = ", ".join(f"{arm_name(a)} {rate_text(r)} req/s"
                    + (" (overloaded: never paired)" if a in overloaded else "")
                    for a, r in opened.items())
    wanted = ", ".join(f"{{rate: {rate_text(r)}}}" for r in closed.values() if r == r)
    which = "rate arm the server sustained" if overloaded else "rate arm"
    return (f"no {which} came within ±{NEAR:.0%} ({constant(NEAR=NEAR)}) of a closed-loop "
            f"arm's achieved rate in the same rep (closed loop: {achieved}; rate arms achieved: "
            f"{got}); add rate arms at "
            f"the closed arms' achieved rates, e.g. {wanted} in `arms`")


def _pairing() -> str:
    """The constants that made the pairs, as a judged verdict's sentence names them."""
    return (f" A rate cell pairs with a closed cell within ±{NEAR:.0%} of its achieved rate, "
            f"and a closed arm needs {MIN_PAIRS} pairs for an interval "
            f"({constant(NEAR=NEAR, MIN_PAIRS=MIN_PAIRS)}).")


def judge(target: str, cells: pd.DataFrame, paired: pd.DataFrame, overloaded: set[int],
          settings: dict) -> Verdict:
    """One target's verdict from its cells and its pairs."""
    rows = per_arm(paired, settings)
    evidence = {"arms": {str(r["arm"]): plain(r) for r in rows}, "near": NEAR,
                "overloaded": sorted(overloaded)}
    labels = sorted(set(paired["closed_cell"]) | set(paired["rate_cell"]), key=label_key)
    common = {"evidence": evidence, "cells": labels}
    if not (cells["arm"] > 1).any():
        return not_assessable(
            TRAP, TITLE, target, "no closed-loop arm above serial-1",
            "Closed-loop understatement is not assessable: there is no closed-loop arm above "
            "serial-1 to set beside the rate arms.", **common)
    if not rows:
        why = _suggestion(cells, overloaded)
        return not_assessable(TRAP, TITLE, target, "no rate arm near a closed arm's rate",
                              f"Closed-loop understatement is not assessable: {why}.",
                              **common)
    unpaired = {a: r for a, r in _achieved(cells, cells["arm"] > 1).items()
                if a not in {row["arm"] for row in rows}}
    evidence["unpaired"] = {str(a): r for a, r in unpaired.items()}
    text = "; ".join([_clause(r) for r in rows] + [
        f"no rate arm came within ±{NEAR:.0%} of {arm_name(a)}'s {rate_text(r)} req/s"
        for a, r in unpaired.items()])
    if all(r["pairs"] < MIN_PAIRS for r in rows):
        return not_assessable(
            TRAP, TITLE, target, "one rep paired each closed arm: no interval",
            f"Closed-loop understatement is not assessable: only one rep paired each closed "
            f"arm with a rate arm ({text}), too few for an interval "
            f"({constant(MIN_PAIRS=MIN_PAIRS)}); run more reps.",
            **common)
    under = [r for r in rows if r["pairs"] >= MIN_PAIRS and r["ratio_lo"] > 1]
    if under:
        tail = f"understates waiting: {text}. {WHY}"
        return judged(TRAP, TITLE, target, True, f"understated: {text}",
                      f"Closed loop {tail}{_pairing()}",
                      effect="warn", evidence=evidence | {
                          "warnings": [f"Warning: the closed loop {tail}"]},
                      cells=labels)
    return judged(TRAP, TITLE, target, False, text,
                  f"The closed loop did not understate waiting: {text}.{_pairing()}", **common)


def applies(tables: Tables, target: str) -> bool:
    """Only a target with rate arms gets a verdict (a closed-loop report does not change)."""
    return tables.has_rate_arms(target)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    cells = tables.cells
    hot = overloaded_arms(tables, settings)
    paired = pairs(cells, hot)
    verdicts = []
    for target in tables.targets:
        mine = cells[cells["target"] == target]
        if not (mine["arm"] < 0).any():  # no rate arm: no verdict, the report does not change
            continue
        verdicts.append(judge(target, mine, paired[paired["target"] == target],
                              hot.get(target, set()), settings))
    return verdicts, {"closed_loop_understatement": paired}
