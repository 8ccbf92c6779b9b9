"""Trap: a rate arm above what the server can sustain (open loop), whose queue grew for as long
as the cell lasted.

A rate arm's requests arrive on their planned schedule whether or not earlier ones are done
(slotbench.tables.openloop). Below capacity the server's queue comes and goes, and a request's
waiting (its TTFT counted from its planned arrival: t_first_s - t_planned_s) does not depend on when
in the cell it arrived. Above capacity the queue grows without bound: each request waits longer than
the one before, so the arm's TTFT percentiles grow with requests_per_cell and describe the cell's
length, not the server.

Per cell, the slope of each request's waiting against its arrival order (0, 1, 2, … by planned
arrival) in seconds per request (stats.within_group_slope over the one cell: an OLS slope); per
target and rate arm, the median slope over its cells (reps, runs pooled) with a bootstrap
interval over those cells. An arm is overloaded when the interval's lower bound is above 0 and
the growth over a cell (slope × the cell's requests) exceeds ``checks.overload_growth_s``
(1.0 s: waiting that grew by more than a second across one cell). Its arm gets no headline, and
closed_loop_understatement never pairs with it. An arm with fewer than 2 cells is not assessable
(no interval); a target without rate arms gets no verdict at all (reports of closed-loop configs
do not change).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slotbench.checks.base import (Tables, Verdict, constant, judged, not_assessable, plain,
                                   setting)
from slotbench.core import stats
from slotbench.core.cells import arm_name, arm_rate, cell_labels, label_key, label_series
from slotbench.core.fmt import count, fmt_ms, signed

TRAP = "overload"
TITLE = "Overload (a rate arm's queue grew for the whole cell)"
ORDER = 13
TABLES = ("overload",)
CONFIG_KEY = "checks.overload_growth_s"
# the sentence quotes the growth of waiting per this many requests
PER = 10
# cells a rate arm needs for an interval on its slope
MIN_CELLS = 2
ARM_COLUMNS = ["target", "arm", "cells", "requests", "slope_s", "slope_lo_s", "slope_hi_s",
               "growth_s", "offered_rate", "achieved_rate", "assessable", "overloaded"]


def rate_text(rate) -> str:
    """Requests/s as the sentences quote them: 2.0, 1.4, 0.25."""
    return "n/a" if rate is None or rate != rate else (
        f"{rate:.1f}" if abs(rate) >= 1 else f"{rate:.2g}")


def seconds_text(seconds) -> str:
    """A waiting time: 3.1 s, 0.42 s, 20.2 ms."""
    if seconds is None or seconds != seconds:
        return "n/a"
    if abs(seconds) >= 1:
        return signed(f"{seconds:.1f} s")
    return signed(f"{seconds:.2f} s") if abs(seconds) >= 0.1 else signed(fmt_ms(seconds))


def per_ten(slope: float, lo: float, hi: float) -> str:
    """A slope (s per request) as growth per PER requests with its interval, one unit for all."""
    value, low, high = (x * PER for x in (slope, lo, hi))
    if abs(value) >= 0.1:
        digits = 1 if abs(value) >= 1 else 2
        text = [f"{x:.{digits}f}" for x in (value, low, high)]
        unit = "s"
    else:
        text, unit = [f"{x * 1000:.1f}" for x in (value, low, high)], "ms"
    return signed(f"{text[0]} {unit} per {PER} requests [{text[1]}, {text[2]}]")


def cell_slopes(requests: pd.DataFrame) -> pd.DataFrame:
    """Per rate-arm cell: its label, its timed requests and the slope of their waiting (TTFT
    from the planned arrival) against their arrival order, in seconds per request."""
    req = requests[requests["arm"].astype(int) < 0] if len(requests) else requests
    if "t_planned_s" in req:
        req = req.dropna(subset=["t_planned_s", "t_first_s"])
    else:
        req = req.iloc[0:0]
    rows = []
    if len(req):
        req = req.assign(_cell=label_series(req))
        for (target, arm, cell), grp in req.groupby(["target", "arm", "_cell"], sort=True):
            grp = grp.sort_values(["t_planned_s", "request"], kind="stable")
            wait = (grp["t_first_s"] - grp["t_planned_s"]).to_numpy(dtype=float)
            order = np.arange(len(grp), dtype=float)
            slope = stats.within_group_slope(order, wait, np.zeros(len(grp)))
            rows.append({"target": str(target), "arm": int(arm), "cell": cell,
                         "requests": len(grp), "slope_s": slope})
    return pd.DataFrame(rows, columns=["target", "arm", "cell", "requests", "slope_s"])


def arm_rows(tables: Tables, settings: dict) -> list[dict]:
    """Per target and rate arm (trusted cells only): the median slope over its cells with a
    bootstrap interval, the growth over a cell, the offered and achieved rates, and whether it
    is assessable and overloaded."""
    threshold = float(setting(settings, CONFIG_KEY))
    analysis = settings["analysis"]
    n_boot, ci = int(analysis["bootstrap"]), float(analysis["ci"])
    seed = int(settings["seed"])
    cells = tables.cells
    trusted = set(cell_labels(cells))
    slopes = cell_slopes(tables.measured_requests)
    slopes = slopes[slopes["cell"].isin(trusted) & slopes["slope_s"].notna()]
    rows = []
    rate_cells = cells[cells["arm"].astype(int) < 0] if len(cells) else cells
    for (target, arm), grp in rate_cells.groupby(["target", "arm"], sort=True):
        mine = slopes[(slopes["target"] == str(target)) & (slopes["arm"] == int(arm))]
        n = len(mine)
        requests = int(round(stats.median(mine["requests"]))) if n else 0
        slope, lo, hi = (stats.median_ci(mine["slope_s"], stats.resample_indices(n, n_boot, seed),
                                         ci) if n else (float("nan"),) * 3)
        growth = slope * requests
        assessable = n >= MIN_CELLS
        achieved = grp["achieved_rate"] if "achieved_rate" in grp else []
        rows.append({
            "target": str(target), "arm": int(arm), "cells": n, "requests": requests,
            "slope_s": slope, "slope_lo_s": lo, "slope_hi_s": hi, "growth_s": growth,
            "offered_rate": arm_rate(arm), "achieved_rate": stats.median(achieved),
            "assessable": assessable,
            "overloaded": bool(assessable and lo > 0 and growth > threshold),
        })
    return rows


def overloaded_arms(tables: Tables, settings: dict) -> dict[str, set[int]]:
    """target -> the rate arms this check finds overloaded (closed_loop_understatement reads
    it: an overloaded arm is never paired)."""
    out: dict[str, set[int]] = {}
    for row in arm_rows(tables, settings):
        if row["overloaded"]:
            out.setdefault(row["target"], set()).add(row["arm"])
    return out


def _clause(row: dict) -> str:
    return (f"the server cannot sustain {rate_text(row['offered_rate'])} req/s "
            f"({arm_name(row['arm'])} achieved {rate_text(row['achieved_rate'])} req/s); "
            f"waiting grew by {per_ten(row['slope_s'], row['slope_lo_s'], row['slope_hi_s'])}")


def _unassessed(rows: list[dict]) -> str:
    """The rate arms with too few cells for an interval, said so."""
    return "; ".join(f"{arm_name(r['arm'])} is not assessable ({count(r['cells'], 'cell')} "
                     f"with timed requests, {MIN_CELLS} needed for an interval)"
                     for r in rows if not r["assessable"])


def _bounded(rows: list[dict], threshold: float) -> str:
    """The quiet sentence: the largest slope, and why the queue counts as bounded."""
    top = max((r for r in rows if r["assessable"]), key=lambda r: r["slope_s"])
    why = (f"within the {seconds_text(threshold)} bound" if top["growth_s"] <= threshold
           else "but its interval reaches 0")
    text = (f"the queue stayed bounded at every rate arm: the largest slope of waiting against "
            f"arrival order, at {arm_name(top['arm'])}, was "
            f"{per_ten(top['slope_s'], top['slope_lo_s'], top['slope_hi_s'])} "
            f"({seconds_text(top['growth_s'])} over a cell of {top['requests']} requests, {why})")
    return text


def judge(target: str, rows: list[dict], cells: dict, threshold: float) -> Verdict:
    """One target's verdict from its rate arms' rows (``cells``: arm -> its cell labels)."""
    common = {"threshold": threshold, "config_key": CONFIG_KEY}
    evidence = {"arms": {str(r["arm"]): plain(r) for r in rows}, "per": PER}
    unassessed = _unassessed(rows)
    cited = f" ({constant(MIN_CELLS=MIN_CELLS)})" if unassessed else ""
    every = sorted((c for cs in cells.values() for c in cs), key=label_key)
    if not any(r["assessable"] for r in rows):
        return not_assessable(
            TRAP, TITLE, target, f"too few cells: {unassessed}",
            f"Overload is not assessable: {unassessed}{cited}, so nothing shows whether the "
            "queue stayed bounded; run more reps.",
            evidence=evidence, cells=every, **common,
        )
    hot = [r for r in rows if r["overloaded"]]
    tail = f"; {unassessed}" if unassessed else ""
    if not hot:
        text = _bounded(rows, threshold)
        return judged(TRAP, TITLE, target, False, text + tail,
                      f"No overload: {text}{tail}{cited}.",
                      evidence=evidence, cells=every, **common)
    what = "that arm" if len(hot) == 1 else "those arms"
    sentence = (f"Overloaded: {'; '.join(_clause(r) for r in hot)}, so no TTFT percentile of "
                f"{what} is quoted{tail}{cited}.")
    why = {str(r["arm"]): f"{arm_name(r['arm'])} is overloaded (waiting grew by "
                          f"{per_ten(r['slope_s'], r['slope_lo_s'], r['slope_hi_s'])}), so its "
                          "TTFT percentiles depend on how many requests a cell sends"
           for r in hot}
    summary = "overloaded: " + ", ".join(
        f"{arm_name(r['arm'])} (waiting grew {seconds_text(r['growth_s'])} over a cell)"
        for r in hot)
    return judged(TRAP, TITLE, target, True, summary, sentence, effect="exclude",
                  arms=[r["arm"] for r in hot],
                  evidence=evidence | {"why": why, "no_percentiles": True},
                  cells=sorted((c for r in hot for c in cells[r["arm"]]), key=label_key),
                  **common)


def applies(tables: Tables, target: str) -> bool:
    """Only a target with rate arms gets a verdict (a closed-loop report does not change)."""
    return tables.has_rate_arms(target)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    threshold = float(setting(settings, CONFIG_KEY))
    table = arm_rows(tables, settings)
    verdicts = []
    for target in tables.targets:
        rows = [r for r in table if r["target"] == target]
        if not rows:  # no rate arm: no verdict, so a closed-loop report does not change
            continue
        mine = tables.cells[tables.cells["target"] == target]
        cells = {r["arm"]: cell_labels(mine[mine["arm"] == r["arm"]]) for r in rows}
        verdicts.append(judge(target, rows, cells, threshold))
    return verdicts, {"overload": pd.DataFrame(table, columns=ARM_COLUMNS)}

