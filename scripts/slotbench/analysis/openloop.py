"""The open loop's numbers per target and rate arm, and the capacity in requests/s.

Over a rate arm's cells (one per rep, runs pooled; slotbench.core.cells numbers the arm
-round(rate × 1000)): the offered and achieved rate, TTFT p50/p95/p99 (each cell's, counted from
the planned arrival: consolidate.cell_metrics), per-user tok/s and its change against serial-1
of the same rep, aggregate tok/s and the speedup, and the effective concurrency (requests in
flight, time-weighted: slotbench.tables.openloop), each a median with a bootstrap interval over the
cells; and the goodput, the share of the arm's requests that met every service level set:
``slo.user_tps_min`` on the request's own rate (output_tokens / gen_s; a request without a
generation time cannot show it and misses) and ``slo.ttft_s_max`` on its TTFT from its planned
arrival (a request without a first token misses).

The goodput's interval is a bootstrap over reps (the arm's cells resampled, their requests pooled
in each draw), not MLPerf's binomial early stopping, because the requests of one rep queue behind
one another on one server and so are not the independent trials a binomial bound counts, while
the reps are.

The capacity in requests/s is judged as slotbench.analysis.capacity judges concurrency: an arm meets
``slo.goodput`` when its whole goodput interval is at or above it, misses it when the whole
interval is below, and is undetermined otherwise; the capacity is the largest offered rate that
meets, every lower rate meeting too. Nothing between two measured rates was measured, so nothing
is interpolated: the limit lies "between λ1 and λ2". Without ``slo.goodput`` there is no capacity
statement. For the effective-concurrency axis every arm of a target with rate arms (its
concurrency levels too) also gets its requests in flight, aggregate tok/s and TTFT p95.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slotbench.analysis.capacity import MEETS, MISSES, UNDETERMINED, capacity
from slotbench.core import stats
from slotbench.core.cells import CELL_KEYS, arm_name, arm_order, arm_rate, cell_labels, raw_hashes

SCHEMA = "slotbench.openloop/1"
# The per-request service levels goodput counts (slo.*).
LEVELS = ("user_tps_min", "ttft_s_max")
# Each number of a rate arm -> the cells (ratios) column it is the median of.
COLUMNS = {
    "achieved_rate": "achieved_rate",
    "ttft_p50": "ttft_s",
    "ttft_p95": "ttft_p95_s",
    "ttft_p99": "ttft_p99_s",
    "user_tps": "user_tps",
    "user_ratio": "user_ratio",
    "agg_tps": "agg_tps",
    "speedup": "speedup",
    "in_flight": "in_flight",
}
# The numbers of every arm on the effective-concurrency axis.
AXIS = ("in_flight", "agg_tps", "ttft_p95")
# The request columns goodput reads (requests.parquet).
REQUEST_COLUMNS = CELL_KEYS + ["output_tokens", "gen_s", "t_sent_s", "t_planned_s", "t_first_s",
                               "control"]
# Why a target has no capacity in requests/s.
NO_RATE_ARMS, NO_GOODPUT_LEVEL, NO_SERVICE_LEVEL = "no_rate_arms", "no_goodput", "no_levels"


def request_goodput(requests: pd.DataFrame, slo: dict) -> pd.DataFrame:
    """Per request of a rate arm (control requests left out): its TTFT from its planned
    arrival, its own generation rate, and whether it met every level set (``good``)."""
    req = requests[requests["arm"] < 0]
    if "control" in req:
        req = req[~req["control"].fillna(False).astype(bool)]

    def num(col):  # a column an older table lacks reads as unknown
        if col not in req:
            return pd.Series(np.nan, index=req.index)
        return pd.to_numeric(req[col], errors="coerce").astype(float)

    planned = num("t_planned_s")
    ttft = num("t_first_s") - planned.where(planned.notna(), num("t_sent_s"))
    gen = num("gen_s")
    rate = num("output_tokens") / gen.where(gen > 0)
    good = pd.Series(True, index=req.index)
    if slo.get("user_tps_min") is not None:  # NaN compares false: an unshown rate misses
        good &= rate >= float(slo["user_tps_min"])
    if slo.get("ttft_s_max") is not None:
        good &= ttft <= float(slo["ttft_s_max"])
    return req[CELL_KEYS].assign(ttft_s=ttft, user_tps=rate, good=good)


def cell_goodput(requests: pd.DataFrame | None, slo: dict) -> pd.DataFrame:
    """Per rate-arm cell: its requests and how many met every level."""
    if requests is None or requests.empty:
        return pd.DataFrame(columns=CELL_KEYS + ["requests", "good"])
    per = request_goodput(requests, slo)
    return per.groupby(CELL_KEYS, as_index=False).agg(requests=("good", "size"),
                                                      good=("good", "sum"))


def _judge(lo: float, hi: float, level: float | None) -> str | None:
    if level is None:
        return None
    if pd.isna(lo) or pd.isna(hi):
        return UNDETERMINED
    return MEETS if lo >= level else MISSES if hi < level else UNDETERMINED


def _medians(grp: pd.DataFrame, names, resamples: np.ndarray, ci: float) -> dict:
    row = {}
    for name in names:
        col = COLUMNS[name]
        values = grp[col].to_numpy(dtype=float) if col in grp else np.full(len(grp), np.nan)
        row[name], row[f"{name}_lo"], row[f"{name}_hi"] = stats.median_ci(values, resamples, ci)
    return row


def _cells_of(grp: pd.DataFrame) -> dict:
    arm = int(grp["arm"].iloc[0])
    return {"arm": arm, "name": arm_name(arm), "n_cells": int(len(grp)),
            "cells": cell_labels(grp), "raw_sha256": raw_hashes(grp)}


def arm_row(grp: pd.DataFrame, counts: pd.DataFrame, slo: dict, n_boot: int, ci: float,
            seed: int) -> dict:
    """One rate arm's numbers over its cells (every one from the same resampled cells), its
    goodput and the verdict on slo.goodput (None when it is not set or no level is)."""
    resamples = stats.resample_indices(len(grp), n_boot, seed)
    arm = int(grp["arm"].iloc[0])
    offered = stats.median(grp["offered_rate"]) if "offered_rate" in grp else float("nan")
    row = _cells_of(grp) | {"rate": arm_rate(arm),
                            "offered_rate": arm_rate(arm) if pd.isna(offered) else offered}
    row |= _medians(grp, COLUMNS, resamples, ci)
    merged = grp[CELL_KEYS].merge(counts, on=CELL_KEYS, how="left")  # in grp's order
    n = pd.to_numeric(merged["requests"], errors="coerce").fillna(0).to_numpy(dtype=float)
    good = pd.to_numeric(merged["good"], errors="coerce").fillna(0).to_numpy(dtype=float)
    row["requests"], row["requests_good"] = int(n.sum()), int(good.sum())
    if any(slo.get(k) is not None for k in LEVELS):
        row["goodput"], row["goodput_lo"], row["goodput_hi"] = stats.share_ci(good, n, resamples,
                                                                              ci)
        row["verdict"] = _judge(row["goodput_lo"], row["goodput_hi"], slo.get("goodput"))
    else:
        row |= {"goodput": None, "goodput_lo": None, "goodput_hi": None, "verdict": None}
    return row


def axis_row(grp: pd.DataFrame, n_boot: int, ci: float, seed: int) -> dict:
    """An arm (either loop) on the effective-concurrency axis: requests in flight, aggregate
    tok/s and TTFT p95, medians with bootstrap intervals over its cells."""
    resamples = stats.resample_indices(len(grp), n_boot, seed)
    rate = int(grp["arm"].iloc[0]) < 0
    return _cells_of(grp) | {"open": rate} | _medians(grp, AXIS, resamples, ci)


def rate_capacity(rows: list[dict], slo: dict) -> tuple[dict | None, str | None]:
    """(the capacity in requests/s, None) or (None, why there is none): the largest offered rate
    meeting slo.goodput with every lower rate meeting too, and what the next rate says."""
    if not rows:
        return None, NO_RATE_ARMS
    if slo.get("goodput") is None:
        return None, NO_GOODPUT_LEVEL
    if not any(slo.get(k) is not None for k in LEVELS):
        return None, NO_SERVICE_LEVEL
    cap = capacity(sorted(rows, key=lambda r: r["rate"]))  # by rate, lowest first

    def rate(arm):
        return None if arm is None else arm_rate(arm)

    return {
        "level": float(slo["goodput"]),
        "arm": cap["arm"], "rate": rate(cap["arm"]),
        "next_arm": cap["next_arm"], "next_rate": rate(cap["next_arm"]),
        "next_verdict": cap["next_verdict"],
        # no interpolation: the limit lies somewhere in (rate, next_rate) when the next misses
        "between": [rate(a) for a in cap["between"]] if cap["between"] else None,
    }, None


def target_record(frame: pd.DataFrame, counts: pd.DataFrame, slo: dict, n_boot: int, ci: float,
                  seed: int) -> dict:
    """One target's rate arms, its arms on the effective-concurrency axis and its capacity."""
    groups = sorted(frame.groupby("arm", sort=True), key=lambda kv: arm_order(kv[0]))
    rows = [arm_row(g, counts, slo, n_boot, ci, seed) for arm, g in groups if int(arm) < 0]
    axis = [axis_row(g, n_boot, ci, seed) for _, g in groups] if rows else []
    cap, reason = rate_capacity(rows, slo)
    return {"arms": rows, "axis": axis, "capacity": cap, "capacity_reason": reason}


def assess(ratios: pd.DataFrame, requests: pd.DataFrame | None, slo: dict, n_boot: int,
           ci: float, seed: int) -> dict:
    """results/<experiment>/analysis/openloop.json: every target of the ratios (the headline
    cells with their within-rep ratios), each with its rate arms (none: an empty record) and its
    capacity."""
    levels = {k: slo.get(k) for k in LEVELS if slo.get(k) is not None}
    counts = cell_goodput(requests, slo)
    out = {"schema": SCHEMA, "slo": {**levels, "goodput": slo.get("goodput")}, "ci": float(ci),
           "targets": {}}
    for target in sorted(ratios["target"].astype(str).unique()):
        frame = ratios[ratios["target"].astype(str) == target]
        out["targets"][target] = target_record(frame, counts, slo, n_boot, ci, seed)
    return out


def has_rate_arms(record: dict | None) -> bool:
    """Whether any target of an openloop.json record has a rate arm."""
    return any(t.get("arms") for t in ((record or {}).get("targets") or {}).values())


# The check whose verdict names the rate arms whose queue grew all cell long (checks/overload.py).
OVERLOAD_TRAP = "overload"


def overloaded(verdicts: list[dict] | None) -> dict[str, set[int]]:
    """target -> the rate arms the overload check's fired verdicts name (none without it)."""
    out: dict[str, set[int]] = {}
    for v in verdicts or []:
        if v.get("trap") == OVERLOAD_TRAP and v.get("fired"):
            out.setdefault(str(v.get("target")), set()).update(int(a) for a in v.get("arms") or [])
    return out
