"""A grid of workloads and per-target workloads: the grid expands every target into one target per
(input, output) pair, each a sub-experiment with its own fixed lengths; a bad grid is one line
naming its key; an article config stays exactly as it was; and the frontier of a grid (its
non-dominated points, what carries each workload's speedup, the prefill-heavy/decode-heavy claim)
is decided by the analysis, which the report and the figure only present."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from slotbench.analysis import analyse, frontier
from slotbench.analysis.workload import assess as assess_lengths
from slotbench.figures.frontier import make_frontier
from slotbench.measure.workload import describe
from slotbench.provenance import ids as prov
from slotbench.report.frontier import blocks as frontier_blocks
from slotbench.report.render_md import render_markdown
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


# --- the frontier ----------------------------------------------------------------------------


def _row(target, arm, user, agg, ttft=0.2, speedup=None, gen_gain=None, pipelining=None,
         spread=0.05):
    row = {"target": target, "arm": arm, "user_tps": user, "agg_tps": agg, "ttft_s": ttft,
           "cells": f"{target}/run1/rep1/arm{arm};{target}/run1/rep2/arm{arm}",
           "raw_sha256": f"sha-{target}-1;sha-{target}-2"}
    for name in ("user_tps", "agg_tps", "ttft_s"):
        row[f"{name}_lo"], row[f"{name}_hi"] = row[name] * 0.95, row[name] * 1.05
    for name, value in (("speedup", speedup), ("gen_gain", gen_gain),
                        ("pipelining", pipelining)):
        row[name] = value
        row[f"{name}_lo"] = None if value is None else value - spread
        row[f"{name}_hi"] = None if value is None else value + spread
    return row


# Prefill-heavy "p" gains by overlap, decode-heavy "d" by batching; "s" (prefill-heavy) slows.
SUMMARY = pd.DataFrame([
    _row("p", 1, 80.0, 20.0), _row("p", 2, 45.0, 30.0, 0.4, 1.5, 0.9, 1.67),
    _row("p", 4, 30.0, 36.0, 0.9, 1.8, 0.85, 2.1),
    _row("d", 1, 70.0, 70.0), _row("d", 2, 40.0, 80.0, 0.3, 1.14, 1.14, 1.0),
    _row("d", 4, 30.0, 120.0, 0.5, 1.7, 1.72, 0.99),
    _row("s", 1, 60.0, 30.0), _row("s", 4, 10.0, 25.0, 1.5, 0.83, 0.7, 1.19),
])
WORKLOADS = {"d": _fixed(32, 256), "p": _fixed(1024, 16), "s": _fixed(1024, 256)}


def test_the_non_dominated_points_are_those_no_point_beats_on_both_rates():
    front = frontier.assess(SUMMARY, WORKLOADS, 0.95)
    assert [w["target"] for w in front["workloads"]] == ["d", "p", "s"]  # by input, output
    assert front["frontier"] == [{"target": "d", "arm": 1}, {"target": "d", "arm": 2},
                                 {"target": "d", "arm": 4}, {"target": "p", "arm": 1}]
    points = {(p["target"], p["arm"]): p for w in front["workloads"] for p in w["points"]}
    assert points[("s", 4)]["dominated_by"] == {"target": "d", "arm": 1}
    assert points[("p", 4)]["dominated_by"] == {"target": "d", "arm": 1}  # the first found
    assert points[("p", 1)]["frontier"] and points[("p", 1)]["dominated_by"] is None
    assert points[("d", 4)]["agg_tps_lo"] == pytest.approx(114.0)
    assert points[("d", 4)]["cells"] == ["d/run1/rep1/arm4", "d/run1/rep2/arm4"]


def test_the_split_says_which_stage_carries_each_speedup_and_whether_the_claim_holds():
    front = frontier.assess(SUMMARY, WORKLOADS, 0.95)
    split = {w["target"]: w["split"] for w in front["workloads"]}
    mixes = {w["target"]: w["mix"] for w in front["workloads"]}
    assert mixes == {"d": "decode-heavy", "p": "prefill-heavy", "s": "prefill-heavy"}
    assert split["p"]["arm"] == 4 and split["p"]["carries"] == "pipelining"
    assert split["p"]["verdicts"] == {"speedup": "gains", "gen_gain": "loses",
                                      "pipelining": "gains"}
    assert split["d"]["carries"] == "gen_gain" and split["d"]["main"] == "gen_gain"
    assert split["d"]["verdicts"]["pipelining"] == "unclear"
    assert split["s"]["carries"] == frontier.NO_SPEEDUP and split["s"]["main"] is None
    claim = front["claim"]
    assert claim["prefill_heavy"] == ["p", "s"] and claim["decode_heavy"] == ["d"]
    assert claim["holds"] is False and claim["against"] == ["s"]
    held = frontier.assess(SUMMARY[SUMMARY["target"] != "s"], {k: WORKLOADS[k] for k in "dp"},
                           0.95)
    assert held["claim"]["holds"] is True and held["claim"]["against"] == []
    alone = frontier.assess(SUMMARY[SUMMARY["target"] == "p"], {"p": WORKLOADS["p"]}, 0.95)
    assert alone["claim"]["holds"] is None
    assert alone["claim"]["why"] == "no decode-heavy workload in the grid"


def test_both_factors_gaining_name_the_larger_as_main():
    s = frontier.split({"arm": 4, "speedup": 2.0, "speedup_lo": 1.8, "speedup_hi": 2.2,
                        "gen_gain": 1.6, "gen_gain_lo": 1.5, "gen_gain_hi": 1.7,
                        "pipelining": 1.25, "pipelining_lo": 1.1, "pipelining_hi": 1.3})
    assert s["carries"] == "both" and s["main"] == "gen_gain"
    none = frontier.split({"arm": 2, "speedup": 1.1, "speedup_lo": 1.05, "speedup_hi": 1.2,
                           "gen_gain": 1.05, "gen_gain_lo": 0.97, "gen_gain_hi": 1.1,
                           "pipelining": 1.04, "pipelining_lo": 0.99, "pipelining_hi": 1.1})
    assert none["carries"] == "neither" and none["main"] is None


def test_the_summary_gives_each_arms_rates_and_ttft_an_interval_from_the_same_resamples():
    rows = []
    for rep, scale in enumerate((0.9, 1.0, 1.1, 1.05)):
        for arm, (agg, user, ttft) in {1: (50.0, 50.0, 0.2), 2: (80.0, 40.0, 0.4)}.items():
            rows.append({"target": "t", "run": "run1", "rep": rep, "arm": arm, "position": 0,
                         "n_requests": 4, "tokens_out": 100, "wall_s": 1.0,
                         "agg_tps": agg * scale, "user_tps": user * scale, "ttft_s": ttft,
                         "t_start_s": 0.0, "t_start_unix": 1.7e9,
                         "raw_file": f"raw/t/run1/rep{rep}.json", "raw_sha256": f"s{rep}"})
    summary = analyse.summarise(analyse.cell_ratios(pd.DataFrame(rows)), 500, 0.95, 0)
    for r in summary.to_dict("records"):
        for name in ("agg_tps", "user_tps", "ttft_s"):
            assert r[f"{name}_lo"] <= r[name] <= r[f"{name}_hi"], (name, r)
        assert r["agg_tps_lo"] < r["agg_tps_hi"]


def test_the_report_presents_the_frontier_and_the_figure_draws_it(tmp_path):
    front = frontier.assess(SUMMARY, WORKLOADS, 0.95)
    sources = make_frontier(front, tmp_path)
    assert (tmp_path / "frontier.png").stat().st_size > 10_000
    assert sources["frontier"]["section"] == "frontier"
    assert sources["frontier"]["cells"][0] == "d/run1/rep1/arm1"
    assert len(sources["frontier"]["cells"]) == 2 * len(SUMMARY)
    decision = {"s": {"status": "refused"}, "d": {"status": "allowed", "warnings": [{"text": "!"}]}}
    out = frontier_blocks(json.loads(json.dumps(front)), decision, sources,
                          {"frontier": str(tmp_path / "frontier.png")}, prov.CellIndex(), "95%")
    md = render_markdown(out, "figures")
    assert md.startswith("## Frontier")
    assert ("d at serial-1, d at parallel-2, d at parallel-4, p at serial-1." in md)
    assert ("- p (input 1024, output 16 tokens; prefill-heavy) at parallel-4: speedup 1.80× "
            "[1.75×, 1.85×], gen_gain 0.85× [0.80×, 0.90×], pipelining 2.10× [2.05×, 2.15×]: "
            "overlap (pipelining) carries the speedup, and batching (gen_gain) is below 1× over "
            "the whole interval, taking part of the gain back.") in md
    assert ("- s (input 1024, output 256 tokens; prefill-heavy) at parallel-4: speedup 0.83× "
            "[0.78×, 0.88×], gen_gain 0.70× [0.65×, 0.75×], pipelining 1.19× [1.14×, 1.24×]: "
            "there is no speedup to carry (it is below 1× over its whole interval)") in md
    assert "Its headline was refused" in md
    assert md.count("Its section opens with a warning to read before these numbers.") == 1
    assert ("These data do not show that a prefill-heavy mix gains mainly by overlap and a "
            "decode-heavy one mainly by batching (prefill-heavy: p, s; decode-heavy: d): s does "
            "not") in md
    assert "![frontier](figures/frontier.png)" in md
    assert frontier_blocks({}, {}, {}, {}, prov.CellIndex(), "95%") == []
