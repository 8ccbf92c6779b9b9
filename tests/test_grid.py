"""A grid of workloads and per-target workloads: the grid expands every target into one target per
(input, output) pair, each a sub-experiment with its own fixed lengths; a bad grid is one line
naming its key; and an article config stays exactly as it was."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from slotbench.analysis.workload import assess as assess_lengths
from slotbench.measure.workload import describe
from slotbench.workflow import config as sbconfig
from slotbench.workflow import workloads

REPO = Path(__file__).resolve().parents[1]
GRID = {"kind": "synthetic", "grid": {"input_tokens": [1024, 128], "output_tokens": [16, 256]}}
SYNTHETIC = {"kind": "synthetic", "input_tokens": {"dist": "fixed", "value": 40},
             "output_tokens": {"dist": "uniform", "min": 8, "max": 64}}


def _base(*files: str) -> dict:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name in files:
        cfg |= yaml.safe_load((REPO / "config" / name).read_text())
    return cfg


def _resolve(**over) -> dict:
    return sbconfig.resolve(_base() | over)


def _fixed(i: int, o: int) -> dict:
    return {"kind": "synthetic", "input_tokens": {"dist": "fixed", "value": i},
            "output_tokens": {"dist": "fixed", "value": o}}


# --- the grid's expansion --------------------------------------------------------------------


def test_a_grid_makes_one_target_per_pair_in_the_lists_order_each_with_its_lengths():
    cfg = _resolve(workload=GRID, targets=[
        {"name": "a", "backend": "llamacpp", "managed": True, "server": {"ctx_size": 8192}},
        {"name": "b", "backend": "ollama", "url": "http://127.0.0.1:11434", "model": "m"}])
    names = [t["name"] for t in cfg["targets"]]
    assert names == ["a-in1024-out16", "a-in1024-out256", "a-in128-out16", "a-in128-out256",
                     "b-in1024-out16", "b-in1024-out256", "b-in128-out16", "b-in128-out256"]
    for target in cfg["targets"]:
        i, o = (int(x) for x in target["name"].split("-in")[1].split("-out"))
        assert target["workload"] == _fixed(i, o)
        assert sbconfig.workload_params(cfg, target["name"]) == {"workload": _fixed(i, o)}
        experiment = sbconfig.experiment(cfg, target["name"])
        assert experiment["workload"] == _fixed(i, o)
        assert "workload" not in experiment["target"], "the workload is recorded once"
    # every other key of the target is its own, as before the grid
    assert cfg["targets"][0]["server"]["ctx_size"] == 8192 and cfg["targets"][4]["model"] == "m"
    assert cfg["workload"] == GRID, "the resolved config keeps the grid it expanded"
    assert workloads.has_grid(cfg) and set(workloads.by_target(cfg)) == set(names)
    assert sbconfig.resolve(cfg) == cfg, "a resolved config must resolve to itself"


def test_the_shipped_grid_example_resolves_and_fits_its_slots():
    cfg = sbconfig.resolve(_base("workloads/grid.yaml"))
    assert [t["name"] for t in cfg["targets"]] == [
        "embedded-in128-out16", "embedded-in128-out256", "embedded-in1024-out16",
        "embedded-in1024-out256"]
    for target in cfg["targets"]:
        server = target["server"]
        slot = server["ctx_size"] // server["parallel"]
        w = target["workload"]
        assert w["input_tokens"]["value"] + w["output_tokens"]["value"] <= slot, target["name"]
    assert describe(cfg["workload"]) == ("synthetic grid: input 128, 1024 × output 16, 256 "
                                         "tokens, one target per pair")


def test_a_target_with_its_own_workload_is_measured_with_it_and_not_expanded():
    own = _fixed(64, 8)
    cfg = _resolve(workload=GRID, targets=[
        {"name": "a", "backend": "llamacpp", "managed": True},
        {"name": "mine", "backend": "llamacpp", "managed": True, "workload": own}])
    assert [t["name"] for t in cfg["targets"]][-1] == "mine" and len(cfg["targets"]) == 5
    assert sbconfig.workload_params(cfg, "mine") == {"workload": own}


@pytest.mark.parametrize("workload,targets,message", [
    ({"kind": "trace", "path": "config/workloads/traces/example-azure.csv",
      "grid": {"input_tokens": [8], "output_tokens": [8]}}, None,
     "`workload.grid`: does not apply to a trace workload"),
    ({"kind": "article", "grid": {"input_tokens": [8], "output_tokens": [8]}}, None,
     "`workload.grid`: belongs to another kind of workload, not article"),
    ({"kind": "synthetic", "grid": {"input_tokens": [128]}}, None,
     "`workload.grid.output_tokens`: a grid needs the output lengths to combine"),
    ({"kind": "synthetic", "grid": {"input_tokens": [128], "output_tokens": [8]},
      "input_tokens": {"dist": "fixed", "value": 4}}, None,
     "`workload.input_tokens`: the grid gives every input length"),
    ({"kind": "synthetic", "grid": {"input_tokens": [128, 128], "output_tokens": [8]}}, None,
     "`workload.grid.input_tokens`: 128 is listed twice"),
    ({"kind": "synthetic", "grid": {"input_tokens": [0], "output_tokens": [8]}}, None,
     "`workload.grid.input_tokens[0]`"),
    ({"kind": "synthetic", "grid": {"input_tokens": [], "output_tokens": [8]}}, None,
     "`workload.grid.input_tokens`"),
    ({"kind": "synthetic", "grid": {"input_tokens": "128", "output_tokens": [8]}}, None,
     "`workload.grid.input_tokens`: '128' is not a list"),
    (GRID, [{"name": "x", "backend": "llamacpp", "managed": True},
            {"name": "x-in128-out16", "backend": "llamacpp", "managed": True,
             "workload": _fixed(8, 8)}],
     "`workload.grid`: it names every target <target>-in<I>-out<O>, and from the targets x, "
     "x-in128-out16 the name 'x-in128-out16' would be used twice; rename the targets"),
    (GRID, [{"name": "n" * 60, "backend": "llamacpp", "managed": True}],
     "is longer than 64 characters; rename the targets"),
    ({"kind": "article"}, [{"name": "x", "backend": "llamacpp", "managed": True,
                            "workload": GRID}],
     "`targets[0].workload.grid`: a grid is the top-level workload's"),
])
def test_a_bad_grid_is_one_line_naming_its_key_before_anything_is_sent(workload, targets,
                                                                       message):
    over = {"workload": workload} | ({"targets": targets} if targets else {})
    with pytest.raises(sbconfig.ConfigError) as err:
        _resolve(**over)
    text = str(err.value)
    assert message in text and "nothing was sent" in text
    assert "\n" not in text, text


# --- per-target workloads and the article ---------------------------------------------------


@pytest.mark.parametrize("files", [(), ("smoke.yaml",)])
def test_an_article_config_has_no_workload_anywhere_as_before(files):
    cfg = sbconfig.resolve(_base(*files))
    name = cfg["targets"][0]["name"]
    assert "workload" not in sbconfig.experiment(cfg, name)
    assert sbconfig.workload_params(cfg, name) == {}
    assert "workload" not in sbconfig.target_by_name(cfg, name)
    # rules/common.smk's WORKLOAD and the analyse rule's GRID: no workload param, no frontier
    assert workloads.by_target(cfg) == {} and not workloads.has_grid(cfg)
    assert all("workload" not in t for t in cfg["targets"])


def test_a_targets_own_workload_is_validated_like_the_top_level_one_naming_its_key():
    targets = [{"name": "a", "backend": "llamacpp", "managed": True},
               {"name": "b", "backend": "llamacpp", "managed": True,
                "workload": {"kind": "synthetic", "input_tokens": {"dist": "fixed", "value": 8},
                             "output_tokens": {"dist": "uniform", "min": 9, "max": 3}}}]
    with pytest.raises(sbconfig.ConfigError) as err:
        _resolve(targets=targets)
    assert "`targets[1].workload.output_tokens`: min 9 is above max 3" in str(err.value)
    targets[1]["workload"] = {"input_tokens": {"dist": "fixed", "value": 8}}  # kind: article
    with pytest.raises(sbconfig.ConfigError, match=r"`targets\[1\].workload.input_tokens`: "
                                                   "belongs to another kind"):
        _resolve(targets=targets)
    targets[1]["workload"] = {"kind": "synthetic", "turns": 3}
    with pytest.raises(sbconfig.ConfigError) as err:
        _resolve(targets=targets)
    assert "`targets[1].workload.turns`: does not apply" in str(err.value)
    assert "`targets[1].workload.output_tokens`: a synthetic workload needs it" in str(err.value)


def test_a_mixed_config_measures_each_target_with_its_own_and_refuses_article_only_keys():
    targets = [{"name": "a", "backend": "llamacpp", "managed": True},
               {"name": "b", "backend": "llamacpp", "managed": True, "workload": SYNTHETIC}]
    cfg = _resolve(targets=targets)
    assert sbconfig.workload_params(cfg, "a") == {}
    assert sbconfig.experiment(cfg, "b")["workload"] == SYNTHETIC
    assert workloads.by_target(cfg) == {"b": SYNTHETIC} and not workloads.has_grid(cfg)
    with pytest.raises(sbconfig.ConfigError, match="`control_arm`: applies to the article "
                                                   "workload only in this version, not synthetic"):
        _resolve(targets=targets, control_arm=True)


def test_the_workload_lengths_describe_each_targets_own_workload():
    requests = pd.DataFrame({
        "target": ["a", "a", "b"], "planned_input_tokens": [8, 8, 100],
        "planned_output_tokens": [4, 4, 20], "prompt_tokens": [8, 8, 100],
        "output_tokens": [4, 4, 20], "pinned": [True, True, True]})
    lengths = assess_lengths(requests, [], {"a": _fixed(8, 4), "b": _fixed(100, 20)})
    assert lengths["targets"]["a"]["workload"] == "synthetic: input 8, output 4 tokens"
    assert lengths["targets"]["b"]["workload"] == "synthetic: input 100, output 20 tokens"
