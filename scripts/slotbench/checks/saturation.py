"""Trap: a client process that could not keep up with the streams it was reading.

A cell's streams are read by one or more client processes, each one event loop on one core
(slotbench.measure.clients). A process that is busy nearly all of the cell's wall clock, or whose
loop runs its own 10 ms timer late, reads chunks late: every token it times arrives later than the
server sent it, TTFT grows and the per-user rate falls, and the arm looks worse than the server is.
Each raw cell records, per process, its CPU time over its wall clock (``busy``) and how late its
loop ran the timer (``lag_p95_s``); consolidation keeps the busiest process and the latest loop of
each cell (cells.parquet: client_busy, client_lag_p95_s, with their process numbers).

A cell is measured by a client that could not keep up when a process was busy above
``checks.client_busy_share`` (0.85 of a core: the loop had almost no idle time left to read the
next chunk when it came) or its loop lag p95 exceeded ``checks.client_loop_lag_s`` (10 ms: half
a token at 20 ms per token, the same bound as the send lag of checks/client.py). An arm with
such a cell gets no headline, as an arm below its concurrency (checks/concurrency.py) does.
Cells from raw files written before the per-process record have no such numbers: they are
counted as not assessed, and a target with none at all is not assessable, never a pass.

A rate arm (open loop) sends each request at its planned arrival and counts its TTFT from there.
A cell whose launch skew p99 (cells.parquet: launch_skew_p99_s, sent - planned) exceeds
``checks.launch_skew_s`` (10 ms, the send-lag bound) was sent late by the client: part of what
its users waited was the client's, not the server's, so it is a cell the client could not keep
up with too, and its arm gets no headline. A rate arm with ``max_in_flight`` holds arrivals at
the client while the cap is full; that wait shows as launch skew as well.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged, not_assessable, plain, setting
from slotbench.core.cells import CELL_KEYS, SERIAL_ARM, arm_name, label_key, label_series
from slotbench.core.fmt import count, fmt_ms, fmt_pct

TRAP = "client_saturation"
TITLE = "Client saturation (busy or late client processes)"
ORDER = 91
TABLES = ("client_saturation",)
CONFIG_KEY = "checks.client_busy_share"
LAG_KEY = "checks.client_loop_lag_s"
SKEW_KEY = "checks.launch_skew_s"
SKEW_COLUMN = "launch_skew_p99_s"
LATE = "the client sent late, so those users' waiting is the client's"

CLIENT_COLUMNS = ["client_processes", "client_busy", "client_busy_process", "client_lag_p95_s",
                  "client_lag_process"]
# One row per target and arm: the detail CSV (small whatever the number of cells).
ARM_COLUMNS = [
    "target", "arm", "cells", "cells_recorded", "cells_saturated", "processes", "busy",
    "busy_process", "busy_cell", "lag_p95_s", "lag_process", "lag_cell", "launch_skew_p99_s",
    "skew_cell", "cells_late", "saturated",
]
REMEDY = "give the client more processes (client.processes) or cores (client.cpus)"


def _worst(grp: pd.DataFrame, column: str, process: str | None) -> tuple:
    """The largest value of a column in an arm's cells, its process (if any) and its cell."""
    known = grp[column].dropna()
    if known.empty:
        return None, None, None
    at = known.idxmax()
    proc = grp.at[at, process] if process else None
    return float(known[at]), None if pd.isna(proc) else int(proc), grp.at[at, "cell"]


def per_arm(cells: pd.DataFrame, busy_share: float, lag_s: float,
            skew_s: float = float("inf")) -> tuple[list[dict], dict]:
    """Per target and arm: the cells with a client record, those whose client could not keep
    up (busy, late loop, or a rate arm's launch skew), the busiest process, the latest loop and
    the latest launch; and per target, the cells that could not."""
    frame = cells.reindex(columns=CELL_KEYS + ["position"] + CLIENT_COLUMNS + [SKEW_COLUMN])
    for column in CLIENT_COLUMNS + [SKEW_COLUMN]:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame = frame.assign(cell=label_series(frame) if len(frame) else [])
    busy, lag = frame["client_busy"], frame["client_lag_p95_s"]
    frame["late"] = (frame["arm"] < 0) & (frame[SKEW_COLUMN] > skew_s)
    frame["saturated"] = (busy > busy_share) | (lag > lag_s) | frame["late"]
    recorded = busy.notna() | lag.notna()
    rows = []
    for (target, arm), grp in frame.groupby(["target", "arm"], sort=True):
        worst_busy, worst_lag = (_worst(grp, "client_busy", "client_busy_process"),
                                 _worst(grp, "client_lag_p95_s", "client_lag_process"))
        processes = grp["client_processes"].max()
        skew = _worst(grp, SKEW_COLUMN, None)
        rows.append({
            "target": target, "arm": int(arm), "cells": len(grp),
            "cells_recorded": int(recorded[grp.index].sum()),
            "cells_saturated": int(grp["saturated"].sum()),
            "processes": None if pd.isna(processes) else int(processes),
            "busy": worst_busy[0], "busy_process": worst_busy[1], "busy_cell": worst_busy[2],
            "lag_p95_s": worst_lag[0], "lag_process": worst_lag[1], "lag_cell": worst_lag[2],
            "launch_skew_p99_s": skew[0], "skew_cell": skew[2],
            "cells_late": int(grp["late"].sum()), "saturated": bool(grp["saturated"].any()),
        })
    hot = frame[frame["saturated"]]
    flagged = {str(t): sorted(g["cell"], key=label_key) for t, g in hot.groupby("target")}
    return rows, flagged


def _what(row: dict, busy_share: float, lag_s: float) -> str:
    """What the client did at one arm: its busiest process, latest loop and latest launch past
    the bounds."""
    parts = []
    if row["busy"] is not None and row["busy"] > busy_share:
        parts.append(f"{fmt_pct(row['busy'])} of a core in process {row['busy_process']}")
    if row["lag_p95_s"] is not None and row["lag_p95_s"] > lag_s:
        parts.append(f"loop lag p95 {fmt_ms(row['lag_p95_s'])} in process {row['lag_process']}")
    if row.get("cells_late"):
        parts.append(f"launch skew p99 {fmt_ms(row['launch_skew_p99_s'])}")
    return " and ".join(parts)


def _at_arm(row: dict, busy_share: float, lag_s: float, counted: str) -> str:
    """One arm's part of the sentence: what the client did there, and in how many cells."""
    late = f": {LATE}" if row.get("cells_late") else ""
    return f"{_what(row, busy_share, lag_s)} at {arm_name(row['arm'])}{late} ({counted})"


def _unrecorded(rows: list[dict]) -> str:
    missing = sum(r["cells"] - r["cells_recorded"] for r in rows)
    if not missing:
        return ""
    total = count(sum(r["cells"] for r in rows), "cell")
    return f"; {missing} of {total} predate the per-process client record (not assessed)"


def _kept_up(rows: list[dict]) -> str:
    """The quiet summary: the busiest process and the latest loop over a target's cells."""
    parts = []
    for column, process, text in (("busy", "busy_process", "at most {} of a core busy"),
                                  ("lag_p95_s", "lag_process", "loop lag p95 at most {}")):
        known = [r for r in rows if r[column] is not None]
        if not known:
            parts.append(text.format("n/a") + " (not recorded)")
            continue
        worst = max(known, key=lambda r, c=column: r[c])
        value = (fmt_pct if column == "busy" else fmt_ms)(worst[column])
        parts.append(f"{text.format(value)} (process {worst[process]})")
    skews = [r for r in rows if r["arm"] < 0 and r.get("launch_skew_p99_s") is not None]
    if skews:
        worst = max(skews, key=lambda r: r["launch_skew_p99_s"])
        parts.append(f"launch skew p99 at most {fmt_ms(worst['launch_skew_p99_s'])} "
                     f"({arm_name(worst['arm'])})")
    return "client kept up: " + ", ".join(parts) + _unrecorded(rows)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    busy_share, lag_s = float(setting(settings, CONFIG_KEY)), float(setting(settings, LAG_KEY))
    skew_s = float(setting(settings, SKEW_KEY))
    table, flagged = per_arm(tables.cells, busy_share, lag_s, skew_s)
    common = {"threshold": busy_share, "config_key": CONFIG_KEY}
    verdicts = []
    for target in tables.targets:
        rows = [r for r in table if r["target"] == target]
        thresholds = {CONFIG_KEY: busy_share, LAG_KEY: lag_s}
        if any(r["arm"] < 0 for r in rows):  # only a target with rate arms has a launch skew
            thresholds[SKEW_KEY] = skew_s
        if sum(r["cells_recorded"] for r in rows) == 0:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no per-process client record (older raw files)",
                f"Client saturation is not assessable: the raw files of {target} predate the "
                "per-process client record (each client process's busy share and event-loop "
                "lag), so nothing shows the client kept up; re-measure them to assess it.",
                evidence={"thresholds": thresholds}, **common,
            ))
            continue
        evidence = {"arms": {str(r["arm"]): plain(r) for r in rows}, "thresholds": thresholds}
        hot = [r for r in rows if r["saturated"]]
        if not hot:
            summary = _kept_up(rows)
            verdicts.append(judged(TRAP, TITLE, target, False, summary, f"The {summary}.",
                                   evidence=evidence, **common))
            continue
        counts = {r["arm"]: f"{r['cells_saturated']} of {count(r['cells'], 'cell')}" for r in hot}
        text = "; ".join(_at_arm(r, busy_share, lag_s, counts[r["arm"]]) for r in hot)
        arms = [r["arm"] for r in hot]
        if SERIAL_ARM in arms:  # the control of every within-rep ratio
            arms = [r["arm"] for r in rows]
            tail = (f"{text}{_unrecorded(rows)}; every ratio is taken against the serial arm, "
                    f"so no arm gets a headline; {REMEDY}.")
        else:
            tail = (f"{text}{_unrecorded(rows)}, so "
                    f"{'that arm gets' if len(hot) == 1 else 'those arms get'} no headline; "
                    f"{REMEDY}.")
        sentence = f"Client saturated: {tail}"
        warning = f"Warning: the client could not keep up: {tail}"
        why = {str(r["arm"]): f"{arm_name(r['arm'])} was measured by a client that could not "
                              f"keep up ({_what(r, busy_share, lag_s)}, {counts[r['arm']]})"
               for r in hot}
        verdicts.append(judged(
            TRAP, TITLE, target, True, f"client saturated: {text}", sentence, effect="exclude",
            arms=arms, cells=flagged.get(target, []),
            evidence=evidence | {"why": why, "warnings": [warning]}, **common,
        ))
    return verdicts, {"client_saturation": pd.DataFrame(table, columns=ARM_COLUMNS)}
