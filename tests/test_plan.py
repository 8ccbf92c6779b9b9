"""The plan: a seeded cyclic Latin square whose rep k's order never depends on how many reps
there are; each rep's prompts are distinct, equal in tokens and derived from (seed, target, run,
rep) alone, so adding reps changes nothing already planned."""

import json
from collections import Counter

import pytest

from slotbench.measure.plan import derive_seed, make_rep_plan, max_reps, rotation, rotation_order, run_plan

TEMPLATE = "Request {nonce}. Summarise: the harbour town changed.\n\nSummary:"


def test_every_block_of_reps_is_a_latin_square():
    arms = [1, 2, 4]
    orders = rotation(arms, 9, seed=7)
    for start in range(0, 9, 3):
        block = orders[start : start + 3]
        for position in range(3):
            assert sorted(order[position] for order in block) == arms
    for order in orders:
        assert sorted(order) == arms


def test_consecutive_reps_are_cyclic_shifts_and_never_depend_on_the_total():
    orders = rotation([1, 2, 4, 8], 5, seed=3)
    for prev, nxt in zip(orders, orders[1:]):
        assert nxt == prev[1:] + prev[:1]
    assert rotation([1, 2, 4, 8], 12, seed=3)[:5] == orders
    assert rotation_order([1, 2, 4, 8], 4, 3) == orders[3]


def test_rotation_is_deterministic_and_seeded():
    assert rotation([1, 2, 4], 10, 11) == rotation([1, 2, 4], 10, 11)
    seen = {tuple(map(tuple, rotation([1, 2, 4], 3, s))) for s in range(40)}
    assert len(seen) > 1, "the seed never changed the base order"


def test_derive_seed_is_stable_across_processes():
    assert derive_seed(1, "embedded", "run1") == derive_seed(1, "embedded", "run1")
    assert derive_seed(1, "embedded", "run1") != derive_seed(1, "embedded", "run2")


def _plan(count_tokens=None, **kw):
    args = dict(
        target="t",
        run="run1",
        arms=[1, 2, 4],
        requests_per_cell=4,
        seed=5,
        template=TEMPLATE,
        nonce_digits=6,
        count_tokens=count_tokens,
        nonces=True,
        control_arm=False,
    )
    return run_plan(**(args | kw))


def _reps(plan, n=4, count_tokens=None):
    return [make_rep_plan(plan, rep, count_tokens, client_processes=1)
            for rep in range(1, n + 1)]


def test_the_run_plan_does_not_depend_on_reps_and_each_rep_only_on_itself():
    assert _plan() == _plan()
    assert _plan() != _plan(seed=6)
    assert "reps" not in _plan()
    assert _reps(_plan()) == _reps(_plan())
    assert _reps(_plan(), 2) == _reps(_plan(), 5)[:2]  # adding reps changes no earlier rep
    assert _reps(_plan()) != _reps(_plan(run="run2")), "runs must not repeat each other"


def test_every_request_of_a_run_has_its_own_nonce_near_the_start():
    reps = _reps(_plan(), 9)
    prompts = [r["prompt"] for rep in reps for c in rep["cells"] for r in c["requests"]]
    prompts += [w["prompt"] for rep in reps for w in rep["warmup"]]
    assert len(prompts) == 9 * (3 * 4 + 4)
    nonces = [p.split()[1].rstrip(".") for p in prompts]
    assert len(set(nonces)) == len(nonces) == len(set(prompts))
    assert all(p.index(n) < 20 for p, n in zip(prompts, nonces))
    for rep in reps:  # the nonce starts with the rep's number
        assert {r["nonce"][:3] for c in rep["cells"] for r in c["requests"]} == {
            f"{rep['rep']:03d}"
        }


def test_same_work_in_every_arm():
    for rep in _reps(_plan()):
        assert [c["position"] for c in rep["cells"]] == [0, 1, 2]
        assert [c["arm"] for c in rep["cells"]] == rep["order"]
        assert {len(c["requests"]) for c in rep["cells"]} == {4}


def test_prompts_are_kept_to_the_runs_token_length():
    # a fake tokenizer: nonces containing a 7 cost one extra token
    def count(text):
        return len(text.split()) + (1 if "7" in text.split()[1] else 0)

    plan = _plan(count_tokens=count)
    reps = _reps(plan, 6, count)
    prompts = [r["prompt"] for rep in reps for c in rep["cells"] for r in c["requests"]]
    lengths = Counter(count(p) for p in prompts + [w["prompt"] for r in reps for w in r["warmup"]])
    assert len(lengths) == 1 and plan["prompt_tokens"] == next(iter(lengths))
    assert all(rep["prompt_tokens"] == plan["prompt_tokens"] for rep in reps)


def test_impossible_equal_length_is_a_clear_error():
    plan = _plan(count_tokens=lambda text: 10)
    with pytest.raises(RuntimeError, match="rep 2: could not find .* 10 tokens long"):
        make_rep_plan(plan, 2, lambda text: 11, client_processes=1)


def test_a_rep_number_beyond_the_nonce_is_refused():
    assert max_reps(6) == 999 and max_reps(8) == 9999
    with pytest.raises(ValueError, match="raise prompt.nonce_digits"):
        make_rep_plan(_plan(), 1000, client_processes=1)


def test_control_arm_shares_one_prompt_and_is_not_rotated():
    for rep in _reps(_plan(control_arm=True)):
        *measured, control = rep["cells"]
        assert [c["position"] for c in measured] == [0, 1, 2]
        assert control["control"] and control["arm"] == 4 and control["position"] == 3
        assert len({r["prompt"] for r in control["requests"]}) == 1
        assert all(r["allow_cache"] for r in control["requests"])
        assert not any(r.get("allow_cache") for c in measured for r in c["requests"])


def test_nonces_off_gives_every_measured_request_the_same_prompt():
    plan = _plan(nonces=False)
    prompts = {r["prompt"] for rep in _reps(plan) for c in rep["cells"] for r in c["requests"]}
    assert len(prompts) == 1 and plan["nonces"] is False


def test_requests_per_cell_may_be_set_per_arm_so_a_wide_arm_runs_several_rounds():
    from slotbench.workflow.config import resolve

    cfg = resolve({"arms": [1, 2, 4, 8], "requests_per_cell": {1: 4, 2: 4, 4: 8, 8: 16}})
    run = json.loads(json.dumps(run_plan("t", "run1", cfg["arms"], cfg["requests_per_cell"],
                                              1, "x {nonce}", 6, nonces=True, control_arm=False)))
    rep = make_rep_plan(run, 3, client_processes=1)
    assert {c["arm"]: len(c["requests"]) for c in rep["cells"]} == {1: 4, 2: 4, 4: 8, 8: 16}
    nonces = [r["nonce"] for c in rep["cells"] for r in c["requests"]]
    assert len(set(nonces)) == len(nonces) == 32  # every request its own prompt
    assert make_rep_plan(run, 3, client_processes=1) == rep  # from (seed, target, run, rep) alone


def test_in_the_paired_design_a_pairs_sides_share_their_arm_order_but_not_their_prompts():
    """Drift within a rep biases the ratios of the arms that run later: the sides of a pair run
    their arms in one order, so it biases both alike (a test on drifting servers found a 0.3%
    speedup 'change' between two identical servers whose reps ran their arms in other orders)."""
    arms = [1, 2, 4, {"rate": 2.0, "requests": 4, "arrival": "poisson", "burstiness": 1.0,
                      "max_in_flight": None}]
    a, b = (_plan(target=t, paired=True, arms=arms) for t in ("emb-parallel2", "emb-parallel4"))
    for rep in range(1, 7):
        ra, rb = (make_rep_plan(p, rep, client_processes=1) for p in (a, b))
        assert ra["order"] == rb["order"]
        rate_a, rate_b = ([c["arrivals"] for c in r["cells"] if "arrivals" in c] for r in (ra, rb))
        assert rate_a == rate_b
        assert rate_a and rate_a[0]
        assert [q["nonce"] for c in ra["cells"] for q in c["requests"]] != [
            q["nonce"] for c in rb["cells"] for q in c["requests"]]
    orders = [make_rep_plan(a, rep, client_processes=1)["order"] for rep in range(1, 5)]
    assert len({tuple(o) for o in orders}) == 4, "the pairs' orders still rotate"
    # independent targets keep their own orders, and their plans are as they always were
    x, y = (_plan(target=t, arms=arms) for t in ("emb-parallel2", "emb-parallel4"))
    assert "order_seed" not in x
    assert [make_rep_plan(x, r, client_processes=1)["order"] for r in range(1, 7)] != [
        make_rep_plan(y, r, client_processes=1)["order"] for r in range(1, 7)]


def test_a_request_that_cannot_fit_one_slot_is_refused_before_anything_is_sent():
    from slotbench.measure.backends.llamacpp import LlamaCppBackend
    from slotbench.measure.plan import context_problem

    from doubles.fault_server import FaultServer

    with FaultServer() as server:  # its /props report 4096 tokens per slot
        context = LlamaCppBackend(server.url).slot_context()
        assert context[0] == 4096 and "/props" in context[1]
        assert server.hits.get("/completion") is None
    plan = {"prompt_tokens": 160}
    assert context_problem(plan, 3936, context) is None  # 160 + 3936 fills the slot exactly
    problem = context_problem(plan, 3937, context)
    assert problem.startswith("the prompt (160 tokens) plus num_predict (3937) cannot fit one "
                              "slot of the server: 4096 tokens")
    assert "\n" not in problem and problem.endswith("nothing was sent")
    assert context_problem(plan, 10**6, None) is None  # a server that does not say: not checked
