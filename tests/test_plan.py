"""The plan: rotation is a seeded cyclic Latin square; prompts are distinct and equal in tokens."""

from collections import Counter

import pytest

from slotbench.plan import derive_seed, make_plan, rep_plan, rotation

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


def test_consecutive_reps_are_cyclic_shifts():
    orders = rotation([1, 2, 4, 8], 5, seed=3)
    for prev, nxt in zip(orders, orders[1:]):
        assert nxt == prev[1:] + prev[:1]


def test_rotation_is_deterministic_and_seeded():
    assert rotation([1, 2, 4], 10, 11) == rotation([1, 2, 4], 10, 11)
    seen = {tuple(map(tuple, rotation([1, 2, 4], 3, s))) for s in range(40)}
    assert len(seen) > 1, "the seed never changed the base order"


def test_derive_seed_is_stable_across_processes():
    # a fixed value: Python's salted hash() would change it from one process to the next
    assert derive_seed(1, "embedded", "run1") == derive_seed(1, "embedded", "run1")
    assert derive_seed(1, "embedded", "run1") != derive_seed(1, "embedded", "run2")


def _plan(count_tokens=None, **kw):
    args = dict(target="t", run="run1", arms=[1, 2, 4], reps=4, requests_per_cell=4, seed=5,
                template=TEMPLATE, nonce_digits=6, count_tokens=count_tokens)
    return make_plan(**(args | kw))


def test_plan_is_deterministic_from_the_seed():
    assert _plan() == _plan()
    assert _plan() != _plan(seed=6)
    assert _plan()["reps"] != _plan(run="run2")["reps"], "runs must not repeat each other"


def test_every_request_has_its_own_nonce_near_the_start():
    plan = _plan()
    prompts = [r["prompt"] for rep in plan["reps"] for c in rep["cells"] for r in c["requests"]]
    prompts += [w["prompt"] for w in plan["warmup"]]
    assert len(prompts) == 4 * 3 * 4 + 4
    assert len(set(prompts)) == len(prompts)
    nonces = [p.split()[1].rstrip(".") for p in prompts]
    assert len(set(nonces)) == len(nonces)
    assert all(p.index(n) < 20 for p, n in zip(prompts, nonces))


def test_same_work_in_every_arm():
    for rep in _plan()["reps"]:
        assert [c["position"] for c in rep["cells"]] == [0, 1, 2]
        assert [c["arm"] for c in rep["cells"]] == rep["order"]
        assert {len(c["requests"]) for c in rep["cells"]} == {4}


def test_prompts_are_kept_to_the_modal_token_length():
    # a fake tokenizer: nonces containing a 7 cost one extra token
    def count(text):
        return len(text.split()) + (1 if "7" in text.split()[1] else 0)

    plan = _plan(count_tokens=count)
    prompts = [r["prompt"] for rep in plan["reps"] for c in rep["cells"] for r in c["requests"]]
    lengths = Counter(count(p) for p in prompts + [w["prompt"] for w in plan["warmup"]])
    assert len(lengths) == 1
    assert plan["prompt_tokens"] == next(iter(lengths))


def test_impossible_equal_length_is_a_clear_error():
    lengths = iter(range(10**6))
    with pytest.raises(RuntimeError, match="tokens long"):
        _plan(count_tokens=lambda text: next(lengths))


def test_rep_plan_names_a_missing_rep():
    with pytest.raises(KeyError, match="no rep 9"):
        rep_plan(_plan(), 9)


def test_control_arm_shares_one_prompt_and_is_not_rotated():
    plan = _plan(control_arm=True)
    for rep in plan["reps"]:
        *measured, control = rep["cells"]
        assert [c["position"] for c in measured] == [0, 1, 2]
        assert control["control"] and control["arm"] == 4 and control["position"] == 3
        assert len({r["prompt"] for r in control["requests"]}) == 1
        assert all(r["allow_cache"] for r in control["requests"])
        assert not any(r.get("allow_cache") for c in measured for r in c["requests"])
    assert _plan(control_arm=True)["reps"][0]["cells"][:3] != [], "measured cells kept"


def test_nonces_off_gives_every_measured_request_the_same_prompt():
    plan = _plan(nonces=False)
    prompts = {r["prompt"] for rep in plan["reps"] for c in rep["cells"] for r in c["requests"]}
    assert len(prompts) == 1
    assert plan["nonces"] is False
