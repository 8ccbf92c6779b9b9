"""Deviance, rotation-bias and serialisation checks, on the article's cases and on constructed
position effects and server timings."""

from __future__ import annotations

import heapq
import json
import math
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from slotbench.checks import deviance, rotation, serialisation

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
ARMS = [1, 2, 4]
BASE_TPS = {1: 50.0, 2: 60.0, 4: 68.0}


def make_cell(target="t", run="run1", rep=0, arm=1, position=0, tokens_out=180, wall_s=2.0):
    return {
        "target": target, "run": run, "rep": rep, "arm": arm, "position": position,
        "n_requests": 4, "tokens_out": tokens_out, "wall_s": wall_s,
        "agg_tps": tokens_out / wall_s, "user_tps": 40.0, "ttft_s": 0.5,
        "t_start_s": 10.0 * position, "t_start_unix": 1.7e9 + 10.0 * position,
        "raw_file": f"results/raw/{target}/{run}/rep{rep}.json",
        "raw_sha256": f"sha-{target}-{run}-{rep}",
    }


def rotated_cells(reps=6, target="t", run="run1", tps=None, tokens_out=180):
    """Cyclic Latin square: arm i sits at position (i + rep) % 3. tps(arm, position, rep)."""
    tps = tps or (lambda arm, position, rep: BASE_TPS[arm])
    rows = []
    for rep in range(reps):
        for i, arm in enumerate(ARMS):
            position = (i + rep) % len(ARMS)
            wall_s = tokens_out / tps(arm, position, rep)
            rows.append(make_cell(target, run, rep, arm, position, tokens_out, wall_s))
    return pd.DataFrame(rows)


def article_deviance_cells(odd_tokens=233, target="t"):
    """5 reps x 3 arms of one run; rep 3's 2-way cell produced ``odd_tokens``."""
    cells = rotated_cells(reps=5, target=target)
    odd = (cells["rep"] == 3) & (cells["arm"] == 2)
    cells.loc[odd, "tokens_out"] = odd_tokens
    cells.loc[odd, "agg_tps"] = odd_tokens / cells.loc[odd, "wall_s"]
    return cells


# --- deviance ---------------------------------------------------------------------------------


def test_article_deviant_cell_is_named():
    dev = deviance.deviance(article_deviance_cells(233), threshold=0.05)
    assert list(dev.columns) == deviance.DEVIANCE_COLUMNS
    assert len(dev) == 1
    row = dev.iloc[0]
    assert (row["target"], row["run"], row["rep"], row["arm"]) == ("t", "run1", 3, 2)
    assert row["cell"] == "t/run1/rep3/arm2"
    assert row["modal_tokens"] == 180
    assert row["tokens_out"] == 233
    assert row["deviation"] == pytest.approx(53 / 180)
    assert row["deviation"] == pytest.approx(0.294, abs=0.001)
    assert row["raw_sha256"] == "sha-t-run1-3"
    assert row["raw_file"] == "results/raw/t/run1/rep3.json"


def test_small_deviation_is_not_named():
    dev = deviance.deviance(article_deviance_cells(185), threshold=0.05)  # 2.8% away from 180
    assert dev.empty
    assert list(dev.columns) == deviance.DEVIANCE_COLUMNS


def test_threshold_is_respected_in_both_directions():
    cells = article_deviance_cells(171)  # -5.0%: not more than 5%
    assert deviance.deviance(cells, threshold=0.05).empty
    dev = deviance.deviance(cells, threshold=0.04)
    assert list(dev["cell"]) == ["t/run1/rep3/arm2"]
    assert dev.iloc[0]["deviation"] == pytest.approx(-0.05)


def test_wall_and_throughput_effects_have_opposite_signs():
    # The article's cell: more tokens, so slower by wall clock yet faster by throughput.
    walls = [1.9, 2.0, 2.0, 2.1]  # normal 2-way cells: median wall 2.0 s, median agg 90 tok/s
    rows = [make_cell(rep=rep, arm=2, tokens_out=180, wall_s=w) for rep, w in enumerate(walls)]
    rows.append(make_cell(rep=4, arm=2, tokens_out=233, wall_s=2.0 * 1.13))
    rows += [make_cell(rep=rep, arm=1, tokens_out=180, wall_s=3.5) for rep in range(5)]
    dev = deviance.deviance(pd.DataFrame(rows), threshold=0.05)
    assert list(dev["cell"]) == ["t/run1/rep4/arm2"]
    row = dev.iloc[0]
    assert row["wall_effect"] == pytest.approx(0.13)  # 13% slower
    assert row["tps_effect"] == pytest.approx((233 / 2.26) / 90.0 - 1.0)
    assert row["tps_effect"] == pytest.approx(0.14, abs=0.01)  # ~14% faster


def test_effect_is_nan_when_no_normal_cell_shares_the_arm():
    rows = [make_cell(rep=rep, arm=1) for rep in range(3)]
    rows.append(make_cell(rep=0, arm=2, tokens_out=300))
    row = deviance.deviance(pd.DataFrame(rows), threshold=0.05).iloc[0]
    assert row["cell"] == "t/run1/rep0/arm2"
    assert pd.isna(row["wall_effect"]) and pd.isna(row["tps_effect"])


def test_modal_output_is_per_run_and_ties_go_to_the_smallest():
    rows = [make_cell(run="run1", rep=r, tokens_out=t) for r, t in enumerate([200, 180, 200, 180])]
    rows += [make_cell(run="run2", rep=r, tokens_out=t) for r, t in enumerate([300, 300, 180])]
    cells = pd.DataFrame(rows)
    modal = deviance.modal_tokens(cells)
    assert modal[("t", "run1")] == 180
    assert modal[("t", "run2")] == 300
    dev = deviance.deviance(cells, threshold=0.05)
    assert list(dev["cell"]) == ["t/run1/rep0/arm1", "t/run1/rep2/arm1", "t/run2/rep2/arm1"]
    assert list(dev["modal_tokens"]) == [180, 180, 300]


# --- rotation bias ----------------------------------------------------------------------------

ROTATION = {"checks": {"rotation_threshold": 0.10}, "analysis": {"bootstrap": 500, "ci": 0.95},
            "seed": 1}


def noisy_cells(reps=20, noise=0.10, effect=0.0, seed=0, arms=ARMS, runs=("run1",)):
    """Rotated cells whose agg_tps is BASE_TPS × a rep factor (drift) × lognormal noise, and
    1 + ``effect`` at position 0 (a position effect every arm shares)."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in runs:
        for rep in range(1, reps + 1):
            drift = rng.normal(0, 0.05)
            for i, arm in enumerate(arms):
                position = (i + rep) % len(arms)
                tps = (BASE_TPS[arm] * np.exp(drift + rng.normal(0, noise))
                       * (1 + effect if position == 0 else 1))
                rows.append(make_cell("t", run, rep, arm, position, 180, 180 / tps))
    return pd.DataFrame(rows)


def rotation_verdict(cells, **settings):
    verdicts, tables = rotation.check(tables_of(cells), ROTATION | settings)
    assert list(tables) == ["positions"]
    return verdicts[0].record()


def test_a_real_position_effect_is_position_bias_and_refused():
    v = rotation_verdict(noisy_cells(effect=0.15, noise=0.10, seed=4))
    assert v["verdict"] == "position bias" and v["fired"] and v["effect"] == "refuse"
    ev = v["evidence"]
    assert 0.10 < ev["effect"] < 0.25 and ev["lo"] > 0.05 and ev["p_value"] < 0.05
    assert "position 0 fastest" in v["sentence"] and "refuses a headline" in v["sentence"]
    assert ev["reason"].startswith("position bias: position moved aggregate tok/s by")


@pytest.mark.slow  # thousands of noisy runs: about 15 s
def test_noise_alone_is_almost_never_called_position_bias():
    called = [rotation_verdict(noisy_cells(noise=0.10, seed=seed))["verdict"]
              for seed in range(100)]
    assert called.count("position bias") <= 5, called.count("position bias")
    assert set(called) <= {"no position bias", "inconclusive", "position bias"}


def test_a_quiet_machine_gives_no_position_bias():
    v = rotation_verdict(noisy_cells(noise=0.01, seed=2))
    assert v["verdict"] == "no position bias" and not v["fired"] and v["effect"] == "none"
    assert v["evidence"]["hi"] < 0.10 and v["assessable"]


def test_inconclusive_is_provisional_and_says_how_many_reps_would_resolve_it():
    v = rotation_verdict(noisy_cells(reps=6, noise=0.10, effect=0.08, seed=3))
    assert v["verdict"] == "inconclusive" and v["effect"] == "provisional" and not v["fired"]
    needed = v["evidence"]["reps_to_resolve"]
    assert needed > 6 and f"about {needed} reps would resolve it" in v["sentence"]


@pytest.mark.parametrize("reps", [1, 2])
def test_an_incomplete_rotation_is_not_assessable_and_names_the_gaps(reps):
    v = rotation_verdict(noisy_cells(reps=reps, noise=0.01))
    assert v["verdict"] == "not assessable" and not v["assessable"] and not v["fired"]
    assert v["effect"] == "provisional"
    assert "never at position" in v["sentence"] and "in run1" in v["sentence"]
    assert v["evidence"]["gaps"]


def test_a_run_with_an_incomplete_rotation_makes_the_target_not_assessable():
    cells = pd.concat([noisy_cells(reps=6, noise=0.01), noisy_cells(reps=1, runs=("run2",))])
    v = rotation_verdict(cells)
    assert v["verdict"] == "not assessable" and "in run2" in v["sentence"]
    assert "in run1" not in v["sentence"]


def test_whole_rep_slowdowns_do_not_look_like_position_bias():
    """A neighbour that slows every third rep throughout (so each arm sits at one position in
    all of them): rep effects absorb it, where the per-arm spread of medians would refuse."""
    cells = noisy_cells(reps=12, noise=0.01, seed=5)
    slow = cells["rep"] % 3 == 0
    cells.loc[slow, "agg_tps"] /= 4
    v = rotation_verdict(cells)
    assert v["verdict"] == "no position bias", v["sentence"]
    assert v["evidence"]["arms"]["1"]["spread"] > 0.5  # the old per-arm spread would refuse


def test_per_position_medians_stay_as_the_descriptive_table():
    v = rotation_verdict(noisy_cells(reps=6, noise=0.01))
    rows = v["evidence"]["rows"]
    assert len(rows) == 9 and {r["n_cells"] for r in rows} == {2}
    assert all(info["positions_seen"] == [0, 1, 2] for info in v["evidence"]["arms"].values())


# --- verdict and entry point ------------------------------------------------------------------


def plain_leaves(obj):
    """Every leaf of a JSON-like structure, so tests can insist on plain Python types."""
    if isinstance(obj, dict):
        assert all(type(k) is str for k in obj)
        return [leaf for v in obj.values() for leaf in plain_leaves(v)]
    if isinstance(obj, list):
        return [leaf for v in obj for leaf in plain_leaves(v)]
    return [obj]


def two_target_cells():
    odd = article_deviance_cells(233, target="a")
    clean = pd.concat([rotated_cells(reps=3, target="b", run=run, tokens_out=tokens)
                       for run, tokens in [("run1", 200), ("run2", 190)]])
    return pd.concat([odd, clean], ignore_index=True)


SETTINGS = {"checks": {"rotation_threshold": 0.1, "deviance_threshold": 0.05},
            "analysis": {"bootstrap": 2000, "ci": 0.95}, "seed": 0}


def tables_of(cells, requests=None, **more):
    from slotbench.checks.base import Tables

    empty = pd.DataFrame(columns=["target", "run", "rep", "arm"])
    return Tables(cells=cells, requests=empty if requests is None else requests,
                  control=empty, thermal=empty, summary=empty, **more)


def test_verdicts_are_plain_json_of_one_shape_for_every_target():
    cells = two_target_cells()
    records = []
    for module in (deviance, rotation):
        verdicts, tables = module.check(tables_of(cells), SETTINGS | {"seed": 1})
        assert set(tables) == set(module.TABLES)
        records += [v.record() for v in verdicts]
    assert all(type(leaf) in (str, int, float, bool, type(None)) for leaf in plain_leaves(records))
    assert json.loads(json.dumps(records, allow_nan=False)) == records
    shape = {
        "schema",
        "trap",
        "title",
        "target",
        "assessable",
        "fired",
        "verdict",
        "summary",
        "sentence",
        "threshold",
        "config_key",
        "evidence",
        "cells",
        "effect",
        "arms",
        "order",
    }
    assert all(set(r) == shape for r in records)
    by = {(r["trap"], r["target"]): r for r in records}
    a, b = by[("deviance", "a")], by[("deviance", "b")]
    assert a["fired"] and a["cells"] == ["a/run1/rep3/arm2"] and not b["fired"]
    assert a["threshold"] == 0.05 and a["config_key"] == "checks.deviance_threshold"
    assert a["evidence"]["modal_tokens"] == {"run1": 180}
    assert b["evidence"]["modal_tokens"] == {"run1": 200, "run2": 190}
    rot = by[("rotation_bias", "b")]
    assert rot["config_key"] == "checks.rotation_threshold"
    assert rot["evidence"]["arms"]["4"]["positions_seen"] == [0, 1, 2]


@pytest.mark.slow  # a whole synthetic run through the rule script
def test_entry_point_writes_every_verdict_table_and_the_headline_decision(tmp_path):
    from slotbench.analysis.analyse import cell_ratios, summarise
    from slotbench.tables.samples import THERMAL_SCHEMA

    paths = {name: tmp_path / f"in_{name}.parquet" for name in
             ["cells", "requests", "control", "thermal"]}
    cells = two_target_cells().assign(client_cpu_s=0.01)
    cells.to_parquet(paths["cells"], index=False)
    requests = pd.concat([served(target="a", slots=1), served(target="b", slots=4)])
    requests.assign(control=False, prompt_tokens=160).to_parquet(paths["requests"])
    cells.iloc[:0].to_parquet(paths["control"], index=False)
    pd.DataFrame(columns=THERMAL_SCHEMA.names).to_parquet(paths["thermal"], index=False)
    summary = tmp_path / "summary.csv"
    summarise(cell_ratios(cells), n_boot=200, ci=0.95, seed=0).to_csv(summary, index=False)
    servers = tmp_path / "servers.json"
    servers.write_text("[]")
    out = tmp_path / "checks"
    from slotbench.workflow.config import check_settings, resolve

    settings = check_settings(resolve({}))
    smk = SimpleNamespace(
        input={**{k: str(v) for k, v in paths.items()}, "summary": str(summary),
               "servers": str(servers), "fingerprints": []},
        params=SimpleNamespace(settings=settings), log=[str(tmp_path / "checks.log")],
        output=[str(out)],
    )
    runpy.run_path(str(SCRIPTS / "checks.py"), init_globals={"snakemake": smk})
    assert list(pd.read_csv(out / "deviance.csv")["cell"]) == ["a/run1/rep3/arm2"]
    assert len(pd.read_csv(out / "positions.csv")) == 18
    for trap in (
        "serialisation",
        "rotation_bias",
        "deviance",
        "prompts",
        "cache",
        "control",
        "thermal",
        "drift",
        "client",
        "client_saturation",
        "sufficiency",
        "versions",
    ):
        records = json.loads((out / f"{trap}.json").read_text())
        assert {r["target"] for r in records} == {"a", "b"}, trap
    for trap in ("overload", "closed_loop_understatement"):  # the open loop's: no rate arms here
        assert json.loads((out / f"{trap}.json").read_text()) == [], trap
    ser = pd.read_csv(out / "serialisation.csv")
    assert list(ser.columns) == serialisation.SERIALISATION_COLUMNS
    assert ser.set_index(["target", "arm"])["serialised"].to_dict() == {
        ("a", 2): True, ("a", 4): True, ("b", 2): False, ("b", 4): False,
    }
    decision = json.loads((out / "headline.json").read_text())
    assert set(decision) == {"a", "b"}
    assert any("OLLAMA_NUM_PARALLEL=1" in w["text"] for w in decision["a"]["warnings"])
    assert not any(w["trap"] == "serialisation" for w in decision["b"]["warnings"])
    log = (tmp_path / "checks.log").read_text()
    assert "checks: a: Serialised arm (server ran one request at a time): yes" in log
    assert "checks: b: Client distortion (self-check)" in log and "headline" in log


# --- serialisation ----------------------------------------------------------------------------

PREFILL_S, GEN_S = 0.1, 1.0


def served(target="t", run="run1", reps=3, slots=1, n_requests=4, ollama=True, shift=0.0):
    """Request timings of a server with ``slots`` slots, simulated FIFO, arms 1, 2 and 4.

    The client keeps ``arm`` requests in flight; each request takes PREFILL_S then GEN_S once it
    has a slot. Ollama's total_duration counts from the request's arrival, so the time it waited
    for a slot is total - load - prompt_eval - eval. With ``shift``, a queued request's first
    token is read ``shift`` s *before* the previous request's last chunk (as two client threads
    can read them), instead of one prefill after it.
    """
    rows = []
    for rep in range(reps):
        for position, arm in enumerate(ARMS[rep % 3 :] + ARMS[: rep % 3]):
            t0 = 100.0 * position
            client, server = [t0] * arm, [t0] * slots
            for request in range(n_requests):
                t_sent = heapq.heappop(client)
                slot = min(range(slots), key=server.__getitem__)
                start = max(t_sent, server[slot])
                t_first = start - shift if shift and start > t_sent else start + PREFILL_S
                t_done = start + PREFILL_S + GEN_S
                server[slot] = t_done
                heapq.heappush(client, t_done)
                row = {
                    "target": target, "run": run, "rep": rep, "arm": arm, "position": position,
                    "request": request, "output_tokens": 50, "t_sent_s": t_sent,
                    "t_first_s": t_first, "t_done_s": t_done, "gen_s": GEN_S,
                }
                if ollama:
                    row |= {
                        "total_duration_ns": round((t_done - t_sent) * 1e9),
                        "load_duration_ns": None,  # Ollama omits zero-valued durations
                        "prompt_eval_duration_ns": round(PREFILL_S * 1e9),
                        "eval_duration_ns": round(GEN_S * 1e9),
                    }
                rows.append(row)
    return pd.DataFrame(rows)


def by_arm(table):
    return {int(r["arm"]): r for _, r in table.iterrows()}


def test_one_slot_server_is_serialised_with_a_growing_queue_gap():
    table = serialisation.serialisation(served(slots=1))
    assert list(table.columns) == serialisation.SERIALISATION_COLUMNS
    assert sorted(table["arm"]) == [2, 4]  # the serial arm is the control, not a suspect
    four = by_arm(table)[4]
    assert four["serialised"] and four["n_cells"] == 3 and four["serialised_cells"] == 3
    assert four["max_overlap_median"] == 1 and four["in_flight_median"] == 4
    # four sent at once, served one by one: waits of 0, 1.1, 2.2, 3.3 s
    assert four["queue_gap_slope_s"] == pytest.approx(PREFILL_S + GEN_S)
    assert four["queue_gap_trend"] == pytest.approx(1.0)
    assert four["wait_slope_s"] == pytest.approx(PREFILL_S + GEN_S)
    assert "OLLAMA_NUM_PARALLEL=1" in four["cause"] and "--parallel 1" in four["cause"]
    assert "not a property of the engine" in four["cause"]
    assert four["cells"].split(";") == [f"t/run1/rep{rep}/arm4" for rep in range(3)]
    two = by_arm(table)[2]
    assert two["serialised"] and two["max_overlap_median"] == 1 and two["in_flight_median"] == 2
    assert two["queue_gap_slope_s"] > 0 and two["queue_gap_trend"] > 0.5


def test_four_slot_server_overlaps_and_stays_quiet():
    table = serialisation.serialisation(served(slots=4))
    for arm, row in by_arm(table).items():
        assert not row["serialised"] and row["cause"] is None
        assert row["serialised_cells"] == 0
        assert row["max_overlap_median"] == arm
        assert row["queue_gap_slope_s"] == pytest.approx(0.0, abs=1e-9)
    assert by_arm(table)[4]["wait_slope_s"] == pytest.approx(0.0, abs=1e-9)


def test_two_slots_under_four_in_flight_is_capped_not_serialised():
    four = by_arm(serialisation.serialisation(served(slots=2)))[4]
    assert not four["serialised"] and four["max_overlap_median"] == 2


@pytest.mark.parametrize("drop_columns", [False, True])
def test_serialisation_without_ollama_fields(drop_columns):
    requests = served(slots=1, ollama=False)
    if not drop_columns:  # llama.cpp rows: the Ollama columns exist but are all null
        for col in ["total_duration_ns", "load_duration_ns", "prompt_eval_duration_ns",
                    "eval_duration_ns"]:
            requests[col] = None
    four = by_arm(serialisation.serialisation(requests))[4]
    assert four["serialised"]
    assert math.isnan(four["queue_gap_slope_s"]) and math.isnan(four["queue_gap_trend"])
    # client-side proxy: TTFT over the serial arm's median grows 1.1 s per place served
    assert four["wait_slope_s"] == pytest.approx(PREFILL_S + GEN_S)
    assert four["wait_trend"] == pytest.approx(1.0)
    assert not by_arm(serialisation.serialisation(served(slots=4, ollama=False)))[4]["serialised"]


def test_back_to_back_windows_within_tolerance_do_not_count_as_overlap():
    # The next first token read 3 ms before the previous request's last chunk: still one slot.
    assert by_arm(serialisation.serialisation(served(slots=1, shift=0.003)))[4]["serialised"]
    # 30 ms of real overlap is beyond the 5 ms tolerance.
    row = by_arm(serialisation.serialisation(served(slots=1, shift=0.03)))[4]
    assert not row["serialised"] and row["max_overlap_median"] == 2


def test_nearly_all_cells_must_be_serialised():
    one, four = served(slots=1, reps=5), served(slots=4, reps=5)
    for n_overlapping, expected in [(1, True), (2, False)]:
        mixed = pd.concat([one[one["rep"] >= n_overlapping], four[four["rep"] < n_overlapping]])
        row = by_arm(serialisation.serialisation(mixed))[4]
        assert row["serialised_cells"] == 5 - n_overlapping
        assert row["serialised"] is expected


def test_client_that_never_had_two_in_flight_is_not_blamed_on_the_server():
    # the serial cells relabelled as arm 2: one in flight at a time, windows back to back
    serial = served(slots=1).query("arm == 1")
    row = by_arm(serialisation.serialisation(pd.concat([serial, serial.assign(arm=2)])))[2]
    assert row["in_flight_median"] == 1 and row["max_overlap_median"] == 1
    assert not row["serialised"] and row["cause"] is None


def test_serialisation_verdict_names_the_arms_and_warns():
    cells = two_target_cells()
    requests = pd.concat([served(target="a", slots=1), served(target="b", slots=4, ollama=False)])
    verdicts, _ = serialisation.check(tables_of(cells, requests), SETTINGS)
    by = {v.target: v.record() for v in verdicts}
    a, b = by["a"], by["b"]
    assert a["fired"] and a["arms"] == [2, 4] and a["effect"] == "warn"
    rows = {r["arm"]: r for r in a["evidence"]["rows"]}
    assert rows[4]["max_overlap_median"] == 1.0
    assert rows[4]["queue_gap_slope_s"] == pytest.approx(1.1)
    assert rows[4]["cause"] == serialisation.SERIALISED_CAUSE
    assert len(a["evidence"]["warnings"]) == 2
    assert "parallel-4 was served one request at a time" in a["evidence"]["warnings"][1]
    assert not b["fired"] and b["evidence"]["warnings"] == [] and b["arms"] == []
    assert {r["arm"]: r["queue_gap_slope_s"] for r in b["evidence"]["rows"]} == {2: None, 4: None}


# --- the vectorised counts against their definitions ------------------------------------------


def _most_at_once_by_definition(starts, ends, tolerance_s=0.005) -> int:
    """The definition, one start at a time (what cells.most_at_once counted before)."""
    best = 0
    for s in starts:
        n = sum(1 for s2, e2 in zip(starts, ends) if s2 <= s and (e2 - tolerance_s > s or s2 == s))
        best = max(best, n)
    return best


def test_most_at_once_counts_as_its_definition_says():
    from slotbench.core.cells import most_at_once

    rng = np.random.default_rng(7)
    for _ in range(3000):
        n = int(rng.integers(0, 30))
        starts = [round(float(x), int(rng.integers(1, 4))) for x in rng.random(n)]
        # back to back, within the tolerance, shorter than it, ending before it starts, long
        lengths = rng.choice([0.0, 0.001, 0.005, 0.0051, -0.01, 0.3], size=n)
        ends = [s + float(d) for s, d in zip(starts, lengths)]
        if n and rng.random() < 0.1:
            ends[0] = float("nan")  # a missing time never counts
        assert most_at_once(starts, ends) == _most_at_once_by_definition(starts, ends), (
            starts, ends)


def test_counts_and_trends_per_cell_match_one_group_at_a_time():
    from slotbench.core import stats
    from slotbench.core.cells import label_series, most_at_once_by_cell

    rng = np.random.default_rng(11)
    df = pd.DataFrame({"target": "t", "run": rng.choice(["run1", "run2"], 400),
                       "rep": rng.integers(1, 12, 400), "arm": rng.choice([2, 4, 16], 400)})
    df["t_sent_s"] = rng.random(400).round(2)
    df["t_done_s"] = df["t_sent_s"] + rng.choice([0.001, 0.2, 0.5], 400)
    df.loc[rng.random(400) < 0.05, "t_sent_s"] = np.nan
    df["value"] = rng.choice([1.0, 2.0, 3.0, np.nan], 400)
    labels = label_series(df)
    assert list(labels) == [f"t/{r.run}/rep{r.rep}/arm{r.arm}" for r in df.itertuples()]
    by_cell = most_at_once_by_cell(labels.to_numpy(), df["t_sent_s"], df["t_done_s"])
    expected = {}
    for label, cell in df.assign(_cell=labels).groupby("_cell", sort=True):
        cell = cell.dropna(subset=["t_sent_s"])
        expected[label] = _most_at_once_by_definition(list(cell["t_sent_s"]), list(cell["t_done_s"]))
    assert list(by_cell.items()) == list(expected.items())
    frame = pd.DataFrame({"x": df["t_sent_s"], "y": df["value"], "g": labels}).dropna()
    rhos = [stats.rank_corr(g["x"], g["y"]) for _, g in frame.groupby("g", sort=True)]
    rhos = [r for r in rhos if r == r]
    assert stats.median_rank_corr(df["t_sent_s"], df["value"], labels) == float(np.median(rhos))


# --- Ollama: per cell, the model partly on the CPU, a reload, and the parallelism -------------


def _ps(size=4_000, vram=4_000, ctx=4096, expires="2030-01-01T00:00:00Z", name="m:latest"):
    return {"name": name, "model": name, "size": size, "size_vram": vram,
            "context_length": ctx, "expires_at": expires}


def ollama_tables(placements: dict, loads: dict, streams=(1, 2, 2)):
    """One Ollama target, one rep of arms 1, 2, 4: each cell's placement (arm -> (before,
    after)), its requests' load_duration_ns (arm -> list) and gen_streams_max per arm."""
    cells, requests = [], []
    for position, (arm, peak) in enumerate(zip((1, 2, 4), streams)):
        before, after = placements.get(arm, ([_ps()], [_ps(expires="2030-01-01T00:05:00Z")]))
        cells.append({"target": "o", "run": "run1", "rep": 1, "arm": arm, "position": position,
                      "gen_streams": peak * 0.9, "gen_streams_max": peak,
                      "placement": json.dumps({"before": before, "after": after})})
        for i, ns in enumerate(loads.get(arm, [5_000_000] * arm)):
            requests.append({"target": "o", "run": "run1", "rep": 1, "arm": arm, "i": i,
                             "load_duration_ns": ns})
    fp = {"target": "o", "run": "run1", "server": {"backend": "ollama", "ps": [_ps()]},
          "model": {"name": "m"}, "config": {"target": {"model": "m"}}}
    return tables_of(pd.DataFrame(cells), pd.DataFrame(requests), fingerprints=[fp])


def test_ollama_names_no_cell_when_the_model_stayed_on_the_gpu_and_says_what_ran_at_once():
    from slotbench.checks import ollama

    (v,), _ = ollama.check(ollama_tables({}, {}), SETTINGS)
    assert v.assessable and not v.fired and v.evidence["cells"] == []
    # expires_at moving forward is every request's keep-alive, not a reload
    assert [r["gen_streams_max"] for r in v.evidence["parallelism"]] == [1, 2, 2]
    assert v.evidence["parallelism"][2]["serialised"]
    assert "OLLAMA_NUM_PARALLEL itself is not visible over HTTP" in v.sentence
    assert "4 in flight: 2 at most" in v.sentence


def test_ollama_names_the_cell_partly_on_the_cpu_and_the_cells_that_reloaded():
    from slotbench.checks import ollama

    placements = {
        2: ([_ps()], [_ps(vram=3_000)]),  # partly on the CPU after the cell
        4: ([], [_ps()]),  # loaded during the cell
    }
    loads = {1: [5_000_000, ollama.RELOAD_NS + 1]}  # one request paid a load
    (v,), _ = ollama.check(ollama_tables(placements, loads), SETTINGS)
    assert v.fired and v.verdict == "yes"
    by_cell = {f["cell"]: f for f in v.evidence["cells"]}
    assert by_cell["o/run1/rep1/arm2"]["split"] == ["m:latest 25% on the CPU after the cell"]
    assert by_cell["o/run1/rep1/arm4"]["reload"] == [
        "m:latest not loaded before the cell, loaded after it"]
    assert "1 request(s) with load_duration over 100 ms" in by_cell["o/run1/rep1/arm1"]["reload"][0]
    # its VRAM share changed during the cell: Ollama placed it again, a reload
    assert by_cell["o/run1/rep1/arm2"]["reload"] == ["m:latest's size_vram changed during the cell"]
    assert "1 cell(s) partly on the CPU" in v.summary and "3 cell(s) with a reload" in v.summary
    assert "o/run1/rep1/arm2" in v.sentence and "RELOAD_NS" in v.sentence
    # a context change between before and after is a reload too
    changed = {2: ([_ps()], [_ps(ctx=8192)])}
    (v,), _ = ollama.check(ollama_tables(changed, {}), SETTINGS)
    assert v.evidence["cells"][0]["reload"] == ["m:latest's context_length changed during the cell"]
