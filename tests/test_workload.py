"""Workloads: a rep draws its request shapes once and every arm sends the same shapes, each
request with a fresh nonce and a prompt built to its planned length; the article's plans are
exactly what they were before workloads existed."""

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import pytest
import yaml

from slotbench.measure import workload as wl
from slotbench.measure.plan import context_problem, make_rep_plan, run_plan
from slotbench.workflow import config as sbconfig

REPO = Path(__file__).resolve().parents[1]
SYNTHETIC = {"kind": "synthetic", "input_tokens": {"dist": "fixed", "value": 40},
             "output_tokens": {"dist": "uniform", "min": 8, "max": 64}}


def words_tokenizer(text: str) -> int:
    """A stand-in for a server's tokenizer: a BOS, one token per word, one per digit of a nonce,
    and two for a few words (so the vocabulary and the adjustment have work to do)."""
    n = 1
    for word in text.split():
        if word.rstrip(":").isdigit():
            n += len(word.rstrip(":")) + (1 if word.endswith(":") else 0)
        else:
            n += 2 if word in {"university", "american", "national"} else 1
    return n


def _plan(workload=SYNTHETIC, count=words_tokenizer, **kw):
    args = dict(target="t", run="run1", arms=[1, 2, 4], requests_per_cell=4, seed=5,
                template="Request {nonce}. Summarise.", nonce_digits=6, count_tokens=count,
                nonces=True, control_arm=False, workload=workload)
    return run_plan(**(args | kw))


def _rep(plan, rep=1, count=words_tokenizer, pin=True, trace=None):
    return make_rep_plan(plan, rep, count, client_processes=1, pin=pin, trace=trace)


def test_every_arm_of_a_rep_sends_the_same_shapes_in_the_same_order_with_fresh_nonces():
    rep = _rep(_plan())
    shapes = [[(r["input_tokens"], r["output_tokens"]) for r in c["requests"]]
              for c in rep["cells"]]
    assert len(shapes) == 3 and shapes[0] == shapes[1] == shapes[2]
    assert len(set(o for _, o in shapes[0])) > 1, "uniform output lengths were all one value"
    nonces = [r["nonce"] for c in rep["cells"] for r in c["requests"]]
    nonces += [w["nonce"] for w in rep["warmup"]]
    assert len(set(nonces)) == len(nonces)
    prompts = [r["prompt"] for c in rep["cells"] for r in c["requests"]]
    assert len(set(prompts)) == len(prompts), "two requests share a prompt: a cache could hit"
    assert all(p.startswith(f"Request {n}:") for p, n in
               zip(prompts, (r["nonce"] for c in rep["cells"] for r in c["requests"])))


def test_prompts_are_built_to_their_exact_planned_length_by_the_servers_tokenizer():
    plan = _plan(workload=SYNTHETIC | {"input_tokens": {"dist": "uniform", "min": 20,
                                                         "max": 300}})
    assert "university" not in plan["vocabulary"], "a two-token word was kept"
    assert plan["tokenizer"] == "server" and plan["prompt_tokens"] is None
    for rep in (1, 2, 3):
        for cell in _rep(plan, rep)["cells"]:
            for r in cell["requests"]:
                assert words_tokenizer(r["prompt"]) == r["input_tokens"]


def test_a_tokenizer_that_merges_words_is_met_by_adjusting_the_prompt():
    def merging(text):  # "of the" is one token: a first guess comes out short
        return words_tokenizer(text) - text.count(" of the")

    words = wl.vocabulary(merging)
    rng = random.Random(3)
    for tokens in (12, 50, 400):
        text, counted = wl.build_prompt("123456", tokens, words + ["of", "the"], rng, merging)
        assert counted == merging(text) == tokens


def test_without_a_tokenizer_the_length_is_an_estimate_and_says_so():
    plan = _plan(count=None)
    assert plan["vocabulary"] is None and plan["tokenizer"] is None
    rep = make_rep_plan(plan, 1, None, client_processes=1, pin=False)
    request = rep["cells"][0]["requests"][0]
    assert request["pinned"] is False
    assert abs(words_tokenizer(request["prompt"]) - request["input_tokens"]) < 10


def test_the_shapes_come_from_seed_target_run_and_rep_alone():
    assert _rep(_plan(), 2) == _rep(_plan(), 2)
    draw = [[r["output_tokens"] for r in c["requests"]] for c in _rep(_plan(), 1)["cells"]]
    other = [[r["output_tokens"] for r in c["requests"]] for c in _rep(_plan(), 2)["cells"]]
    assert draw != other, "two reps drew the same shapes"
    assert _rep(_plan(), 1) != _rep(_plan(run="run2"), 1)


def test_warm_up_requests_keep_the_warm_up_length_and_are_not_planned():
    rep = _rep(_plan())
    assert rep["warmup"] and all("output_tokens" not in w for w in rep["warmup"])
    assert all(r["pinned"] is True for c in rep["cells"] for r in c["requests"])


@pytest.mark.parametrize("spec", [
    {"dist": "normal", "mean": 100, "sd": 40, "min": 50, "max": 160},
    {"dist": "lognormal", "mean": 200, "sd": 150, "min": 20, "max": 2000},
    {"dist": "uniform", "min": 7, "max": 9},
])
def test_every_draw_falls_inside_its_bounds_and_follows_its_distribution(spec):
    rng = random.Random(1)
    values = [wl.draw(spec, rng) for _ in range(4000)]
    assert min(values) >= spec["min"] and max(values) <= spec["max"]
    if spec["dist"] == "uniform":
        assert set(Counter(values)) == {7, 8, 9}
    else:
        mean = sum(values) / len(values)
        assert abs(mean - spec["mean"]) < 0.1 * spec["mean"], mean
        assert len(set(values)) > 20


def test_a_distribution_that_almost_never_lands_inside_its_bounds_is_a_clear_error():
    spec = {"dist": "normal", "mean": 100, "sd": 1, "min": 500, "max": 600}
    with pytest.raises(wl.WorkloadError, match="widen min..max"):
        wl.draw(spec, random.Random(1))


def test_a_request_that_cannot_fit_a_slot_is_refused_with_one_line_naming_it():
    plan = _plan(workload=SYNTHETIC | {"input_tokens": {"dist": "uniform", "min": 100,
                                                         "max": 3000}})
    problem = context_problem(plan, 200, (2048, "each slot's context"))
    assert problem is not None and "\n" not in problem
    assert "3000 prompt tokens plus 64 output tokens" in problem and "2048" in problem
    assert context_problem(plan, 200, (4096, "each slot's context")) is None
    assert context_problem(plan, 200, None) is None


def _resolve(workload):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    return sbconfig.resolve(cfg | {"workload": workload})


@pytest.mark.parametrize("workload,message", [
    ({"kind": "synthetic", "input_tokens": {"dist": "fixed", "value": 10}},
     "`workload.output_tokens`: a synthetic workload needs it"),
    ({"kind": "synthetic", "input_tokens": {"dist": "uniform", "min": 30, "max": 5},
      "output_tokens": {"dist": "fixed", "value": 4}}, "min 30 is above max 5"),
    ({"kind": "synthetic", "input_tokens": {"dist": "fixed", "value": 10, "min": 3},
      "output_tokens": {"dist": "fixed", "value": 4}},
     "`workload.input_tokens.min`: a fixed length does not take it"),
    ({"kind": "synthetic", "input_tokens": {"dist": "normal", "mean": 10, "min": 3, "max": 30},
      "output_tokens": {"dist": "fixed", "value": 4}},
     "`workload.input_tokens.sd`: a normal length needs it"),
    ({"kind": "synthetic", "input_tokens": {"dist": "zipf", "value": 3},
      "output_tokens": {"dist": "fixed", "value": 4}}, "`workload.input_tokens.dist`"),
    ({"kind": "multi_turn", "turns": 3}, "`workload.input_tokens`: a multi_turn workload"),
    ({"kind": "multi_turn", "input_tokens": {"dist": "fixed", "value": 10},
      "output_tokens": {"dist": "fixed", "value": 4}}, "`workload.turns`: a multi_turn"),
    ({"kind": "article", "turns": 3}, "`workload.turns`: belongs to another kind"),
    ({"kind": "synthetic", "input_tokens": {"dist": "fixed", "value": 10},
      "output_tokens": {"dist": "fixed", "value": 4}, "path": "x.csv"},
     "`workload.path`: does not apply to a synthetic workload"),
])
def test_a_bad_workload_is_one_line_naming_its_key_before_anything_is_sent(workload, message):
    with pytest.raises(sbconfig.ConfigError) as err:
        _resolve(workload)
    assert message in str(err.value)
    assert "nothing was sent" in str(err.value)


def test_a_workload_refuses_the_article_only_keys_in_one_line_each():
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    with pytest.raises(sbconfig.ConfigError) as err:
        sbconfig.resolve(cfg | {"workload": SYNTHETIC, "control_arm": True,
                                "prompt": {"nonces": False}})
    assert "`control_arm`: applies to the article workload only" in str(err.value)
    assert "`prompt.nonces`" in str(err.value)


def test_the_resolved_workload_holds_only_its_kinds_keys_and_the_article_none():
    assert _resolve({})["workload"] == {"kind": "article"}
    assert _resolve(SYNTHETIC)["workload"] == SYNTHETIC
    article = _resolve({})
    assert "workload" not in sbconfig.experiment(article, article["targets"][0]["name"])
    synthetic = _resolve(SYNTHETIC)
    name = synthetic["targets"][0]["name"]
    assert sbconfig.experiment(synthetic, name)["workload"] == SYNTHETIC


# sha256 of the run plan and reps 1-3 of the default config and config/smoke.yaml, with
# words_tokenizer's predecessor below, as made by slotbench before workloads existed (5d3b4db)
ARTICLE_DIGESTS = {
    "config.yaml": "8c0a8476f586bedc8723dfca0c40d46cfc6ac6a01efd01d4f1acbf6100138907",
    "smoke.yaml": "5909d0a5b2b2901dbfc409c44cbe25ba34acbf0368521b269a5025a8a1126a16",
}


@pytest.mark.parametrize("name", sorted(ARTICLE_DIGESTS))
def test_the_articles_plans_are_byte_for_byte_what_they_were_before_workloads(name):
    def count(text):  # nonces with a 7 cost one token more
        return len(text.split()) + (1 if "7" in text.split()[1] else 0)

    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if name != "config.yaml":
        raw |= yaml.safe_load((REPO / "config" / name).read_text())
    cfg = sbconfig.resolve(raw)
    p = cfg["prompt"]
    plan = run_plan("embedded", "run1", cfg["arms"], cfg["requests_per_cell"], cfg["seed"],
                    p["template"], p["nonce_digits"], count, nonces=p["nonces"],
                    control_arm=cfg["control_arm"],
                    **sbconfig.workload_params(cfg, "embedded"))
    reps = [make_rep_plan(plan, r, count, client_processes=1) for r in (1, 2, 3)]
    digest = hashlib.sha256(json.dumps([plan, reps], sort_keys=True).encode()).hexdigest()
    assert digest == ARTICLE_DIGESTS[name]


# the real traces sit beside the checkout, never in it (see tests/test_traces.py)
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
EXAMPLES = REPO / "config" / "workloads" / "traces"
# each trace at a length_scale that fits its largest request into one 1024-token slot
TRACE_CASES = [(SHARED / "azure-conv-2023.csv", 0.06),
               (SHARED / "mooncake-conversation.jsonl", 0.007),
               (EXAMPLES / "example-burstgpt.csv", 0.1), (EXAMPLES / "example-mooncake.jsonl", 0.04)]


def _trace_workload(path: Path, scale: float) -> dict:
    return {"kind": "trace", "path": str(path), "format": "auto", "mode": "lengths",
            "length_scale": scale, "time_scale": 1.0}


@pytest.mark.parametrize("path,scale", TRACE_CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_a_trace_workloads_requests_take_the_traces_lengths_scaled_request_for_request(
        path, scale):
    if not path.is_file():
        pytest.skip(f"{path} is not beside this checkout (the real traces are never shipped)")
    from slotbench.measure.traces import scale_length

    workload = _trace_workload(path, scale)
    trace = wl.load_trace(workload)
    plan = _plan(workload=workload, trace=trace)
    assert plan["trace"]["sha256"] == wl.file_sha256(path)
    assert plan["trace"]["rows"] == len(trace.rows) and plan["trace"]["length_scale"] == scale
    pairs = {(scale_length(r.input_tokens, scale), scale_length(r.output_tokens, scale))
             for r in trace.rows}
    sent = []
    for rep in (1, 2, 3):
        for cell in _rep(plan, rep, trace=trace)["cells"]:
            for r in cell["requests"]:
                traced = r.get("trace_input_tokens", r["input_tokens"])
                assert (traced, r["output_tokens"]) in pairs
                assert r["input_tokens"] == max(traced, plan["min_input_tokens"])
                assert words_tokenizer(r["prompt"]) == r["input_tokens"]
                sent.append(r["input_tokens"])
    assert len(set(sent)) > 3, "the sampled lengths do not vary like the trace's"
    assert context_problem(plan, 200, (1024, "each slot's context"), trace) is None


def test_a_trace_whose_largest_request_cannot_fit_a_slot_is_refused_naming_its_row():
    path = EXAMPLES / "example-azure.csv"
    workload = _trace_workload(path, 1.0)
    trace = wl.load_trace(workload)
    problem = wl.context_problem(workload, (1024, "each slot's context"), trace)
    assert problem is not None and "the trace's largest request (row " in problem
    assert "length_scale" in problem and "\n" not in problem


def test_a_rep_refuses_a_trace_that_changed_since_its_plan(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text((EXAMPLES / "example-azure.csv").read_text())
    workload = _trace_workload(path, 0.1)
    plan = _plan(workload=workload, trace=wl.load_trace(workload))
    assert wl.trace_changed(plan) is None
    path.write_text(path.read_text().replace(",", ",1", 1))
    assert "changed since the run's plan" in wl.trace_changed(plan)
    path.unlink()
    assert "is gone" in wl.trace_changed(plan)


def test_a_trace_workload_resolves_with_its_defaults_and_replay_needs_its_rate_arm():
    path = str(EXAMPLES / "example-azure.csv")
    resolved = _resolve({"kind": "trace", "path": path})["workload"]
    assert resolved == _trace_workload(Path(path), 1.0)
    with pytest.raises(sbconfig.ConfigError, match="`workload.mode`: replay plays the trace's"):
        _resolve({"kind": "trace", "path": path, "mode": "replay"})
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    replaying = [1, 2, {"rate": 1.0, "arrival": "trace"}]
    with pytest.raises(sbconfig.ConfigError, match="`arms`: a rate arm with arrival trace"):
        sbconfig.resolve(cfg | {"arms": replaying, "workload": {"kind": "trace", "path": path}})
    with pytest.raises(sbconfig.ConfigError, match="`arms`: a rate arm with arrival trace"):
        sbconfig.resolve(cfg | {"arms": replaying})
    resolved = sbconfig.resolve(cfg | {"arms": replaying, "workload": {
        "kind": "trace", "path": path, "mode": "replay"}})
    assert resolved["workload"]["mode"] == "replay"


@pytest.mark.parametrize("path,scale", TRACE_CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_a_replayed_trace_arrives_at_its_own_gaps_times_time_scale(path, scale):
    if not path.is_file():
        pytest.skip(f"{path} is not beside this checkout (the real traces are never shipped)")
    from slotbench.measure.traces import scale_length

    workload = _trace_workload(path, scale) | {"mode": "replay", "time_scale": 0.5}
    trace = wl.load_trace(workload)
    plan = _plan(workload=workload, trace=trace,
                 arms=[1, 2, {"rate": 1.0, "arrival": "trace", "burstiness": 1.0}])
    for rep in (1, 2):
        entry = _rep(plan, rep, trace=trace)
        rate_cell = next(c for c in entry["cells"] if c["arm"] < 0)
        rows = [r["trace_row"] for r in rate_cell["requests"]]
        assert rows == list(range(rows[0], rows[0] + 4)), "not a window of consecutive rows"
        first = trace.rows[rows[0]].t_s
        assert rate_cell["arrivals"] == pytest.approx(
            [(trace.rows[i].t_s - first) * 0.5 for i in rows], abs=1e-9)
        span = rate_cell["arrivals"][-1]
        if span > 0:
            assert rate_cell["open"]["rate"] == pytest.approx(3 / span)
        for cell in entry["cells"]:  # every arm sends the window's lengths, in its order
            assert [r["trace_row"] for r in cell["requests"]] == rows
            for r in cell["requests"]:
                row = trace.rows[r["trace_row"]]
                assert r["output_tokens"] == scale_length(row.output_tokens, scale)
                assert r.get("trace_input_tokens", r["input_tokens"]) == scale_length(
                    row.input_tokens, scale)
    starts = {_rep(plan, rep, trace=trace)["cells"][0]["requests"][0]["trace_row"]
              for rep in range(1, 6)}
    assert len(starts) > 1, "every rep replayed the same window"


SHARED_PREFIX = {"kind": "shared_prefix", "prefix_tokens": 60, "prefix_groups": 2,
                 "prefix_scope": "cell", "input_tokens": {"dist": "fixed", "value": 20},
                 "output_tokens": {"dist": "fixed", "value": 8}}


def _prefix_of(prompt: str) -> str:
    return prompt[: prompt.index(" Request ")]


def test_each_cell_gets_prefixes_of_its_own_and_each_request_opens_with_its_groups():
    plan = _plan(workload=SHARED_PREFIX)
    rep = _rep(plan)
    seen = []
    for cell in rep["cells"]:
        prefixes = {}
        for r in cell["requests"]:
            assert r["prefix_group"] == r["request"] % 2 and r["allow_cache"] is True
            assert words_tokenizer(r["prompt"]) == r["input_tokens"] == 80
            assert words_tokenizer(_prefix_of(r["prompt"])) == 60
            prefixes.setdefault(r["prefix_group"], set()).add(_prefix_of(r["prompt"]))
            first = r["request"] < 2
            assert r["planned_cached_tokens"] == (0 if first else 60) + plan["min_input_tokens"] - 1
        assert all(len(p) == 1 for p in prefixes.values()), "a group with two prefixes"
        seen += [next(iter(p)) for p in prefixes.values()]
    assert len(set(seen)) == len(seen) == 6, "two cells share a prefix: an arm could profit"
    assert all(p.startswith("System ") for p in seen)
    assert all("allow_cache" not in w for w in rep["warmup"])


def test_a_rep_scope_reuses_one_set_of_prefixes_in_every_cell_of_the_rep():
    rep = _rep(_plan(workload=SHARED_PREFIX | {"prefix_scope": "rep"}))
    prefixes = {_prefix_of(r["prompt"]) for c in rep["cells"] for r in c["requests"]}
    assert len(prefixes) == 2


def test_a_shared_prefix_counts_in_the_largest_request_and_needs_its_length():
    plan = _plan(workload=SHARED_PREFIX | {"prefix_tokens": 1000})
    assert "1020 prompt tokens plus 8 output tokens" in context_problem(
        plan, 200, (1024, "each slot's context"))
    bad = {k: v for k, v in SHARED_PREFIX.items() if k != "prefix_tokens"}
    with pytest.raises(sbconfig.ConfigError, match="`workload.prefix_tokens`: a shared_prefix"):
        _resolve(bad)
    assert _resolve(SHARED_PREFIX)["workload"] == SHARED_PREFIX


def test_swa_full_is_a_managed_llama_servers_flag_only_where_asked():
    from slotbench.measure.servers.llamacpp import server_command

    settings = {"parallel": 4, "ctx_size": 4096, "threads": 2}
    assert "--swa-full" not in server_command(Path("s"), Path("m"), 1, settings)
    assert "--swa-full" in server_command(Path("s"), Path("m"), 1, settings | {"swa_full": True})
    cfg = yaml.safe_load((REPO / "config" / "ollama.yaml").read_text())
    cfg["targets"][0]["server"] = {"swa_full": True}
    cfg["targets"][0]["managed"] = True
    cfg["targets"][0].pop("url")
    with pytest.raises(sbconfig.ConfigError, match="server.swa_full`: applies only to a managed "
                                                     "llamacpp"):
        sbconfig.resolve(yaml.safe_load((REPO / "config" / "config.yaml").read_text()) | cfg)


def test_the_cache_check_measures_the_hits_a_workload_plans_and_flags_only_the_rest():
    import pandas as pd

    from slotbench.checks.cache import cache_hits, planned_hit_rates

    rows = []
    for arm, served in ((1, 60), (4, 30)):
        for request in range(4):
            later = request >= 2
            rows.append({"target": "t", "run": "run1", "rep": 1, "arm": arm, "position": 0,
                         "request": request, "prompt_tokens": 80,
                         "cache_n": served if later else 3, "prompt_n": 80 - (served if later
                                                                               else 3),
                         "prefix_tokens": 60, "planned_cached_tokens": (60 if later else 0) + 9})
    rows.append(rows[0] | {"request": 9, "cache_n": 50, "prompt_n": 30})  # a first one that hit
    frame = pd.DataFrame(rows)
    hits = cache_hits(frame)
    assert list(hits["request"]) == [9], hits
    assert planned_hit_rates(frame) == {1: 1.0, 4: 0.5}


MULTI_TURN = {"kind": "multi_turn", "turns": 3, "think_time_s": 0.5,
              "input_tokens": {"dist": "uniform", "min": 20, "max": 40},
              "output_tokens": {"dist": "fixed", "value": 8}}


def test_a_conversation_cell_sends_its_sessions_turns_in_order_from_one_client_process():
    plan = _plan(workload=MULTI_TURN)
    rep = make_rep_plan(plan, 1, words_tokenizer, client_processes=2, pin=True)
    shapes = []
    for cell in rep["cells"]:
        requests = cell["requests"]
        assert len(requests) == 4 * 3, "requests_per_cell counts sessions"
        assert [(r["session"], r["turn"]) for r in requests] == [
            (s, t) for s in range(4) for t in range(3)]
        assert all(("allow_cache" in r) == (r["turn"] > 0) for r in requests)
        assert all(words_tokenizer(r["prompt"]) == r["input_tokens"] for r in requests)
        assert all(r["think_time_s"] == 0.5 for r in requests)
        assert len(cell["shares"]) == 1 and cell["shares"][0]["streams"] == cell["arm"]
        shapes.append([(r["input_tokens"], r["output_tokens"]) for r in requests])
    assert shapes[0] == shapes[1] == shapes[2]
    with pytest.raises(sbconfig.ConfigError, match="rate arms are not measured with it"):
        cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        sbconfig.resolve(cfg | {"workload": MULTI_TURN, "arms": [1, 2, {"rate": 1.0}]})


def test_a_later_turns_length_is_the_history_and_its_cache_may_serve_the_last_turn():
    from slotbench.tables.consolidate import request_rows

    def req(session, turn, prompt, out):
        return {"request": session * 2 + turn, "nonce": "1", "prompt_tokens": prompt,
                "output_tokens": out, "chunks": out,
                "planned": {"input_tokens": 20, "output_tokens": out, "pinned": True,
                            "session": session, "turn": turn}}

    raw = {"target": "t", "run": "run1", "rep": 1, "settings": {"num_predict": 8},
           "cells": [{"arm": 2, "position": 0, "requests": [
               req(0, 0, 20, 8), req(0, 1, 50, 8), req(1, 0, 20, 8), req(1, 1, 51, 8)]}]}
    rows = request_rows(raw, "raw.json")
    assert [r["planned_input_tokens"] for r in rows] == [20, None, 20, None]
    assert [r["planned_cached_tokens"] for r in rows] == [None, 28, None, 28]
    assert [(r["session"], r["turn"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_a_missing_trace_is_one_line_where_the_run_is_planned_not_at_validation(tmp_path):
    workload = _trace_workload(tmp_path / "gone.csv", 1.0)
    assert _resolve({"kind": "trace", "path": str(tmp_path / "gone.csv")})  # re-renders
    with pytest.raises(wl.WorkloadError, match="`workload.path`: no file"):
        wl.load_trace(workload)


def test_two_results_of_different_workloads_never_compare_undeclared():
    from slotbench.analysis.compare import differences

    a = {"workload": wl.describe({"kind": "article"}), "model.sha256": "x"}
    b = {"workload": wl.describe(_resolve(SYNTHETIC)["workload"]), "model.sha256": "x"}
    assert differences(a, a) == ([], [])
    assert differences(a, b)[0] == ["workload"]
    guarded, named = differences(a, b, declared=("workload",))
    assert guarded == [] and named == ["workload"]


def test_the_sides_of_a_pair_send_the_same_lengths_with_prompts_of_their_own():
    sides = [make_rep_plan(_plan(target=name, paired=True), 2, words_tokenizer,
                           client_processes=1, pin=True) for name in ("a", "b")]
    lengths = [[[(r["input_tokens"], r["output_tokens"]) for r in c["requests"]]
                for c in side["cells"]] for side in sides]
    assert lengths[0] == lengths[1]
    assert len({r["output_tokens"] for c in sides[0]["cells"] for r in c["requests"]}) > 1
    prompts = [{r["prompt"] for c in side["cells"] for r in c["requests"]} for side in sides]
    assert not prompts[0] & prompts[1]


def test_a_matrix_of_targets_measures_each_with_the_configs_workload():
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg.pop("targets")
    cfg |= {"workload": SYNTHETIC, "matrix": [
        {"base": {"name": "emb", "backend": "llamacpp", "managed": True},
         "vary": {"server.parallel": [1, 4]}}]}
    resolved = sbconfig.resolve(cfg)
    names = [t["name"] for t in resolved["targets"]]
    assert len(names) == 2
    assert all(sbconfig.experiment(resolved, n)["workload"] == SYNTHETIC for n in names)
