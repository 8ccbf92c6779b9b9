"""Capacity under a service level and the saturation point, on cells whose per-user rate,
TTFT and aggregate are known at every concurrency."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from slotbench.analysis import capacity
from slotbench.workflow.config import resolve

# arm: (per-user tok/s, TTFT p95 s, aggregate tok/s); the aggregate saturates after 4
KNOWN = {1: (20.0, 0.2, 20.0), 2: (15.0, 0.4, 30.0), 4: (10.0, 0.9, 40.0), 8: (5.0, 2.5, 40.8)}


def cells(known=KNOWN, reps=8, noise=0.02, seed=7):
    rng = np.random.default_rng(seed)
    rows = []
    for rep in range(reps):
        for arm, (user, ttft, agg) in known.items():
            f = rng.lognormal(0, noise, 3)
            rows.append({"target": "t", "run": "run1", "rep": rep, "arm": arm,
                         "user_tps": user * f[0], "ttft_s": ttft * f[1] * 0.8,
                         "ttft_p95_s": ttft * f[1], "agg_tps": agg * f[2]})
    return pd.DataFrame(rows)


def full(slo: dict) -> dict:
    """``slo`` as the analysis gets it: resolved, with the schema's defaults."""
    return resolve({"slo": slo})["slo"]


def assess(slo, frame=None):
    out = capacity.assess(cells() if frame is None else frame, full(slo), 500, 0.95, 0)
    return out["targets"]["t"]


@pytest.mark.parametrize("user_min, arm, between", [
    (8.0, 4, [4, 8]),     # 4 users get 10 tok/s, 8 get 5: the limit lies between 4 and 8
    (12.0, 2, [2, 4]),
    (4.0, 8, None),       # every measured arm meets it: the limit is past the largest arm
    (25.0, None, None),   # not even one user gets 25 tok/s
])
def test_the_capacity_is_the_largest_arm_meeting_the_level_and_never_interpolated(
        user_min, arm, between):
    got = assess({"user_tps_min": user_min})["capacity"]
    assert got["arm"] == arm and got["between"] == between, got
    if arm == 8:
        assert got["next_arm"] is None
    else:
        assert got["next_verdict"] == capacity.MISSES


def test_every_level_must_hold_and_the_ttft_percentile_is_the_one_configured():
    both = assess({"user_tps_min": 8.0, "ttft_s_max": 0.5, "ttft_percentile": "p95"})
    assert both["capacity"]["arm"] == 2 and both["capacity"]["between"] == [2, 4]
    assert both["arms"][2]["judged"] == {"user_tps": "meets", "ttft": "misses"}
    median = assess({"ttft_s_max": 0.75, "ttft_percentile": "p50"})  # p50 = 0.8 x p95
    assert median["capacity"]["arm"] == 4  # 0.72 s at 4 users meets 0.75 s; p95 0.9 would not


def test_an_interval_that_straddles_the_level_is_undetermined_not_met():
    """The per-user rate at 4 users is 10 tok/s with noise: a level of 10 tok/s cannot be told
    met or missed from the reps, so the capacity stays at 2 and the answer says so."""
    frame = cells(noise=0.10, reps=6)
    got = assess({"user_tps_min": 10.0}, frame)
    assert got["arms"][2]["verdict"] == capacity.UNDETERMINED
    assert got["capacity"] == {"arm": 2, "next_arm": 4, "next_verdict": "undetermined",
                               "between": None}
    lo, hi = got["arms"][2]["user_tps_lo"], got["arms"][2]["user_tps_hi"]
    assert lo < 10.0 < hi


def test_the_saturation_point_is_where_the_aggregate_stops_growing():
    got = assess({})
    assert got["capacity"] is None  # no level set: no capacity statement
    assert got["saturation"]["arm"] == 4 and got["saturation"]["next_arm"] == 8
    assert got["saturation"]["step"] == pytest.approx(0.02, abs=0.03)
    growing = {k: (u, t, a * k) for k, (u, t, a) in KNOWN.items()}
    assert assess({}, cells(growing))["saturation"]["arm"] is None
