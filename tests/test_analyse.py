"""Within-rep ratios and per-arm summaries, checked against hand-computed numbers and the
reference shape of the concurrency article."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from slotbench.analysis import analyse
from slotbench.workflow.config import resolve

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
# the bootstrap these tests read their intervals from (the schema's, but seed 0)
BOOT = {"n_boot": 2000, "ci": 0.95, "seed": 0}

# Per arm: (agg_tps, user_tps, ttft_s) of one cell, as in the article (serial scaled to 100).
ARTICLE = {1: (100.0, 100.0, 0.5), 2: (109.0, 47.0, 1.0), 4: (138.0, 34.75, 1.45)}


def make_cell(target="t", run="run1", rep=0, arm=1, position=0, agg_tps=100.0, user_tps=100.0,
              ttft_s=0.5, tokens_out=180):
    return {
        "target": target, "run": run, "rep": rep, "arm": arm, "position": position,
        "n_requests": 4, "tokens_out": tokens_out, "wall_s": tokens_out / agg_tps,
        "agg_tps": agg_tps, "user_tps": user_tps, "ttft_s": ttft_s,
        "t_start_s": 10.0 * position, "t_start_unix": 1.7e9 + 10.0 * position,
        "raw_file": f"results/raw/{target}/{run}/rep{rep}.json",
        "raw_sha256": f"sha-{target}-{run}-{rep}",
    }


def article_cells(runs=("run1", "run2"), reps=5, noise=0.0, seed=123, target="t"):
    """Rotated reps of the article's arms; noise is a lognormal sigma applied per cell."""
    rng = np.random.default_rng(seed)
    arms = sorted(ARTICLE)
    rows = []
    for run in runs:
        for rep in range(reps):
            for i, arm in enumerate(arms):
                agg, user, ttft = (v * rng.lognormal(0.0, noise) for v in ARTICLE[arm])
                rows.append(make_cell(target, run, rep, arm, (i + rep) % len(arms), agg, user,
                                      ttft))
    return pd.DataFrame(rows)


def by_arm(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.set_index("arm")


def test_cell_ratios_hand_computed():
    cells = pd.DataFrame([
        make_cell(arm=1, position=1, agg_tps=40.0, user_tps=40.0, ttft_s=0.5),
        make_cell(arm=2, position=0, agg_tps=60.0, user_tps=25.0, ttft_s=1.2),
    ])
    ratios = analyse.cell_ratios(cells).set_index("arm")
    two = ratios.loc[2]
    assert two["speedup"] == pytest.approx(1.5)
    assert two["efficiency"] == pytest.approx(0.75)
    assert two["user_ratio"] == pytest.approx(0.625)
    assert two["ttft_ratio"] == pytest.approx(2.4)
    assert two["gen_gain"] == pytest.approx(1.25)  # 25 * 2 / 40
    assert two["pipelining"] == pytest.approx(1.2)  # 1.5 / 1.25
    serial = ratios.loc[1]
    for col in ["speedup", "efficiency", "user_ratio", "ttft_ratio", "gen_gain", "pipelining"]:
        assert serial[col] == pytest.approx(1.0)


def test_cell_ratios_keep_every_cell_and_column():
    cells = article_cells(reps=3)
    ratios = analyse.cell_ratios(cells)
    assert len(ratios) == len(cells)
    assert list(ratios.columns[: len(cells.columns)]) == list(cells.columns)
    pd.testing.assert_frame_equal(ratios[cells.columns], cells)


def test_ratios_use_the_serial_cell_of_the_same_rep():
    cells = pd.DataFrame([
        make_cell(rep=0, arm=1, agg_tps=40.0), make_cell(rep=0, arm=2, agg_tps=60.0),
        make_cell(rep=1, arm=1, agg_tps=80.0), make_cell(rep=1, arm=2, agg_tps=100.0),
        make_cell(run="run2", rep=0, arm=1, agg_tps=50.0),
        make_cell(run="run2", rep=0, arm=2, agg_tps=55.0),
    ])
    ratios = analyse.cell_ratios(cells)
    two = ratios[ratios["arm"] == 2].set_index(["run", "rep"])["speedup"]
    assert two[("run1", 0)] == pytest.approx(1.5)
    assert two[("run1", 1)] == pytest.approx(1.25)
    assert two[("run2", 0)] == pytest.approx(1.1)


def test_rep_without_serial_cell_is_named():
    cells = article_cells(runs=("run1",), reps=3, target="ollama-m1")
    cells = cells[~((cells["rep"] == 1) & (cells["arm"] == 1))]
    with pytest.raises(ValueError) as err:
        analyse.cell_ratios(cells)
    message = str(err.value)
    assert "'ollama-m1'" in message and "'run1'" in message and "rep 1" in message
    assert "rep 0" not in message and "rep 2" not in message
    assert "re-run" in message


def test_duplicate_serial_cell_is_refused():
    cells = pd.DataFrame([make_cell(arm=1), make_cell(arm=1, position=1), make_cell(arm=2)])
    with pytest.raises(ValueError, match="more than one serial cell"):
        analyse.cell_ratios(cells)


def test_summary_reproduces_the_article_shape():
    summary = by_arm(analyse.summarise(analyse.cell_ratios(article_cells()), **BOOT))
    assert list(summary.index) == [1, 2, 4]
    two, four = summary.loc[2], summary.loc[4]
    assert two["speedup"] == pytest.approx(1.09)
    assert two["gen_gain"] == pytest.approx(0.94)
    assert two["efficiency"] == pytest.approx(0.545)  # the article's "55%"
    assert two["pipelining"] == pytest.approx(1.16, abs=0.005)
    assert four["speedup"] == pytest.approx(1.38)
    assert four["gen_gain"] == pytest.approx(1.39)
    assert four["efficiency"] == pytest.approx(0.345)  # the article's "35%"
    assert four["pipelining"] == pytest.approx(0.99, abs=0.005)
    assert 1 - four["user_ratio"] == pytest.approx(0.65, abs=0.005)  # per-user -65%
    assert four["ttft_ratio"] == pytest.approx(2.9)  # "nearly triples"
    assert four["agg_tps"] == pytest.approx(138.0)
    assert four["user_tps"] == pytest.approx(34.75)
    # Identical reps: every bootstrap median is the value itself.
    assert four["speedup_lo"] == pytest.approx(1.38) and four["speedup_hi"] == pytest.approx(1.38)
    assert two["efficiency_lo"] == pytest.approx(0.545)
    assert (summary["n_reps"] == 10).all()


def test_summary_columns_and_provenance():
    cells = article_cells(runs=("run1", "run2"), reps=2)
    summary = analyse.summarise(analyse.cell_ratios(cells), **BOOT)
    assert list(summary.columns) == analyse.SUMMARY_COLUMNS
    assert list(summary["arm"]) == [1, 2, 4]
    four = summary.set_index("arm").loc[4]
    assert four["cells"].split(";") == [
        "t/run1/rep0/arm4", "t/run1/rep1/arm4", "t/run2/rep0/arm4", "t/run2/rep1/arm4",
    ]
    assert four["raw_sha256"].split(";") == [
        "sha-t-run1-0", "sha-t-run1-1", "sha-t-run2-0", "sha-t-run2-1",
    ]


def test_summary_is_sorted_and_separate_per_target():
    cells = pd.concat([article_cells(target="b", reps=2), article_cells(target="a", reps=3)])
    summary = analyse.summarise(analyse.cell_ratios(cells), **BOOT)
    assert list(zip(summary["target"], summary["arm"])) == [
        ("a", 1), ("a", 2), ("a", 4), ("b", 1), ("b", 2), ("b", 4),
    ]
    assert list(summary["n_reps"]) == [6, 6, 6, 4, 4, 4]


def test_single_cell_interval_collapses_to_the_value():
    cells = pd.DataFrame([
        make_cell(arm=1, agg_tps=40.0, user_tps=40.0),
        make_cell(arm=2, agg_tps=60.0, user_tps=25.0),
    ])
    two = by_arm(analyse.summarise(analyse.cell_ratios(cells), **BOOT | {"n_boot": 50})).loc[2]
    assert two["n_reps"] == 1
    for metric, value in [("speedup", 1.5), ("efficiency", 0.75), ("gen_gain", 1.25)]:
        assert two[metric] == two[f"{metric}_lo"] == two[f"{metric}_hi"] == pytest.approx(value)


TRUTH = {
    2: {"speedup": 1.09, "gen_gain": 0.94, "user_ratio": 0.47, "efficiency": 0.545,
        "pipelining": 1.09 / 0.94},
    4: {"speedup": 1.38, "gen_gain": 1.39, "user_ratio": 0.3475, "efficiency": 0.345,
        "pipelining": 1.38 / 1.39},
}


def test_noisy_reps_pooled_medians_are_close_to_the_truth():
    cells = article_cells(runs=("run1", "run2"), reps=10, noise=0.03, seed=7)
    ratios = analyse.cell_ratios(cells)
    summary = by_arm(analyse.summarise(ratios, n_boot=2000, ci=0.95, seed=0))
    for arm, metrics in TRUTH.items():
        row = summary.loc[arm]
        assert row["n_reps"] == 20
        for metric, value in metrics.items():
            assert row[metric] == pytest.approx(value, rel=0.05), (arm, metric)
            assert row[f"{metric}_lo"] < row[metric] < row[f"{metric}_hi"], (arm, metric)
        # The summary median is the plain median of the per-rep ratios, runs pooled.
        in_arm = ratios["arm"] == arm
        assert row["speedup"] == pytest.approx(ratios.loc[in_arm, "speedup"].median())
        assert row["agg_tps"] == pytest.approx(cells.loc[in_arm, "agg_tps"].median())


@pytest.mark.slow  # a coverage study: seconds per level
@pytest.mark.parametrize("ci, low, high", [(0.95, 0.85, 1.0), (0.5, 0.2, 0.75)])
def test_bootstrap_intervals_cover_the_truth_at_about_their_level(ci, low, high):
    n_sets, hits = 60, {"speedup": 0, "gen_gain": 0}
    for data_seed in range(n_sets):
        cells = article_cells(reps=5, noise=0.03, seed=data_seed)
        ratios = analyse.cell_ratios(cells)
        row = by_arm(analyse.summarise(ratios, n_boot=500, ci=ci, seed=0)).loc[4]
        for metric in hits:
            hits[metric] += row[f"{metric}_lo"] <= TRUTH[4][metric] <= row[f"{metric}_hi"]
    for metric, hit in hits.items():
        assert low <= hit / n_sets <= high, (metric, hit / n_sets)


def test_summary_is_deterministic_under_the_seed():
    ratios = analyse.cell_ratios(article_cells(reps=6, noise=0.05, seed=3))
    first = analyse.summarise(ratios, n_boot=500, ci=0.95, seed=11)
    pd.testing.assert_frame_equal(first, analyse.summarise(ratios, n_boot=500, ci=0.95, seed=11))
    other = analyse.summarise(ratios, n_boot=500, ci=0.95, seed=12)
    bounds = [c for c in first.columns if c.endswith(("_lo", "_hi")) and first[c].notna().all()]
    assert len(bounds) >= 10
    assert not np.allclose(first[bounds].to_numpy(), other[bounds].to_numpy())
    medians = ["speedup", "gen_gain", "user_ratio", "agg_tps"]
    pd.testing.assert_frame_equal(first[medians], other[medians])  # medians do not resample


def test_wider_ci_is_wider():
    ratios = analyse.cell_ratios(article_cells(reps=8, noise=0.05, seed=5))
    narrow = by_arm(analyse.summarise(ratios, **BOOT | {"ci": 0.5})).loc[4]
    wide = by_arm(analyse.summarise(ratios, **BOOT | {"ci": 0.99})).loc[4]
    assert wide["speedup_lo"] <= narrow["speedup_lo"] < narrow["speedup_hi"] <= wide["speedup_hi"]


def run_entry_point(tmp_path, cells):
    cells.to_parquet(tmp_path / "cells.parquet", index=False)
    smk = SimpleNamespace(
        input=SimpleNamespace(cells=str(tmp_path / "cells.parquet")),
        params=SimpleNamespace(n_boot=100, ci=0.9, seed=0, prices={},
                               slo=resolve({"slo": {"user_tps_min": 40.0}})["slo"]),
        log=[str(tmp_path / "analyse.log")],
        output=SimpleNamespace(ratios=str(tmp_path / "ratios.parquet"),
                               summary=str(tmp_path / "summary.csv"),
                               capacity=str(tmp_path / "capacity.json")),
    )
    runpy.run_path(str(SCRIPTS / "analyse.py"), init_globals={"snakemake": smk})


def test_entry_point_writes_ratios_and_summary(tmp_path):
    run_entry_point(tmp_path, article_cells(reps=2))
    ratios = pd.read_parquet(tmp_path / "ratios.parquet")
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert len(ratios) == 12 and "pipelining" in ratios
    # the article's per-user rates (100, 47, 34.75): 2 users get 40 tok/s each, 4 do not
    assessed = json.loads((tmp_path / "capacity.json").read_text())["targets"]["t"]
    assert assessed["capacity"]["arm"] == 2 and assessed["capacity"]["between"] == [2, 4]
    assert list(summary.columns) == analyse.SUMMARY_COLUMNS
    assert summary.set_index("arm").loc[4, "speedup"] == pytest.approx(1.38)


def test_entry_point_fails_plainly_without_a_serial_cell(tmp_path):
    cells = article_cells(runs=("run1",), reps=2)
    with pytest.raises(SystemExit):
        run_entry_point(tmp_path, cells[~((cells["rep"] == 1) & (cells["arm"] == 1))])
    assert "'run1' rep 1 has no serial (arm 1) cell" in (tmp_path / "analyse.log").read_text()
    assert not (tmp_path / "summary.csv").exists()


def _request(i, sent, first, done, out=40):
    return {"request": i, "output_tokens": out, "t_sent_s": sent, "t_first_s": first,
            "t_done_s": done, "gen_s": done - first}


def test_a_queued_arm_counts_only_the_streams_the_server_generated_for_at_once():
    """A 2-slot server given a 4-way arm generates for two requests, then the other two. Each
    request generates as fast as a serial one (no batching at all) and the aggregate doubles,
    so gen_gain is 2x, not 4x: speedup 2, gen_gain 2, pipelining 1."""
    from slotbench.tables.consolidate import cell_metrics

    serial = [_request(i, 2.0 * i, 2.0 * i + 0.1, 2.0 * i + 2.0) for i in range(4)]
    queued = [_request(i, 0.0, 0.1 + 2.0 * (i // 2), 2.0 + 2.0 * (i // 2)) for i in range(4)]
    full = [_request(i, 0.0, 0.1, 2.0) for i in range(4)]  # 4 slots: all four at once
    cells = pd.DataFrame([
        {"target": "t", "run": "run1", "rep": 0, "arm": arm, "position": pos, **cell_metrics(reqs)}
        for arm, pos, reqs in [(1, 0, serial), (4, 1, queued)]
    ] + [{"target": "u", "run": "run1", "rep": 0, "arm": arm, "position": pos,
          **cell_metrics(reqs)} for arm, pos, reqs in [(1, 0, serial), (4, 1, full)]])
    ratios = analyse.cell_ratios(cells).set_index(["target", "arm"])
    two_slots, four_slots = ratios.loc[("t", 4)], ratios.loc[("u", 4)]
    assert two_slots["queued"] and two_slots["gen_streams_max"] == 2
    assert two_slots["streams"] == pytest.approx(2.0)
    assert two_slots["speedup"] == pytest.approx(2.0)  # 160 tokens in 4 s against 8 s
    assert two_slots["gen_gain"] == pytest.approx(2.0)  # nominal x4 would say 4.0
    assert two_slots["gen_gain"] <= two_slots["speedup"] * 1.05
    assert not four_slots["queued"] and four_slots["streams"] == 4
    assert four_slots["gen_gain"] == pytest.approx(4.0)


def test_a_tokens_cost_in_energy_and_money_per_cell_and_per_arm():
    """Joules per output token from each cell's energy and tokens; dollars per million output
    tokens from the target's usd_per_hour at the cell's aggregate rate; per arm, medians with
    intervals like every rate. No price, no energy: null, never zero."""
    cells = article_cells(reps=6, noise=0.05, seed=3)
    cells = cells.assign(energy_j=cells["tokens_out"] * 0.5)  # 0.5 J per token, every cell
    ratios = analyse.with_costs(analyse.cell_ratios(cells), {"t": 3.6})
    expected = 3.6 / 3600 / ratios["agg_tps"] * 1e6
    assert np.allclose(ratios["usd_per_mtok"], expected)
    assert np.allclose(ratios["j_per_token"], 0.5)
    summary = by_arm(analyse.summarise(ratios, **BOOT))
    four = summary.loc[4]
    assert four["j_per_token"] == pytest.approx(0.5)
    assert four["usd_per_mtok_lo"] <= four["usd_per_mtok"] <= four["usd_per_mtok_hi"]
    # the operator's cost per token falls where the aggregate rises
    assert summary.loc[4, "usd_per_mtok"] < summary.loc[1, "usd_per_mtok"]
    unpriced = by_arm(analyse.summarise(analyse.with_costs(
        analyse.cell_ratios(cells.drop(columns="energy_j")), {}), **BOOT))
    assert unpriced["usd_per_mtok"].isna().all() and unpriced["j_per_token"].isna().all()
