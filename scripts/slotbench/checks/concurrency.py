"""Trap: an arm that never had its nominal number of requests in flight (client side).

An arm of concurrency N keeps N requests in flight. A client that cannot start them fast enough
(a slow machine, 256 threads on 2 cores) runs the arm at a lower concurrency than its name says,
and its speedup would be read as N-way. The most requests whose [sent, done] windows overlap in
each cell is what the arm reached; an arm whose median cell reached fewer than N gets no
headline, and the report says what it reached.
"""

from __future__ import annotations

from slotbench.checks.base import Tables, Verdict, constant, judged
from slotbench.core import stats
from slotbench.core.cells import (OVERLAP_TOLERANCE_S, SERIAL_ARM, arm_name, label_series,
                             most_at_once_by_cell)

TRAP = "concurrency"
TITLE = "Arm below its concurrency (in flight at once)"
ORDER = 12
TABLES = ()
# how the verdicts name what decides "at once"
AT_ONCE = (f"requests whose windows meet within {OVERLAP_TOLERANCE_S * 1000:g} ms count as one "
           f"after the other: {constant(OVERLAP_TOLERANCE_S=OVERLAP_TOLERANCE_S)}")


def reached(requests) -> list[dict]:
    """Per parallel arm: the most requests in flight at once, per cell and in the median cell."""
    req = requests[["target", "run", "rep", "arm", "t_sent_s", "t_done_s"]]
    req = req.dropna(subset=["t_sent_s", "t_done_s"])
    req = req.assign(_cell=label_series(req) if len(req) else [])
    rows = []
    for arm, grp in req[req["arm"] > SERIAL_ARM].groupby("arm", sort=True):
        by_cell = most_at_once_by_cell(grp["_cell"].to_numpy(), grp["t_sent_s"], grp["t_done_s"],
                                       OVERLAP_TOLERANCE_S)
        per_cell = list(by_cell.values())
        rows.append(
            {
                "arm": int(arm),
                "cells": len(per_cell),
                "reached_median": stats.median(per_cell),
                "reached_max": max(per_cell),
                "below": sorted(c for c, n in by_cell.items() if n < arm),
            }
        )
    return rows


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    requests = tables.measured_requests
    verdicts = []
    for target in tables.targets:
        rows = reached(requests[requests["target"] == target])
        short = [r for r in rows if r["reached_median"] < r["arm"]]
        why = {str(r["arm"]): f"{arm_name(r['arm'])} reached at most {r['reached_median']:g} "
               f"requests in flight (median cell), not {r['arm']}" for r in short}
        if short:
            text = "; ".join(why.values())
            warning = (
                f"Warning: {text} ({AT_ONCE}): the client could not keep the arm's requests in "
                "flight, so its numbers describe a lower concurrency; it gets no headline."
            )
            verdicts.append(judged(
                TRAP, TITLE, target, True, text, warning.removeprefix("Warning: "),
                effect="exclude", arms=[r["arm"] for r in short],
                evidence={"rows": records_of(rows), "why": why, "warnings": [warning]},
                cells=sorted({c for r in short for c in r["below"]}),
            ))
        else:
            reach = ", ".join(f"{arm_name(r['arm'])} {r['reached_median']:g}" for r in rows)
            summary = (
                f"every parallel arm had its requests in flight at once ({reach} in flight, "
                "median cell)"
                if rows
                else "no parallel arm"
            )
            verdicts.append(judged(TRAP, TITLE, target, False, summary,
                                   f"Concurrency: {summary} ({AT_ONCE}).",
                                   evidence={"rows": records_of(rows)}))
    return verdicts, {}


def records_of(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "below"} | {"below": len(r["below"])} for r in rows]
