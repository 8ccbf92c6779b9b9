"""Within-rep ratios and per-arm summaries: the numbers the report quotes.

Every ratio is taken against the serial arm of the *same* rep
(docs/method.md#within-rep-ratios), so slow drift across reps (thermal decay, background load)
cancels instead of leaking into the comparison.
"""

from __future__ import annotations

import math

import pandas as pd

from slotbench.core import sequential, stats
from slotbench.core.cells import SERIAL_ARM, arm_order, cell_labels, raw_hashes
from slotbench.tables.consolidate import REP_KEYS, headline_cells

# |pipelining - 1| within this: the generation stage's gain explains the whole aggregate gain.
PIPELINING_TOLERANCE = 0.05
# How each parallel arm's gain splits, for the report's batching-or-pipelining reading.
DECOMPOSITIONS = (
    "pipelining",  # the generation stage loses (gen_gain < 1) yet the aggregate gains: overlap
    "neither",  # the generation stage loses and so does the aggregate
    "batching",  # batching is the whole story (pipelining within the tolerance of 1)
    "batching+pipelining",  # batching gains and pipelining adds on top
    "batching-lost",  # batching gains, but part of it is lost outside the generation stage
)
# Ratios whose median and bootstrap interval the summary quotes; efficiency is derived from
# speedup afterwards (median speedup / arm), so it is not bootstrapped on its own.
BOOTSTRAPPED = ["speedup", "user_ratio", "ttft_ratio", "gen_gain", "pipelining"]
# The arm's own rates and TTFT: their medians as before, with an interval from the same
# resamples (the frontier's error bars, slotbench.analysis.frontier)
RATES = ["agg_tps", "user_tps", "ttft_s"]
SUMMARY_COLUMNS = [
    "target", "arm", "n_reps",
    "agg_tps", "agg_tps_lo", "agg_tps_hi", "speedup", "speedup_lo", "speedup_hi",
    "efficiency", "efficiency_lo", "efficiency_hi",
    "user_tps", "user_tps_lo", "user_tps_hi", "user_ratio", "user_ratio_lo", "user_ratio_hi",
    "ttft_s", "ttft_s_lo", "ttft_s_hi", "ttft_ratio", "ttft_ratio_lo", "ttft_ratio_hi",
    "gen_gain", "gen_gain_lo", "gen_gain_hi",
    "pipelining", "pipelining_lo", "pipelining_hi",
    # the streams gen_gain counts (the arm, or fewer where the server queued) and in how many
    # of the arm's cells it queued
    "streams", "queued_cells",
    "speedup_includes_one", "decomposition", "ci", "n_requests", "n_client_timed",
    # the server's own evidence (slotbench.tables.telemetry) and what a token cost: medians
    # over the arm's cells with intervals from the same resamples; null: not assessable
    "server_batch", "server_batch_lo", "server_batch_hi",
    "server_queue", "server_queue_lo", "server_queue_hi",
    "j_per_token", "j_per_token_lo", "j_per_token_hi", "energy_source",
    "usd_per_mtok", "usd_per_mtok_lo", "usd_per_mtok_hi", "telemetry_note",
    "cells", "raw_sha256",
]
# The server's evidence and a token's cost, summarised like the ratios where a cell has them.
EVIDENCE = ["server_batch", "server_queue", "j_per_token", "usd_per_mtok"]


def _serial_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The one serial cell of every rep, or a ValueError saying which rep breaks that."""
    serial = cells.loc[cells["arm"] == SERIAL_ARM, REP_KEYS + ["agg_tps", "user_tps", "ttft_s"]]
    problems = []
    dup = serial[serial.duplicated(REP_KEYS, keep="first")]
    for target, run, rep in dup[REP_KEYS].drop_duplicates().itertuples(index=False, name=None):
        problems.append(f"target {target!r} run {run!r} rep {rep} has more than one serial cell")
    reps = cells[REP_KEYS].drop_duplicates()
    missing = reps.merge(serial[REP_KEYS].drop_duplicates(), how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"]
    for target, run, rep in missing[REP_KEYS].itertuples(index=False, name=None):
        problems.append(f"target {target!r} run {run!r} rep {rep} has no serial (arm 1) cell")
    if problems:
        raise ValueError(
            "; ".join(problems) + ". Speedups are within-rep ratios against the serial arm, so "
            "every rep needs exactly one arm-1 cell: check that arms in the config include 1, "
            "re-run the affected rep, or drop its cells from results/<experiment>/cells.parquet."
        )
    return serial


def headline_ratios(cells: pd.DataFrame) -> pd.DataFrame:
    """The ratios the analysis summarises: those of the cells behind the headline
    (consolidate.headline_cells, which the checks and the figures read as well)."""
    return cell_ratios(headline_cells(cells))


def cell_ratios(cells: pd.DataFrame) -> pd.DataFrame:
    """Each cell's ratios against its own rep's serial cell (docs/method.md#within-rep-ratios).

    gen_gain is what the generation stage delivered across the arm's streams; pipelining is the
    part of the aggregate speedup that batching does not explain (prefill/decode overlap).
    """
    serial = _serial_cells(cells)
    out = cells.merge(
        serial, on=REP_KEYS, how="left", suffixes=("", "_serial"), validate="many_to_one"
    )
    arm = concurrency(out)
    speedup = out["agg_tps"] / out["agg_tps_serial"]
    # Per-user rate x N assumes N streams generating at once. When the server generated for
    # fewer at a time than the arm had in flight (it queued the rest for a slot), the streams
    # that really shared the generation stage are the time-weighted number generating at once;
    # a rate arm's streams are always those (its concurrency is what the arrivals made it).
    queued = cells_queued(out)
    rate = out["arm"] < 0
    streams = arm.where(~(queued | rate), out.get("gen_streams", arm))
    gen_gain = out["user_tps"] * streams / out["user_tps_serial"]
    out = out.assign(
        queued=queued,
        streams=streams,
        speedup=speedup,
        efficiency=speedup / arm,
        user_ratio=out["user_tps"] / out["user_tps_serial"],
        ttft_ratio=out["ttft_s"] / out["ttft_s_serial"],
        gen_gain=gen_gain,
        pipelining=speedup / gen_gain,
    )
    return out.drop(columns=["agg_tps_serial", "user_tps_serial", "ttft_s_serial"])


def with_costs(ratios: pd.DataFrame, prices: dict) -> pd.DataFrame:
    """Each cell's energy per output token (joules: the cell's energy_j over its tokens_out)
    and, for a target with ``usd_per_hour`` in ``prices``, what a million output tokens cost
    at the cell's aggregate rate. Null where the energy or the price is not known."""
    unknown = pd.Series(float("nan"), index=ratios.index)
    energy, tokens = (ratios.get(c, unknown).astype(float) for c in ("energy_j", "tokens_out"))
    price = ratios["target"].map(lambda t: prices.get(t)).astype(float)
    return ratios.assign(
        j_per_token=energy / tokens,
        usd_per_mtok=price / 3600.0 / ratios["agg_tps"].astype(float) * 1e6,
    )


def concurrency(cells: pd.DataFrame) -> pd.Series:
    """Each cell's concurrency: a closed-loop arm's N, a rate arm's effective concurrency (the
    time-weighted number of its requests in flight, slotbench.tables.openloop)."""
    arm = cells["arm"].astype(float)
    if "in_flight" not in cells:
        return arm
    return arm.where(arm > 0, cells["in_flight"].astype(float))


def cells_queued(cells: pd.DataFrame) -> pd.Series:
    """Cells whose server generated for fewer requests at once than the arm kept in flight."""
    if "gen_streams_max" not in cells:
        return pd.Series(False, index=cells.index)
    return ((cells["gen_streams_max"] < cells["arm"]) & cells["gen_streams"].notna()
            & (cells["arm"] > 0))


def decomposition(speedup: float, gen_gain: float, pipelining: float) -> str | None:
    """Which of DECOMPOSITIONS an arm's medians describe (None when one is missing)."""
    if any(pd.isna(v) for v in (speedup, gen_gain, pipelining)):
        return None
    if gen_gain < 1:
        return "pipelining" if speedup > 1 else "neither"
    if abs(pipelining - 1) <= PIPELINING_TOLERANCE:
        return "batching"
    return "batching+pipelining" if pipelining > 1 else "batching-lost"


def summarise(ratios: pd.DataFrame, n_boot: int, ci: float, seed: int) -> pd.DataFrame:
    """One row per (target, arm): medians across reps (runs pooled) with bootstrap CIs, with
    ``n_boot`` resamples at level ``ci`` from ``seed`` (analysis.bootstrap, analysis.ci, seed).

    Every metric of an arm is bootstrapped from the same resampled cells, and each arm starts
    its own generator from ``seed``, so an arm's interval does not change when another target
    or arm is added to the data.
    """
    rows = []
    for (target, arm), grp in ratios.groupby(["target", "arm"], sort=True):
        resamples = stats.resample_indices(len(grp), n_boot, seed)
        row = {
            "target": target,
            "arm": int(arm),
            "n_reps": int(len(grp[["run", "rep"]].drop_duplicates())),
            "agg_tps": stats.median(grp["agg_tps"]),
            "user_tps": stats.median(grp["user_tps"]),
            "ttft_s": stats.median(grp["ttft_s"]),
            "streams": stats.median(grp["streams"]),
            "queued_cells": int(grp["queued"].sum()),
            "ci": float(ci),
            "n_requests": int(grp["n_requests"].sum()) if "n_requests" in grp else None,
            "n_client_timed": (int(grp["n_client_timed"].sum())
                               if "n_client_timed" in grp else None),
            "cells": ";".join(cell_labels(grp)),
            "raw_sha256": ";".join(raw_hashes(grp)),
        }
        for metric in BOOTSTRAPPED:
            values = grp[metric].to_numpy(dtype=float)
            row[metric], row[f"{metric}_lo"], row[f"{metric}_hi"] = stats.median_ci(
                values, resamples, ci
            )
        for metric in RATES:
            _, row[f"{metric}_lo"], row[f"{metric}_hi"] = stats.median_ci(
                grp[metric].to_numpy(dtype=float), resamples, ci)
        for metric in EVIDENCE:
            values = (grp[metric] if metric in grp else pd.Series(dtype=float)).to_numpy(
                dtype=float)
            row[metric], row[f"{metric}_lo"], row[f"{metric}_hi"] = (
                stats.median_ci(values, resamples, ci) if len(values) and (
                    pd.notna(values).any()) else (float("nan"),) * 3)
        row["energy_source"] = _one_or_none(grp, "energy_source")
        row["telemetry_note"] = _one_or_none(grp, "telemetry_note")
        # a rate arm's concurrency is its cells' median effective concurrency
        level = int(arm) if int(arm) > 0 else stats.median(concurrency(grp))
        for suffix in ("", "_lo", "_hi"):
            row[f"efficiency{suffix}"] = row[f"speedup{suffix}"] / level
        if int(arm) != SERIAL_ARM:
            row["speedup_includes_one"] = bool(row["speedup_lo"] <= 1 <= row["speedup_hi"])
            row["decomposition"] = decomposition(row["speedup"], row["gen_gain"],
                                                 row["pipelining"])
        rows.append(row)
    rows.sort(key=lambda r: (r["target"], arm_order(r["arm"])))
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _one_or_none(grp: pd.DataFrame, column: str) -> str | None:
    """The arm's cells' most frequent value of ``column`` (the telemetry's source or note)."""
    if column not in grp or grp[column].isna().all():
        return None
    return str(grp[column].dropna().astype(str).mode().iloc[0])


POSITION_COLUMNS = ["target", "arm", "position", "median_agg_tps", "n_cells", "cells"]


def position_medians(cells: pd.DataFrame) -> pd.DataFrame:
    """Median agg_tps of each arm at each position it occupied (runs pooled, per target): the
    rotation check's and the positions figure's raw material."""
    rows = []
    for (target, arm, position), grp in cells.groupby(["target", "arm", "position"], sort=True):
        rows.append({
            "target": target, "arm": int(arm), "position": int(position),
            "median_agg_tps": stats.median(grp["agg_tps"]), "n_cells": int(len(grp)),
            "cells": ";".join(cell_labels(grp)),
        })
    return pd.DataFrame(rows, columns=POSITION_COLUMNS)


def sequential_summary(summary: pd.DataFrame, ratios: pd.DataFrame, ci: float,
                       metrics) -> pd.DataFrame:
    """The summary with each of ``metrics``' intervals replaced by its sequential one (the
    confidence sequence hulled across runs, at level ``ci``), and the efficiency and
    speedup-includes-one that follow from the speedup's: what a sequential experiment
    publishes, valid although the intervals' width decided when it stopped."""
    out = summary.copy()
    alpha = 1.0 - ci
    for i, row in out.iterrows():
        grp = ratios[(ratios["target"] == row["target"]) & (ratios["arm"] == row["arm"])]
        runs = sorted(set(grp["run"].astype(str)))
        for metric in metrics:
            by_run = [grp.loc[grp["run"].astype(str) == run, metric].to_numpy(float)
                      for run in runs]
            value, lo, hi = sequential.interval(by_run, alpha)
            # an unbounded side (too few reps for the sequence to close it) is no bound: null
            lo, hi = (b if math.isfinite(b) else float("nan") for b in (lo, hi))
            out.loc[i, [metric, f"{metric}_lo", f"{metric}_hi"]] = [value, lo, hi]
        level = row["speedup"] / row["efficiency"] if row["efficiency"] else float("nan")
        for suffix in ("", "_lo", "_hi"):
            out.loc[i, f"efficiency{suffix}"] = out.loc[i, f"speedup{suffix}"] / level
        if int(row["arm"]) != SERIAL_ARM:
            out.loc[i, "speedup_includes_one"] = bool(
                out.loc[i, "speedup_lo"] <= 1 <= out.loc[i, "speedup_hi"])
    return out
