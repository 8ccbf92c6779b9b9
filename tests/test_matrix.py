"""The target matrix and the resources that keep one endpoint's jobs apart."""

from __future__ import annotations

import pytest
import yaml

from slotbench.workflow import config, matrix, resources

REPO_CONFIG = yaml.safe_load(open(config.REPO_CONFIG))


def resolve(extra: dict) -> dict:
    return config.resolve(REPO_CONFIG | extra)


def test_two_endpoints_by_three_settings_expand_to_six_stable_readable_targets():
    cfg = resolve(yaml.safe_load(open(config.REPO_CONFIG.parent / "matrix.yaml")))
    names = [t["name"] for t in cfg["targets"]]
    assert names == ["emb-a-parallel1", "emb-a-parallel2", "emb-a-parallel4",
                     "emb-b-parallel1", "emb-b-parallel2", "emb-b-parallel4"]
    by_name = {t["name"]: t for t in cfg["targets"]}
    assert by_name["emb-b-parallel2"]["server"]["cpus"] == [1]
    assert by_name["emb-b-parallel2"]["server"]["parallel"] == 2
    # each server gets its share of the cores: one CPU, one thread
    assert {t["server"]["threads"] for t in cfg["targets"]} == {1}
    # a value added to the matrix leaves every existing name (and so its files) where it was
    bigger = matrix.expand([{"base": {"name": "emb"},
                             "vary": {"server.cpus": {"a": [0], "b": [1]},
                                      "server.parallel": [1, 2, 4, 8]}}])
    assert set(names) < {t["name"] for t in bigger}


@pytest.mark.parametrize("vary, names", [
    ({"model": ["gemma3:270m", "qwen3:0.6b"]}, ["o-modelgemma3_270m", "o-modelqwen3_0_6b"]),
    ({"url": ["http://10.0.0.1:11434"]}, ["o-url10_0_0_1_11434"]),
    ({"server.flash_attention": [True, False]},
     ["o-flash_attention-on", "o-flash_attention-off"]),
    ({}, ["o"]),  # nothing varied: the base itself
])
def test_names_say_what_varies(vary, names):
    assert [t["name"] for t in matrix.expand([{"base": {"name": "o"}, "vary": vary}])] == names


@pytest.mark.parametrize("entry, message", [
    ({"base": {"name": "x"}, "vary": {"server.parallel": []}}, "give at least one value"),
    ({"base": {"name": "x"}, "vary": {"url": ["http://a:1/x", "http://a:1/x/"]}},
     "two values give the same name part"),
    ({"base": {"name": "x"}, "vary": {"name": ["a", "b"]}}, "the name is made from"),
    ({"vary": {}}, "`matrix[0]`: 'base' is a required property"),
    ({"base": {"name": "x"}, "bogus": 1}, "`matrix[0].bogus` is not a slotbench key"),
    ({"base": {"name": "x", "server": 4}, "vary": {"server.parallel": [1]}},
     "server.parallel: server is not a mapping in the base target"),
])
def test_a_bad_matrix_is_named_before_anything_runs(entry, message):
    with pytest.raises(config.ConfigError, match="nothing was sent") as err:
        resolve({"matrix": [entry]})
    assert message in str(err.value)


def test_an_expanded_target_that_is_wrong_is_named_with_its_place_in_the_matrix():
    with pytest.raises(config.ConfigError) as err:
        resolve({"matrix": [{"base": {"name": "x", "backend": "llamacpp", "managed": True},
                             "vary": {"server.parallel": [2, 0]}}]})
    assert "targets[1].server.parallel" in str(err.value)
    assert "expanded from `matrix`: targets[0] = x-parallel2, targets[1] = x-parallel0" in str(
        err.value)


def test_one_endpoint_is_one_resource_and_disjoint_cpus_are_two():
    cpus = [0, 1]
    a = {"managed": True, "backend": "llamacpp", "server": {"cpus": [0]}}
    b = {"managed": True, "backend": "llamacpp", "server": {"cpus": [1]}}
    whole = {"managed": True, "backend": "llamacpp", "server": {}}
    assert resources.endpoint_resources(a, cpus) == {"cpu0": 1}
    assert resources.endpoint_resources(b, cpus).keys().isdisjoint(
        resources.endpoint_resources(a, cpus))
    assert resources.endpoint_resources(whole, cpus) == {"cpu0": 1, "cpu1": 1}  # shares with both
    one = {"managed": False, "url": "http://gpu1.lan:11434"}
    same = {"managed": False, "url": "http://gpu1.lan:11434/"}
    other = {"managed": False, "url": "https://api.example.com"}
    assert resources.endpoint_resources(one, cpus) == resources.endpoint_resources(same, cpus) == {
        "endpoint_gpu1_lan_11434": 1}
    assert resources.endpoint_resources(other, cpus) == {"endpoint_api_example_com_443": 1}
    # a server on this machine shares its CPUs with the managed ones
    local = {"managed": False, "url": "http://127.0.0.1:11434"}
    assert resources.endpoint_resources(local, cpus) == {
        "endpoint_127_0_0_1_11434": 1, "cpu0": 1, "cpu1": 1}


def test_the_runtime_estimate_grows_with_the_work_a_rep_does():
    small = resolve({"num_predict": 32, "reps": 3})
    big = resolve({"num_predict": 512, "arms": [1, 2, 4, 8], "requests_per_cell": 16})
    assert 1 <= resources.rep_runtime_min(small) < resources.rep_runtime_min(big)
    # 16 + 8 + 4 + 2 rounds of 512 tokens at the estimate's 5 tok/s: 51 minutes and the start
    assert resources.rep_runtime_min(big) == 54
    gpu = {"name": "g", "backend": "llamacpp", "managed": True,
           "server": {"gpus": 1, "threads": 4}}
    asked = resources.job_resources(big, gpu, [0, 1], 5)
    assert asked["gpu"] == 1 and asked["cpus_per_task"] == 4 and asked["runtime"] == 5
