"""Rep sufficiency: wide intervals from few reps miss the precision target and say how many reps
would meet it; tight intervals from many reps meet it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from slotbench.analysis import analyse
from slotbench.checks.sufficiency import METRICS, SUFFICIENCY_COLUMNS, sufficiency


def summary_row(arm, n_reps, rel_half, target="t", value=1.4):
    row = {"target": target, "arm": arm, "n_reps": n_reps}
    for metric in METRICS:
        v = 1.0 if arm == 1 else value
        row[metric], row[f"{metric}_lo"], row[f"{metric}_hi"] = (
            v,
            v * (1 - rel_half),
            v * (1 + rel_half),
        )
    return row


def test_two_wide_reps_miss_the_target():
    summary = pd.DataFrame([summary_row(1, 2, 0.0), summary_row(2, 2, 0.20),
                            summary_row(4, 2, 0.15)])
    out = sufficiency(summary, target_rel=0.05)
    assert list(out.columns) == SUFFICIENCY_COLUMNS
    assert set(out["arm"]) == {2, 4}  # serial skipped
    assert len(out) == 2 * len(METRICS)
    assert not out["meets"].any()
    arm2 = out[out["arm"] == 2].iloc[0]
    assert arm2["half_width"] == pytest.approx(0.28) and arm2["rel"] == pytest.approx(0.20)
    assert arm2["reps_needed"] == math.ceil(2 * (0.20 / 0.05) ** 2) == 32
    assert (out["reps_needed"] > 2).all()
    assert "too few" in arm2["sentence"] and "about 32 reps" in arm2["sentence"]


def test_few_reps_that_happen_to_agree_do_not_meet_it():
    summary = pd.DataFrame([summary_row(2, 3, 0.01), summary_row(4, 8, 0.30)])
    out = sufficiency(summary, metrics=("speedup",), target_rel=0.05)
    few, wide = out.iloc[0], out.iloc[1]
    assert not few["meets"] and few["reps_needed"] == 5  # the floor, not ceil(3 * 0.04)
    assert not wide["meets"] and wide["reps_needed"] == 288
    assert "outside the ±5% target with 8 reps" in wide["sentence"]
    relaxed = sufficiency(summary, metrics=("speedup",), min_reps=2, target_rel=0.05).iloc[0]
    assert relaxed["meets"] and relaxed["reps_needed"] == 2


def test_twenty_tight_reps_meet_it():
    summary = pd.DataFrame([summary_row(1, 20, 0.0), summary_row(2, 20, 0.02),
                            summary_row(4, 20, 0.03)])
    out = sufficiency(summary, target_rel=0.05)
    assert out["meets"].all()
    assert (out["reps_needed"] <= 20).all()
    assert out.loc[out["arm"] == 4, "reps_needed"].iloc[0] == math.ceil(20 * 0.36)
    assert "within the ±5% target with 20 reps" in out.iloc[0]["sentence"]


def test_target_is_adjustable_and_one_rep_never_meets():
    summary = pd.DataFrame([summary_row(2, 20, 0.03), summary_row(4, 1, 0.0)])
    out = sufficiency(summary, metrics=("speedup",), target_rel=0.02)
    two, four = out.iloc[0], out.iloc[1]
    assert not two["meets"] and two["reps_needed"] == 45
    assert not four["meets"] and np.isnan(four["reps_needed"])
    assert "one rep" in four["sentence"] and "at least 5 reps" in four["sentence"]


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match="gen_gain_lo"):
        sufficiency(pd.DataFrame([summary_row(2, 4, 0.1)]).drop(columns=["gen_gain_lo"]),
                    target_rel=0.05)


def rotated_cells(reps, noise, seed=0):
    """Serial 50 tok/s, 4-way 68 tok/s with multiplicative noise; user and TTFT likewise."""
    rng = np.random.default_rng(seed)
    rows = []
    for rep in range(reps):
        for i, arm in enumerate((1, 2, 4)):
            jitter = 1 + rng.normal(0, noise)
            agg = {1: 50.0, 2: 60.0, 4: 68.0}[arm] * jitter
            rows.append({"target": "t", "run": "run1", "rep": rep, "arm": arm,
                         "position": (i + rep) % 3, "agg_tps": agg,
                         "user_tps": 48.0 / arm ** 0.5 * (1 + rng.normal(0, noise)),
                         "ttft_s": 0.1 * arm * (1 + rng.normal(0, noise)),
                         "raw_sha256": f"sha{rep}"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("reps", "noise", "meets"), [(2, 0.15, False), (20, 0.005, True)])
def test_on_summarise_output(reps, noise, meets):
    summary = analyse.summarise(analyse.cell_ratios(rotated_cells(reps, noise)), n_boot=300,
                                ci=0.95, seed=0)
    out = sufficiency(summary, target_rel=0.05)
    assert len(out) == 2 * len(METRICS)
    assert (out["n_reps"] == reps).all()
    assert out["meets"].all() == meets and out["meets"].any() == meets
    if not meets:
        assert (out["reps_needed"] > reps).all()
