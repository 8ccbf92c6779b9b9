"""The checks that read the server's own evidence: rounds that split into two states, and the
batching decomposition held to the server's batch per decode step, on hand-built tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import synthetic
from slotbench.checks import batching, rounds, run_checks
from slotbench.checks.base import Tables

TOKENS = 64
PREFILL_S = 0.05


def make_tables(cells, requests=None, server_metrics=None) -> Tables:
    requests = requests if requests is not None else pd.DataFrame(
        columns=["target", "run", "rep", "arm", "position"])
    return Tables(cells=cells, requests=requests, control=cells.iloc[0:0],
                  thermal=pd.DataFrame(), summary=pd.DataFrame(),
                  server_metrics=server_metrics if server_metrics is not None
                  else pd.DataFrame())


# --- rounds -----------------------------------------------------------------------------------


def closed_loop(reps=5, rounds_per_cell=8, arm=2, rate=None, slots=None, batch=None,
                target="t", run="run1"):
    """Requests of a serial and a parallel arm, round by round: each round's N requests are sent
    together and the next round when they are done. rate(rep, round) is each user's tok/s in
    that round; slots(rep, round) the id_slot of its requests; batch(rep, round) the server's
    batch per step over it (one metric sample in the middle of the round)."""
    rate = rate or (lambda rep, rnd: 34.0)
    rows, samples = [], []
    for rep in range(reps):
        t = 0.0
        order = (1, arm) if rep % 2 == 0 else (arm, 1)
        for position, a in enumerate(order):
            request = 0
            for rnd in range(rounds_per_cell):
                r = 60.0 if a == 1 else rate(rep, rnd)
                gen = TOKENS / r
                ids = slots(rep, rnd) if (slots and a > 1) else list(range(a))
                for i in range(a):
                    rows.append({
                        "target": target, "run": run, "rep": rep, "arm": a,
                        "position": position, "request": request, "output_tokens": TOKENS,
                        "t_sent_s": t, "t_first_s": t + PREFILL_S,
                        "t_done_s": t + PREFILL_S + gen, "gen_s": gen, "control": False,
                        "id_slot": ids[i],
                    })
                    request += 1
                if batch and a > 1:
                    samples.append({"target": target, "run": run, "rep": rep, "arm": a,
                                    "position": position, "t_s": t + gen / 2,
                                    "metric": "batch", "value": batch(rep, rnd)})
                t += PREFILL_S + gen + 0.01
    return pd.DataFrame(rows), pd.DataFrame(samples)


@pytest.fixture
def fake_window(monkeypatch):
    """slotbench.tables.telemetry.window as a mean of the samples inside the window: the
    round's batch is what the test says it was."""

    def window(samples, t0, t1):
        inside = samples[(samples["t_s"] >= t0) & (samples["t_s"] <= t1)]
        return {"server_batch": float(inside["value"].mean()) if len(inside) else None}

    monkeypatch.setattr(rounds, "_window", lambda: window)


# 7 of the 40 parallel-2 rounds (5 reps x 8) are slow, on one slot and unbatched
SLOW = {(0, 3), (1, 5), (2, 1), (2, 6), (3, 2), (4, 4), (4, 7)}


def split_arm(noise=0.3):
    jitter = np.random.default_rng(7).normal(0, noise, size=(5, 8))
    return closed_loop(
        rate=lambda rep, rnd: (20.4 if (rep, rnd) in SLOW else 34.1) + jitter[rep, rnd],
        slots=lambda rep, rnd: [0, 0] if (rep, rnd) in SLOW else [0, 1],
        batch=lambda rep, rnd: 1.02 if (rep, rnd) in SLOW else 1.96,
    )


def test_a_bimodal_arm_is_found_with_its_counts_and_the_median_cluster(fake_window):
    requests, samples = split_arm()
    cells = synthetic.make_cells(requests)
    verdicts, details = rounds.check(make_tables(cells, requests, samples), {})
    (v,) = verdicts
    assert v.assessable and v.fired and v.effect == "warn" and v.arms == [2]
    arm = v.evidence["arms"][0]
    slower, faster = arm["clusters"]
    assert (slower["rounds"], faster["rounds"]) == (7, 33)
    assert slower["user_tps_median"] == pytest.approx(20.4, abs=0.5)
    assert faster["user_tps_median"] == pytest.approx(34.1, abs=0.5)
    assert slower["server_batch"] == pytest.approx(1.02)
    assert faster["server_batch"] == pytest.approx(1.96)
    assert slower["slots"] == "slot 0 ×14"
    assert "in them slot 0 ×14, in the others slot 0 ×33, slot 1 ×33" in v.sentence
    assert arm["lands"] == "faster" and arm["minority"] == "slower"
    assert "parallel-2: 7 of 40 rounds got no batching" in v.sentence
    assert "the server decoded 1.02 sequences per step in them against 1.96" in v.sentence
    assert "lands in the faster cluster" in v.sentence
    assert "does not describe the other 7" in v.sentence
    assert "slot placement" in v.sentence and "it did not batch them" in v.sentence
    assert "SEPARATION = 3" in v.sentence
    assert v.evidence["warnings"] and v.cells  # the slow rounds' cells are named
    table = details["rounds"]
    assert list(table.columns) == rounds.ROUND_COLUMNS
    assert len(table) == 40 and (table["cluster"] == "slower").sum() == 7
    assert set(table.loc[table["cluster"] == "slower", "slots"]) == {"0;0"}


def test_slow_rounds_at_one_position_are_named():
    # the slow rounds all sit in the cells at position 1 (odd reps put arm 2 first)
    slow = {(0, 1), (0, 4), (2, 2), (2, 5), (4, 0), (4, 6)}
    requests, _ = closed_loop(rate=lambda rep, rnd: 20.0 if (rep, rnd) in slow else 34.0)
    verdicts, _ = rounds.check(make_tables(synthetic.make_cells(requests), requests), {})
    (v,) = verdicts
    assert v.fired
    assert "position in the rep: 6 of the 6 slower rounds were at position 1" in v.sentence
    assert "ran in another state" in v.sentence  # no server evidence of no batching


def test_a_unimodal_arm_passes_with_its_counts():
    jitter = np.random.default_rng(3).normal(0, 1.5, size=(5, 8))
    requests, _ = closed_loop(rate=lambda rep, rnd: 34.0 + jitter[rep, rnd])
    verdicts, details = rounds.check(make_tables(synthetic.make_cells(requests), requests), {})
    (v,) = verdicts
    assert v.assessable and not v.fired and v.verdict == "no" and v.effect == "none"
    assert "parallel-2: 40 rounds in one state" in v.summary
    assert set(details["rounds"]["cluster"]) == {"one"}


def test_two_tight_groups_close_together_are_not_two_states():
    # 34 against 32: well separated against their spread, but under MIN_GAP_SHARE apart
    requests, _ = closed_loop(rate=lambda rep, rnd: 32.0 if rnd < 3 else 34.0)
    assert rounds.split([32.0] * 15 + [34.0] * 25)["bimodal"] is False
    verdicts, _ = rounds.check(make_tables(synthetic.make_cells(requests), requests), {})
    assert not verdicts[0].fired and verdicts[0].assessable


def test_one_outlier_round_is_not_a_second_state():
    x = [34.0 + 0.1 * i for i in range(20)] + [5.0]
    found = rounds.split(x)
    assert found["bimodal"] is False


def test_too_few_rounds_is_not_assessable():
    requests, _ = closed_loop(reps=1, rounds_per_cell=7)
    verdicts, details = rounds.check(make_tables(synthetic.make_cells(requests), requests), {})
    (v,) = verdicts
    assert not v.assessable and v.verdict == "not assessable" and not v.fired
    assert "7 rounds, too few to judge" in v.sentence
    assert len(details["rounds"]) == 7


def test_rounds_of_old_results_are_not_assessable_without_a_crash():
    requests, _ = closed_loop()
    old = requests.drop(columns=["id_slot", "gen_s"])
    verdicts, details = rounds.check(make_tables(synthetic.make_cells(requests), old), {})
    (v,) = verdicts
    assert not v.assessable and "gen_s" in v.summary
    assert details["rounds"].empty
    # without slots or server metrics the split is still judged, with no server evidence
    requests, _ = split_arm()
    verdicts, _ = rounds.check(make_tables(synthetic.make_cells(requests),
                                           requests.drop(columns=["id_slot"])), {})
    assert verdicts[0].fired and "not explained by what the server reports" in \
        verdicts[0].sentence


def test_rounds_group_a_closed_loop_by_sends():
    requests, _ = closed_loop(reps=1, rounds_per_cell=3, arm=4)
    requests = requests[~((requests["arm"] == 4) & (requests["request"] == 11))]  # 4, 4, 3
    table = rounds.rounds(requests)
    assert list(table["round"]) == [0, 1]  # the trailing round of 3 is left out
    assert set(table["requests"]) == {4}


# --- batching ---------------------------------------------------------------------------------


def batch_cells(batch: dict, user: dict, reps=5, note=None) -> pd.DataFrame:
    """Cells of arms 1, 2 and 4 with the server's batch and each user's rate per arm."""
    rows = []
    for rep in range(reps):
        for position, arm in enumerate((1, 2, 4)):
            rows.append({"target": "t", "run": "run1", "rep": rep, "arm": arm,
                         "position": position, "agg_tps": user[arm] * arm,
                         "user_tps": user[arm], "ttft_s": 0.1, "server_batch": batch[arm],
                         "server_batch_metric": "llamacpp:n_busy_slots_per_decode",
                         "telemetry_note": note})
    return pd.DataFrame(rows)


def judge(cells):
    verdicts, details = batching.check(make_tables(cells), {})
    assert details == {}
    (v,) = verdicts
    return v


def test_a_server_that_decoded_one_sequence_per_step_serialised_the_arm():
    v = judge(batch_cells({1: 1.0, 2: 1.9, 4: 1.0}, {1: 60.0, 2: 50.0, 4: 15.0}))
    assert v.fired and v.verdict == "serialised" and v.arms == [4]
    assert v.effect == "warn"  # as the serialisation check's
    assert ("the server decoded 1.00 sequence per step at parallel-4: it serialised what the "
            "client sent in parallel") in v.sentence
    assert v.evidence["warnings"] and "serial-1 1.00 sequence per step" in v.sentence


def test_batching_that_bought_little_is_a_note_not_a_warning():
    v = judge(batch_cells({1: 1.0, 2: 1.93, 4: 3.8}, {1: 60.0, 2: 32.7, 4: 40.0}))
    assert v.assessable and not v.fired and v.effect == "none"
    assert ("at parallel-2 the server decoded 1.93 sequences per step, so batching was "
            "available; gen_gain 1.09× says it bought little") in v.sentence
    assert "parallel-2: 1.93 per step, gen_gain 1.09× (little gain)" in v.summary
    assert len(v.evidence["notes"]) == 1


def test_a_contradiction_makes_the_decomposition_provisional():
    v = judge(batch_cells({1: 1.0, 2: 1.0, 4: 3.9}, {1: 60.0, 2: 54.0, 4: 9.0}))
    assert v.fired and v.verdict == "contradiction" and v.effect == "provisional"
    assert v.arms == [2]
    assert "1.00 sequence per step, yet gen_gain was 1.80×" in v.sentence
    # a full batch that lost generation throughput is no contradiction: a batched step can
    # cost more than the steps it replaced; it is said, beside the contradiction
    assert "3.90 sequences per step, near the 4 streams" in v.sentence
    assert "gen_gain was 0.60×" in v.sentence and "batching lost generation throughput" \
        in v.sentence
    lost = judge(batch_cells({1: 1.0, 2: 2.0, 4: 3.9}, {1: 60.0, 2: 25.0, 4: 9.0}))
    assert not lost.fired and "batching lost generation throughput" in lost.sentence


def test_batching_without_telemetry_is_not_assessable():
    old = batch_cells({1: 1.0, 2: 2.0, 4: 4.0}, {1: 60.0, 2: 50.0, 4: 40.0})
    v = judge(old.drop(columns=["server_batch", "server_batch_metric", "telemetry_note"]))
    assert not v.assessable and "measured before" in v.summary
    none = batch_cells({1: None, 2: None, 4: None}, {1: 60.0, 2: 50.0, 4: 40.0},
                       note="the server has no /metrics")
    v = judge(none)
    assert not v.assessable and v.evidence["reason"] == "the server has no /metrics"


def test_a_serial_batch_away_from_one_makes_the_counter_not_credible():
    v = judge(batch_cells({1: 1.3, 2: 1.0, 4: 1.0}, {1: 60.0, 2: 30.0, 4: 15.0}))
    assert not v.assessable and not v.fired
    assert "not credible" in v.sentence and v.evidence["serial_batch"] == pytest.approx(1.3)


# --- old results through every check ----------------------------------------------------------


def test_old_results_run_through_every_check_with_both_not_assessable():
    t = synthetic.tables(synthetic.make_requests(reps=2))
    verdicts, details = run_checks(t, synthetic.sbconfig.check_settings(synthetic.config()))
    by_trap = {v.trap: v for v in verdicts}
    assert not by_trap["batching"].assessable
    # the synthetic cells have 4 requests: one round at parallel-4, two at parallel-2
    assert not by_trap["rounds"].assessable and "too few" in by_trap["rounds"].summary
    assert "rounds" in details


def test_the_report_shows_the_two_states_of_an_arm():
    requests, _ = split_arm()
    requests = requests.assign(
        prompt_tokens=160, nonce=[f"n{i}" for i in range(len(requests))], done_reason="length",
        timing_source="server", cache_n=0, prompt_n=160,
        raw_file=[synthetic.raw_path("t", "run1", int(rep)) for rep in requests["rep"]])
    md, page, _, _ = synthetic.rendered(requests)
    row = synthetic.trap_row(md, rounds.TITLE)
    assert row[1] == "yes" and row[3] == "parallel-2: 7 slower and 33 faster rounds"
    assert synthetic.trap_row(md, batching.TITLE)[1] == "not assessable"
    details = md[md.index(f"#### {rounds.TITLE}"):]
    assert "| parallel-2, slower | 7 | 20.1 | n/a | slot 0 ×14 | 0: 2, 1: 5 | no |" in details
    assert "| parallel-2, faster | 33 | 34.0 |" in details
    assert "integrity/t/rounds/clusters" in page


def test_the_loader_reads_server_metrics_only_where_the_file_is(tmp_path):
    from slotbench.checks.base import read_optional

    assert read_optional(None).empty and read_optional(tmp_path / "absent.parquet").empty
    samples = pd.DataFrame({"target": ["t"], "run": ["run1"], "rep": [0], "t_s": [1.0],
                            "metric": ["llamacpp:n_decode_total"], "value": [12.0]})
    samples.to_parquet(tmp_path / "server_metrics.parquet")
    read = read_optional(tmp_path / "server_metrics.parquet")
    assert list(read["value"]) == [12.0]


def test_the_servers_token_counter_is_cross_checked_with_the_clients_count():
    """A cell whose server counted more tokens than the client received (another client on the
    server) is named; equal counts agree; no counter read is not assessable, never agreement."""
    from slotbench.checks import server_numbers as sn

    cells = pd.DataFrame({"target": ["t"] * 3, "run": ["run1"] * 3, "rep": [1, 1, 2],
                          "arm": [1, 2, 1], "position": [0, 1, 0],
                          "tokens_out": [128, 128, 128],
                          "server_output_tokens": [128.0, 200.0, 128.0]})
    n, bad, example = sn.counter_disagreements(cells)
    assert n == 3 and len(bad) == 1 and "counted 200" in example and "received 128" in example
    clause, _, warning, read = sn.counter_clause(cells)
    assert "disagreed" in clause and warning.startswith("Warning:") and read
    agree = cells.assign(server_output_tokens=128.0)
    assert sn.counter_clause(agree)[0].endswith("equalled the client's count")
    unread = cells.assign(server_output_tokens=float("nan"))
    assert "not assessable" in sn.counter_clause(unread)[0] and not sn.counter_clause(unread)[3]
    assert "not assessable" in sn.counter_clause(cells.drop(columns="server_output_tokens"))[0]


def test_rounds_run_while_other_processes_took_the_cpu_are_explained_by_the_host():
    """The slow rounds' windows saw another process use a core (the host sampler's rows); the
    fast ones did not: the split is put down to the host, with both numbers."""
    requests, _ = split_arm()
    rows = []
    table = rounds.rounds(requests)
    for r in table.itertuples():  # one host sample early in each round
        cell = requests[(requests["rep"] == r.rep) & (requests["arm"] == r.arm)]
        sent = cell.sort_values("t_sent_s")["t_sent_s"].to_numpy()[r.round * r.arm]
        rows.append({"target": "t", "run": "run1", "rep": r.rep, "t_s": sent + 0.1,
                     "server_cores": 1.0, "other_cores": 1.0 if r.user_tps < 27 else 0.05})
    host = pd.DataFrame(rows)
    cells = synthetic.make_cells(requests)
    t = make_tables(cells, requests)
    t.host = host
    (v,), details = rounds.check(t, {})
    assert v.fired
    assert "other processes on this machine used 1.00 cores during the slower rounds against " \
           "0.05 during the faster ones" in v.sentence, v.sentence
    assert "the server process used" not in v.sentence  # it had its core in both
    assert details["rounds"]["other_cores"].notna().all()
