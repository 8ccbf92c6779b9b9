"""The paired design: the pair order, the signed-rank test, and the paired comparison's verdicts
on a machine that drifts (tables made here; tests/test_e2e_paired.py runs the pipeline)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from slotbench.analysis import compare, paired
from slotbench.core import stats
from slotbench.figures import paired as paired_figure
from slotbench.measure import plan
from slotbench.report import paired as report_paired
from slotbench.workflow import config

TARGETS = ["emb-parallel2", "emb-parallel4"]


# --- the order of a pair's sides ------------------------------------------------------------


def test_pairs_alternate_abba_from_seed_run_and_pair_alone():
    orders = [plan.pair_order(TARGETS, 7, "run1", pair) for pair in range(1, 9)]
    assert all(sorted(o) == sorted(TARGETS) for o in orders)
    assert all(orders[i] == orders[i + 1][::-1] for i in range(7)), orders  # A B, B A, A B …
    # the same (seed, run, pair) gives the same order, whatever else is asked for
    assert plan.pair_order(TARGETS, 7, "run1", 5) == orders[4]
    # the first pair's order is drawn from the seed and run: both orders occur
    firsts = {tuple(plan.pair_order(TARGETS, seed, run, 1)) for seed in range(20)
              for run in ("run1", "run2")}
    assert len(firsts) == 2


def test_over_two_pairs_every_target_has_the_same_mean_position_so_linear_drift_cancels():
    targets = ["a", "b", "c"]
    position = {t: 0 for t in targets}
    for pair in (1, 2):
        for i, t in enumerate(plan.pair_order(targets, 0, "run1", pair)):
            position[t] += i
    assert len(set(position.values())) == 1, position


def test_a_paired_design_needs_two_targets_or_more():
    with pytest.raises(config.ConfigError, match=r"`design`: paired needs two targets or more"):
        config.resolve({"design": "paired"})
    with pytest.raises(config.ConfigError, match="design"):
        config.resolve({"design": "interleaved"})
    resolved = config.resolve({"design": "paired", "matrix": [
        {"base": {"name": "emb", "backend": "llamacpp", "managed": True},
         "vary": {"server.parallel": [2, 4]}}]})
    assert resolved["design"] == "paired"
    assert config.resolve({})["design"] == "independent"


# --- the signed-rank test ---------------------------------------------------------------------


def brute_force_p(d) -> float:
    d = np.asarray(d, float)
    d = d[d != 0]
    ranks = pd.Series(np.abs(d)).rank().to_numpy()
    observed, total = ranks[d > 0].sum(), ranks.sum()
    sums = [sum(r for r, s in zip(ranks, signs) if s)
            for signs in itertools.product((0, 1), repeat=len(d))]
    return float(np.mean([abs(s - total / 2) >= abs(observed - total / 2) - 1e-9 for s in sums]))


def test_the_signed_rank_p_value_is_exact_ties_and_zeros_included():
    rng = np.random.default_rng(3)
    for _ in range(150):
        d = np.round(rng.normal(0.3, 1.0, rng.integers(1, 10)), 1)
        if not (d != 0).any():
            continue
        assert stats.signed_rank_p(d) == pytest.approx(brute_force_p(d), abs=1e-12), d


def test_eight_pairs_of_one_sign_reach_2_in_256_and_three_never_below_a_quarter():
    assert stats.signed_rank_p(np.arange(1, 9) * 0.01) == pytest.approx(2 / 256)
    assert stats.signed_rank_min_p(8) == pytest.approx(0.0078125)
    assert stats.signed_rank_p([0.1, 0.2, 0.3]) == pytest.approx(0.25)
    assert stats.signed_rank_min_p(3) == 0.25
    assert np.isnan(stats.signed_rank_p([0.0, np.nan]))
    # Holm over 16 rows at 0.05 needs p <= 0.003125: 10 pairs (2/1024), not 9 (2/512)
    assert stats.pairs_to_decide(16, 0.05) == 10
    assert stats.pairs_to_decide(6, 0.05) == 8


def test_past_the_exact_limit_the_normal_approximation_agrees_with_the_exact_test():
    rng = np.random.default_rng(5)
    d = rng.normal(0.15, 1.0, stats.EXACT_PAIRS + 50)
    exact_limit = stats.EXACT_PAIRS
    try:
        approx = stats.signed_rank_p(d)
        stats.EXACT_PAIRS = 10_000
        exact = stats.signed_rank_p(d)
    finally:
        stats.EXACT_PAIRS = exact_limit
    assert approx == pytest.approx(exact, rel=0.05)


# --- the paired comparison on a drifting machine --------------------------------------------


def drifting_run(pairs=10, slower=1.0, drift_per_side=-0.02, noise=0.01, seed=0,
                 speedup4=(1.0, 1.0)):
    """ratios and cells of a paired run of two targets (A, B) on a machine that loses
    ``drift_per_side`` of its speed with every side measured: B's tokens ``slower`` times A's
    speed; its 4-way speedup is speedup4[1] against A's speedup4[0]."""
    rng = np.random.default_rng(seed)
    ratios, cells, planned, side = [], [], {"run1": {}}, 0
    for pair in range(1, pairs + 1):
        order = plan.pair_order(TARGETS, 0, "run1", pair)
        planned["run1"][pair] = order
        for target in order:
            speed = (1 + drift_per_side) ** side * 50.0 * (1 if target == TARGETS[0] else 1 / slower)
            s4 = speedup4[TARGETS.index(target)]
            for arm, speedup in ((1, 1.0), (4, s4)):
                f = rng.lognormal(0, noise, 2)
                agg = speed * speedup * f[0]
                row = {"target": target, "run": "run1", "rep": pair, "arm": arm,
                       "agg_tps": agg, "user_tps": agg / arm * f[1],
                       "raw_sha256": f"{target}-{pair}", "t_start_unix": 1000.0 + 60 * side + arm}
                cells.append(row)
                if arm > 1:
                    row = row | {"speedup": speedup * f[0], "user_ratio": speedup * f[1] / arm,
                                 "ttft_ratio": 2.0 * f[1], "efficiency": speedup * f[0] / arm,
                                 "gen_gain": speedup * f[1]}
                ratios.append(row)
            side += 1
    return pd.DataFrame(ratios), pd.DataFrame(cells), planned


def analyse(ratios, cells, planned, decision=None):
    return paired.analyse(ratios, cells, TARGETS, planned, decision or {}, 400, 0.95, 1)


def rows(result):
    return {(r["arm"], r["metric"]): r for r in result["comparisons"][TARGETS[1]]["rows"]}


def test_a_equals_b_on_a_drifting_machine_is_no_detectable_change_where_unpaired_sees_one():
    ratios, cells, planned = drifting_run(pairs=12, drift_per_side=-0.02)
    result = analyse(ratios, cells, planned)
    found = rows(result)
    assert {r["verdict"] for r in found.values()} == {compare.NO_CHANGE}, {
        k: r["verdict"] for k, r in found.items()}
    # the machine lost about 40% over the run, and the drift line says so
    line = result["drift"][TARGETS[0]]
    assert line["assessable"] and line["change"] < -0.3
    assert result["order"] == {"pairs_in_order": 12, "pairs_out_of_order": []}
    # every row traces to both targets' cells of every pair
    assert len(found[(4, "speedup")]["cells_a"]) == len(found[(4, "speedup")]["cells_b"]) == 12


def test_a_ten_percent_slower_b_is_found_paired_on_a_drifting_machine():
    ratios, cells, planned = drifting_run(pairs=10, slower=1.10, drift_per_side=-0.03)
    found = rows(analyse(ratios, cells, planned))
    for key in ((1, "agg_tps"), (1, "user_tps"), (4, "agg_tps"), (4, "user_tps")):
        row = found[key]
        assert row["verdict"] == compare.SLOWER, (key, row)
        assert row["ratio_hi"] < 1 and row["ratio"] == pytest.approx(1 / 1.10, rel=0.03)
        assert row["p"] == pytest.approx(2 / 1024)
        # the same cells unpaired: the drift (0.97**20, about −45% over the run) swamps it
        assert row["unpaired"]["verdict"] == compare.NO_CHANGE, row["unpaired"]
    # the ratios, within each rep, did not change
    assert found[(4, "speedup")]["verdict"] == compare.NO_CHANGE


def test_too_few_pairs_says_so_with_the_pairs_that_would_decide_never_no_detectable_change():
    ratios, cells, planned = drifting_run(pairs=8, speedup4=(1.0, 1.35))
    result = analyse(ratios, cells, planned)
    row = rows(result)[(4, "speedup")]
    assert row["ratio_lo"] > 1.25  # the interval excludes 1 …
    assert row["verdict"] == paired.TOO_FEW_PAIRS  # … but 8 pairs cannot pass Holm over 9 rows
    assert row["pairs_to_decide"] == stats.pairs_to_decide(9, 0.05) == 9
    assert report_paired.verdict_text(row) == (
        "too few pairs: about 9 would resolve a change of 35%")
    ratios, cells, planned = drifting_run(pairs=10, speedup4=(1.0, 1.35))
    assert rows(analyse(ratios, cells, planned))[(4, "speedup")]["verdict"] == compare.FASTER


def test_a_refused_headline_gives_no_verdict_and_sides_out_of_order_are_named():
    ratios, cells, planned = drifting_run(pairs=10)
    # pair 3's first side measured again, after everything else (a resumed side)
    first = planned["run1"][3][0]
    late = (cells["target"] == first) & (cells["rep"] == 3)
    cells.loc[late, "t_start_unix"] += 10_000
    result = analyse(ratios, cells, planned, {TARGETS[1]: {"status": "refused"}})
    comp = result["comparisons"][TARGETS[1]]
    assert comp["refusal"] == "B's headline was refused"
    assert {r["verdict"] for r in comp["rows"]} == {None}
    assert result["order"] == {"pairs_in_order": 9, "pairs_out_of_order": ["run1/pair3"]}


def test_the_report_section_shows_the_verdicts_the_drift_and_traces_every_cell(tmp_path):
    from slotbench.provenance import ids as prov
    from slotbench.report.blocks import Sources, Table
    from slotbench.report.render_md import render_markdown

    ratios, cells, planned = drifting_run(pairs=10, slower=1.10, drift_per_side=-0.03)
    result = json.loads(json.dumps(analyse(ratios, cells, planned), default=float))
    paired_figure.plot(result, tmp_path / "paired.png")
    assert (tmp_path / "paired.png").stat().st_size > 10_000
    cells = cells.assign(raw_file="r", n_requests=4)
    blocks = report_paired.blocks(result, str(tmp_path / "paired.png"), prov.CellIndex(cells),
                                  "95%")
    text = render_markdown(blocks, "")
    assert "## Paired comparison" in text and "10 of 10 pairs were measured" in text
    assert "B slower" in text and "no detectable change" in text
    assert f"{TARGETS[0]}: serial-1 " in text and "over " in text
    table = next(b for b in blocks if isinstance(b, Table))
    assert len(table.rows) == 9
    sources = next(b for b in blocks if isinstance(b, Sources))
    assert len(sources.cells) == 2 * 2 * 10  # both targets, both arms, every pair


def test_energy_per_token_is_a_paired_row_and_a_target_without_a_price_is_not_assessable():
    ratios, cells, planned = drifting_run(pairs=10, drift_per_side=-0.03)
    b = ratios["target"] == TARGETS[1]
    # energy per token does not follow the machine's speed; B draws 20% more per token
    ratios["j_per_token"] = np.where(b, 2.4, 2.0) * np.random.default_rng(5).lognormal(
        0, 0.01, len(ratios))
    ratios["usd_per_mtok"] = np.where(b, np.nan, 1e6 / 3600 / ratios["agg_tps"])
    found = rows(analyse(ratios, cells, planned))
    for arm in (1, 4):
        energy = found[(arm, "j_per_token")]
        assert energy["verdict"] == compare.SLOWER, energy  # lower is better: B is worse
        assert energy["ratio"] == pytest.approx(1.2, rel=0.02)
        cost = found[(arm, "usd_per_mtok")]
        assert cost["verdict"] == compare.NOT_ASSESSABLE, cost
        assert "no usd_per_hour on B" in cost["why"] and cost["pairs"] == 0
    assert "not assessable (no usd_per_hour on B)" in report_paired.verdict_text(
        found[(4, "usd_per_mtok")])
