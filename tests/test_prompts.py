"""Equal prompt lengths and prefix-cache hits: each detector fires on bad data, quiet on clean."""

import pandas as pd
import pytest

from slotbench.checks.cache import cache_hits
from slotbench.checks.prompt_length import prompt_lengths


def requests(n=12, **columns):
    base = {
        "target": "t", "run": "run1", "rep": [1 + i // 6 for i in range(n)],
        "arm": [[1, 4][(i // 3) % 2] for i in range(n)], "position": 0,
        "request": [i % 3 for i in range(n)], "prompt_tokens": 160,
    }
    return pd.DataFrame(base | columns)


def test_equal_prompts_are_quiet():
    assert prompt_lengths(requests()).empty


def test_unequal_prompts_are_named():
    req = requests(prompt_tokens=[160] * 11 + [163])
    odd = prompt_lengths(req)
    assert len(odd) == 1
    row = odd.iloc[0]
    assert (row["prompt_tokens"], row["modal_prompt_tokens"]) == (163, 160)
    assert row["cell"] == "t/run1/rep2/arm4"


def test_llamacpp_clean_requests_have_no_cache_hits():
    assert cache_hits(requests(cache_n=0, prompt_n=160)).empty


def test_llamacpp_cache_hits_fire_when_nonces_are_off():
    # identical prompts with the server's cache on: all but the first reuse 159 tokens
    req = requests(cache_n=[0] + [159] * 11, prompt_n=[160] + [1] * 11)
    hits = cache_hits(req)
    assert len(hits) == 11
    assert hits["reason"].str.contains("cache_n").all()


def test_fewer_evaluated_tokens_than_the_prompt_is_a_hit():
    hits = cache_hits(requests(cache_n=0, prompt_n=[160] * 11 + [40]))
    assert len(hits) == 1 and "fewer prompt tokens" in hits.iloc[0]["reason"]


def ollama(durations, counts=None):
    n = len(durations)
    return requests(n, eval_count=32, prompt_eval_duration_ns=durations,
                    prompt_eval_count=counts if counts is not None else [160] * n)


def test_ollama_clean_requests_are_quiet():
    assert cache_hits(ollama([80_000_000 + 1_000_000 * i for i in range(12)])).empty


def test_ollama_fast_or_missing_prompt_evaluation_fires():
    durations = [80_000_000] * 10 + [5_000_000, None]
    counts = [160] * 11 + [None]
    hits = cache_hits(ollama(durations, counts))
    assert len(hits) == 2
    assert hits.iloc[0]["reason"].startswith("prompt evaluated 16x faster")
    assert "omits zero" in hits.iloc[1]["reason"]


def test_the_control_arm_is_left_out():
    req = requests(cache_n=[0] * 6 + [159] * 6, prompt_n=160, control=[False] * 6 + [True] * 6)
    assert cache_hits(req).empty


def test_control_effect_is_the_shared_prompt_inflation():
    from slotbench.checks.control import control_effect

    cells = pd.DataFrame({"target": "t", "run": "run1", "rep": [1, 2], "arm": 4,
                          "agg_tps": [100.0, 110.0]})
    control = pd.DataFrame({"target": "t", "run": "run1", "rep": [1, 2], "arm": 4,
                            "agg_tps": [140.0, 142.0]})
    row = control_effect(control, cells).iloc[0]
    assert row["inflation"] == pytest.approx(141 / 105 - 1)
    assert row["cells"] == "t/run1/rep1/arm4;t/run1/rep2/arm4"
    assert control_effect(control.iloc[:0], cells).empty
