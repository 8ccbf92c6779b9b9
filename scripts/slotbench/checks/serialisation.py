"""Trap: a parallel arm the server served one request at a time.

A server with one slot (OLLAMA_NUM_PARALLEL=1, llama-server --parallel 1) queues the extra
requests, so their generation windows [t_first_s, t_done_s] run back to back although the client
had ``arm`` in flight; "no batching gain" in that arm is then a server setting, not a property of
the engine. The verdict rests on that overlap alone; the queue gap (Ollama's total - load -
prompt_eval - eval, the time spent waiting for a slot) and the client-side wait (TTFT over the
serial arm's median TTFT) growing with service order are reported as corroboration, as slopes in
seconds per place and as median Spearman trends. A cell with a request whose stream was buffered
on its way (slotbench.tables.delivery) is not read: its windows say when bursts arrived, not when
the server generated, and would blame the server's slots for what a proxy or a socket did.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, constant, judged, not_assessable, records
from slotbench.core import stats
from slotbench.core.cells import (OVERLAP_TOLERANCE_S, SERIAL_ARM, arm_name, label_series,
                             most_at_once_by_cell)
from slotbench.core.fmt import count, fmt_num
from slotbench.tables.delivery import buffered

TRAP = "serialisation"
TITLE = "Serialised arm (server ran one request at a time)"
ORDER = 10
TABLES = ("serialisation",)

SERIALISATION_COLUMNS = [
    "target", "arm", "n_cells", "in_flight_median", "max_overlap_median", "serialised_cells",
    "queue_gap_slope_s", "queue_gap_trend", "wait_slope_s", "wait_trend",
    "serialised", "cause", "cells",
]
SERIALISED_CAUSE = (
    "the server served one request at a time: likely OLLAMA_NUM_PARALLEL=1 (or a model "
    "architecture Ollama forces to one slot) on Ollama, or --parallel 1 on llama-server; the "
    "'no batching gain' in this arm is a server setting, not a property of the engine"
)
# "(nearly) all cells": one odd cell in a handful (e.g. two very short outputs that happened
# not to overlap) must not hide a server that otherwise never overlapped, nor invent one.
SERIALISED_SHARE = 0.8


def _service_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests with their cell label, service order, Ollama queue gap and client-side wait."""
    ns = [
        "total_duration_ns", "load_duration_ns", "prompt_eval_duration_ns", "eval_duration_ns",
    ]
    used = ["target", "run", "rep", "arm", "t_sent_s", "t_first_s", "t_done_s", *ns]
    df = requests[[c for c in used if c in requests]].dropna(subset=["t_first_s", "t_done_s"])
    df["_cell"] = label_series(df)
    # the order the server served them in: who got a first token first
    df["_order"] = df.groupby("_cell")["t_first_s"].rank(method="first") - 1
    if all(c in df for c in ns):
        total, evald = (pd.to_numeric(df[c], errors="coerce") for c in (ns[0], ns[3]))
        load, prompt = (pd.to_numeric(df[c], errors="coerce").fillna(0) for c in ns[1:3])
        df["_queue_gap_s"] = (total - load - prompt - evald) / 1e9  # NaN unless Ollama sent them
    else:
        df["_queue_gap_s"] = float("nan")
    df["_ttft_s"] = df["t_first_s"] - df["t_sent_s"]
    serial_ttft = df[df["arm"] == SERIAL_ARM].groupby("target")["_ttft_s"].agg(stats.median)
    df["_wait_s"] = df["_ttft_s"] - df["target"].map(serial_ttft)
    return df


def _trend(grp: pd.DataFrame, value: str) -> tuple[float, float]:
    """(slope in seconds per place, median Spearman trend) of ``value`` over service order."""
    df = grp.dropna(subset=[value])
    if df.empty:
        return float("nan"), float("nan")
    return (stats.within_group_slope(df["_order"], df[value], df["_cell"]),
            stats.median_rank_corr(df["_order"], df[value], df["_cell"]))


def serialisation(requests: pd.DataFrame, tolerance_s: float = OVERLAP_TOLERANCE_S) -> pd.DataFrame:
    """Per (target, parallel arm): did the server ever generate two of its requests at once?"""
    if requests.empty:
        return pd.DataFrame(columns=SERIALISATION_COLUMNS)
    df = _service_frame(requests)
    rows = []
    for (target, arm), grp in df[df["arm"] > SERIAL_ARM].groupby(["target", "arm"], sort=True):
        # generating at once (server side) vs in flight at once (client side), label order
        labels = grp["_cell"].to_numpy()
        overlaps = list(most_at_once_by_cell(labels, grp["t_first_s"], grp["t_done_s"],
                                             tolerance_s).values())
        in_flight = list(most_at_once_by_cell(labels, grp["t_sent_s"], grp["t_done_s"],
                                              tolerance_s).values())
        n = len(overlaps)
        serialised_cells = sum(1 for o in overlaps if o <= 1)
        # only the server's doing when the client really had more than one request in flight
        flight_median = stats.median(in_flight)
        serialised = bool(n and flight_median > 1 and serialised_cells >= SERIALISED_SHARE * n)
        gap_slope, gap_trend = _trend(grp, "_queue_gap_s")
        wait_slope, wait_trend = _trend(grp, "_wait_s")
        rows.append({
            "target": target, "arm": int(arm), "n_cells": n, "in_flight_median": flight_median,
            "max_overlap_median": stats.median(overlaps), "serialised_cells": serialised_cells,
            "queue_gap_slope_s": gap_slope, "queue_gap_trend": gap_trend,
            "wait_slope_s": wait_slope, "wait_trend": wait_trend, "serialised": serialised,
            "cause": SERIALISED_CAUSE if serialised else None,
            "cells": ";".join(sorted(grp["_cell"].unique())),
        })
    return pd.DataFrame(rows, columns=SERIALISATION_COLUMNS)


def _int_or_none(x):
    try:
        return None if x is None or pd.isna(x) else int(x)
    except (TypeError, ValueError):
        return None  # e.g. a stated setting written as text


def stated_parallel(fps: list[dict]) -> tuple[str, int | None] | None:
    """The parallel setting the target claims (stated OLLAMA_NUM_PARALLEL or -np), if any."""
    for fp in fps:
        server = fp.get("server") or {}
        env = server.get("ollama_env") or {}
        if "OLLAMA_NUM_PARALLEL" in env:
            value = env["OLLAMA_NUM_PARALLEL"]
            return f"OLLAMA_NUM_PARALLEL={value}", _int_or_none(value)
        flags = server.get("flags") or {}
        if "parallel" in flags:
            return f"--parallel {flags['parallel']}", _int_or_none(flags["parallel"])
    return None


def reported_slots(fps: list[dict]) -> int | None:
    """The slots a llama-server reports (total_slots in its GET /props), if one does: an
    external server's, which states no setting of slotbench's."""
    for fp in fps:
        server = fp.get("server") or {}
        total = _int_or_none((server.get("props") or {}).get("total_slots"))
        if server.get("backend") == "llamacpp" and total is not None:
            return total
    return None


def warning_text(row: dict, fps: list[dict]) -> str:
    """What a serialised arm means, for the warning shown before the headline."""
    name = arm_name(row["arm"])
    flight = row["arm"] if pd.isna(row["in_flight_median"]) else int(row["in_flight_median"])
    text = (
        f"Warning: {name} was served one request at a time. In {int(row['serialised_cells'])} of "
        f"{count(int(row['n_cells']), 'cell')} no two of its requests were generating at once "
        f"({constant(SERIALISED_SHARE=SERIALISED_SHARE, OVERLAP_TOLERANCE_S=OVERLAP_TOLERANCE_S)}"
        f": the share of cells that decides it, and the gap within which two windows still "
        f"count as one after the other), although the client had {flight} in flight"
    )
    gap, wait = row["queue_gap_slope_s"], row["wait_slope_s"]
    if not pd.isna(gap):
        text += (
            f"; Ollama's own queue wait grew by {fmt_num(gap, 2)} s for each place a request "
            "stood in the order of service"
        )
    elif not pd.isna(wait):
        text += (
            f"; time to first token grew by {fmt_num(wait, 2)} s for each place a request stood "
            "in the order of service"
        )
    stated = stated_parallel(fps)
    if stated is None and reported_slots(fps) == 1:
        stated = ("total_slots 1 in its GET /props", 1)
    if stated and stated[1] == 1:
        return text + (
            f". The server has one slot ({stated[0]}), so the queue is what this setting "
            f"measures, not a fault: {name}'s speedup, gen_gain and pipelining are the cost of "
            "that queue."
        )
    cause = SERIALISED_CAUSE.removeprefix("the server served one request at a time: likely ")
    text += f". Likely cause: {cause}."
    if stated and (stated[1] is None or stated[1] > 1):
        text += (
            f" The stated setting is {stated[0]}, so the server either did not run with it or "
            "forced this model to one slot."
        )
    return text + (
        f" Read {name}'s speedup, gen_gain and pipelining as the cost of a queue, not as the "
        "engine's batching."
    )


def capped_note(row: dict) -> str | None:
    """A parallel arm that overlapped, but with fewer requests than it had in flight."""
    overlap = row["max_overlap_median"]
    if row["serialised"] or pd.isna(overlap) or not 1 < overlap < row["arm"]:
        return None
    return (
        f"At {arm_name(row['arm'])} at most {fmt_num(overlap, 1)} requests were generating at "
        f"once in the median cell, fewer than the {row['arm']} in flight: the server seems to run "
        "fewer slots than this arm asks for."
    )


def unbuffered_cells(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests of the cells none of whose requests arrived in bursts."""
    if requests.empty:
        return requests
    labels = label_series(requests)
    held = set(labels[buffered(requests).to_numpy()])
    return requests[~labels.isin(held).to_numpy()]


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    requests = tables.measured_requests
    readable = unbuffered_cells(requests)
    table = serialisation(readable)
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target].sort_values("arm").to_dict("records")
        parallel = requests[(requests["target"] == target) & (requests["arm"] > SERIAL_ARM)]
        if not rows and len(parallel) > ((readable["target"] == target)
                                         & (readable["arm"] > SERIAL_ARM)).sum():
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "the stream was buffered on its way to the client",
                "The stream was buffered between the server and the client (see the buffered "
                "stream check), so when the parallel arms' requests generated cannot be seen "
                "from the client: whether the server ran them together is not assessable.",
            ))
            continue
        if not rows:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no parallel arm with request timings",
                "No parallel arm has request timings, so whether the server ran its requests "
                "together cannot be seen.",
            ))
            continue
        serialised = [r for r in rows if r["serialised"]]
        fps = tables.fingerprints_of(target)
        warnings = [warning_text(r, fps) for r in serialised]
        names = [arm_name(r["arm"]) for r in serialised]
        summary = (f"{', '.join(names)} served one request at a time" if serialised
                   else "every parallel arm ran its requests together")
        verdicts.append(judged(
            TRAP, TITLE, target, serialised, summary,
            " ".join(warnings) if warnings else f"Serialisation: {summary}.",
            threshold=SERIALISED_SHARE, effect="warn",
            evidence={"rows": records(pd.DataFrame(rows)), "warnings": warnings,
                      "capped": [n for n in map(capped_note, rows) if n]},
            cells=sorted({c for r in serialised for c in r["cells"].split(";")}),
            arms=[int(r["arm"]) for r in serialised],
        ))
    return verdicts, {"serialisation": table}
