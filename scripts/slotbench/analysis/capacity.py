"""Capacity under a service level, and the saturation point: the operator's "how many users fit?".

Each arm is judged on its per-rep cells with a bootstrap over them, never on a median alone: an
arm *meets* a level only when the level holds over the arm's whole interval, *misses* it when
the whole interval is on the wrong side, and is *undetermined* otherwise. The capacity is the
largest arm that meets every level with every smaller arm meeting too. Between two measured
arms nothing was measured, so nothing is interpolated: the answer says "between N and M".
"""

from __future__ import annotations

import pandas as pd

from slotbench.core import stats

MEETS, MISSES, UNDETERMINED = "meets", "misses", "undetermined"
# The cell column each TTFT percentile reads (consolidate.cell_metrics).
TTFT_COLUMN = {"p50": "ttft_s", "p95": "ttft_p95_s"}


def _judge(lo: float, hi: float, limit: float | None, at_least: bool) -> str | None:
    if limit is None:
        return None
    if pd.isna(lo) or pd.isna(hi):
        return UNDETERMINED
    if at_least:
        return MEETS if lo >= limit else MISSES if hi < limit else UNDETERMINED
    return MEETS if hi <= limit else MISSES if lo > limit else UNDETERMINED


def arm_rows(cells: pd.DataFrame, slo: dict, n_boot: int, ci: float, seed: int) -> list[dict]:
    """Per arm of one target: the per-user rate, the judged TTFT and the aggregate, each as a
    median with its bootstrap interval over the arm's cells, and the verdict on each level."""
    ttft_col = TTFT_COLUMN[slo["ttft_percentile"]]
    rows = []
    for arm, grp in cells.groupby("arm", sort=True):
        resamples = stats.resample_indices(len(grp), n_boot, seed)
        row = {"arm": int(arm), "cells": len(grp)}
        for name, col in (("user_tps", "user_tps"), ("ttft", ttft_col), ("agg_tps", "agg_tps")):
            values = grp[col].to_numpy(dtype=float) if col in grp else [float("nan")] * len(grp)
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = stats.median_ci(values, resamples, ci)
        judged = {
            "user_tps": _judge(row["user_tps_lo"], row["user_tps_hi"], slo.get("user_tps_min"),
                               at_least=True),
            "ttft": _judge(row["ttft_lo"], row["ttft_hi"], slo.get("ttft_s_max"), at_least=False),
        }
        row["judged"] = {k: v for k, v in judged.items() if v is not None}
        levels = set(row["judged"].values())
        row["verdict"] = (MISSES if MISSES in levels else UNDETERMINED if UNDETERMINED in levels
                          else MEETS)
        rows.append(row)
    return rows


def capacity(rows: list[dict]) -> dict:
    """The largest arm meeting every level with every smaller arm meeting too, and what the
    next measured arm says: misses (the limit lies between the two), undetermined, or none."""
    best, following = None, None
    for row in rows:
        if row["verdict"] != MEETS:
            following = row
            break
        best = row
    return {
        "arm": best["arm"] if best else None,
        "next_arm": following["arm"] if following else None,
        "next_verdict": following["verdict"] if following else None,
        # no interpolation: the limit lies somewhere in (arm, next_arm) when the next misses
        "between": [best["arm"], following["arm"]] if best and following
        and following["verdict"] == MISSES else None,
    }


def saturation(rows: list[dict], gain: float) -> dict:
    """The arm after which aggregate tok/s stops growing by more than ``gain`` (a fraction), on
    the medians; None when every measured step still grows by more."""
    for here, after in zip(rows, rows[1:]):
        if pd.isna(here["agg_tps"]) or pd.isna(after["agg_tps"]):
            continue
        step = after["agg_tps"] / here["agg_tps"] - 1
        if step <= gain:
            return {"arm": here["arm"], "next_arm": after["arm"], "step": step, "gain": gain}
    return {"arm": None, "next_arm": None, "step": None, "gain": gain}


def assess(ratios: pd.DataFrame, slo: dict, n_boot: int, ci: float, seed: int) -> dict:
    """Per target: every arm's judged numbers, the capacity and the saturation point. Without
    any level set, only the saturation point and the curve are given."""
    levels = {k: slo.get(k) for k in ("user_tps_min", "ttft_s_max") if slo.get(k) is not None}
    out = {"slo": {**levels, "ttft_percentile": slo["ttft_percentile"]},
           "ci": ci, "targets": {}}
    # concurrency levels only: a rate arm is judged on the open loop's own axis
    for target, grp in ratios[ratios["arm"] > 0].groupby("target", sort=True):
        rows = arm_rows(grp, slo, n_boot, ci, seed)
        out["targets"][str(target)] = {
            "arms": rows,
            "capacity": capacity(rows) if levels else None,
            "saturation": saturation(rows, float(slo["saturation_gain"])),
        }
    return out
