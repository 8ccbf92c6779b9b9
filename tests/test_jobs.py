"""The workflow's job planning (slotbench.workflow.jobs), without Snakemake: the order the measuring jobs
start in, what each asks of the executor, the blocks of reps consolidation reads, and the tokens
that see a raw file change."""

from __future__ import annotations

import os

import pytest
import yaml

from slotbench.measure import plan
from slotbench.measure.rawfiles import write_ledger, write_raw_atomic
from slotbench.workflow import config, jobs
from slotbench.workflow.jobs import REPS_PER_BLOCK, Jobs, block_of

REPO_CONFIG = yaml.safe_load(open(config.REPO_CONFIG))
CPUS = [0, 1]
SEED = config.resolve(REPO_CONFIG)["seed"]
LAN = {"backend": "ollama", "url": "http://gpu1.lan:11434", "model": "gemma3:270m"}


def planned(cpus=CPUS, **extra) -> Jobs:
    cfg = config.resolve(REPO_CONFIG | extra)
    names = [t["name"] for t in cfg["targets"]]
    return Jobs(cfg, names, config.run_ids(cfg), config.rep_ids(cfg), cpus)


def two_targets(**extra) -> Jobs:
    targets = [{"name": "a", "backend": "llamacpp", "managed": True},
               {"name": "b", "backend": "llamacpp", "managed": True}]
    return planned(targets=targets, **extra)


# --- priorities ------------------------------------------------------------------------------


def test_runs_go_in_order_and_a_runs_jobs_of_one_target_go_together():
    """A run's server serves its fingerprint, plan and reps: they share one priority, and every
    job of (run1, a) comes before any of (run1, b), before any of run2."""
    j = two_targets(runs=3, reps=2)
    order = [(run, t) for run in ("run1", "run2", "run3") for t in ("a", "b")]
    priorities = [j.run_priority(run, t) for run, t in order]
    assert priorities == sorted(priorities, reverse=True)
    assert len(set(priorities)) == len(order)
    for run, t in order:
        assert {j.rep_priority(run, t, rep) for rep in (1, 2, "2")} == {j.run_priority(run, t)}
    assert min(priorities) >= 1  # above the cheap rules' 0


def test_the_paired_sides_follow_the_pair_order_and_reverse_every_other_pair():
    j = two_targets(design="paired", runs=2, reps=4)
    assert j.paired
    sides = sorted(((run, rep, t) for run in j.runs for rep in j.reps for t in j.targets),
                   key=lambda side: -j.rep_priority(side[0], side[2], side[1]))
    expected = [(run, rep, t) for run in ("run1", "run2") for rep in (1, 2, 3, 4)
                for t in plan.pair_order(["a", "b"], SEED, run, rep)]
    assert sides == expected
    assert len({j.rep_priority(r, t, rep) for r, rep, t in sides}) == len(sides)
    for run in j.runs:  # ABBA: every other pair reversed
        assert j.pair_order[run][2] == j.pair_order[run][1][::-1] == j.pair_order[run][4]
        assert j.pair_order[run][1] == plan.pair_order(["a", "b"], SEED, run, 1)


def test_in_the_paired_design_every_fingerprint_and_plan_comes_before_the_first_side():
    j = two_targets(design="paired", runs=2, reps=3)
    first_side = max(j.rep_priority(run, t, rep)
                     for run in j.runs for t in j.targets for rep in j.reps)
    measuring = [j.run_priority(run, t) for run in j.runs for t in j.targets]
    assert min(measuring) > first_side
    assert measuring == sorted(measuring, reverse=True)
    # a rep the config does not list (asked for by its file) comes last
    assert j.rep_priority("run1", "a", 99) == 0


def test_without_the_paired_design_there_is_no_pair_order():
    j = two_targets()
    assert not j.paired and j.pair_order == {}


# --- resources -------------------------------------------------------------------------------


def test_each_target_asks_for_its_own_endpoint_and_cores():
    targets = [{"name": "cpu0", "backend": "llamacpp", "managed": True,
                "server": {"cpus": [0], "threads": 1}},
               {"name": "whole", "backend": "llamacpp", "managed": True},
               {"name": "lan", **LAN}]
    j = planned(targets=targets, num_predict=32)
    assert j.resource("cpu0", "cpu0") == 1 and j.resource("cpu0", "cpu1") == 0
    assert j.resource("whole", "cpu0") == j.resource("whole", "cpu1") == 1
    assert j.resource("lan", "endpoint_gpu1_lan_11434") == 1
    assert j.resource("lan", "cpu0") == 0  # a remote server shares no CPU with this machine
    assert j.resource("cpu0", "cpus_per_task") == 1
    assert j.resource("whole", "mem_mb") > j.resource("lan", "mem_mb")
    assert j.resource_names() == sorted(j.resource_names())
    assert {"cpu0", "cpu1", "endpoint_gpu1_lan_11434", "runtime"} <= set(j.resource_names())
    # fingerprint and plan take a runtime of their own; a rep the estimate
    assert j.resource("lan", "runtime", runtime_min=10) == 10
    assert j.resource("lan", "runtime") == j.resources["lan"]["runtime"] >= 1
    assert j.resource("lan", "cpu0", runtime_min=10) == 0


def test_each_shared_resource_is_named_once():
    """Two targets on one CPU, and two on one external endpoint: Snakemake registers each
    resource once, in the targets' order."""
    targets = [{"name": "a", "backend": "llamacpp", "managed": True, "server": {"cpus": [1]}},
               {"name": "b", "backend": "llamacpp", "managed": True, "server": {"cpus": [1]}},
               {"name": "lan", **LAN},
               {"name": "lan2", **LAN, "url": "http://gpu1.lan:11434/", "model": "qwen3:0.6b"}]
    j = planned(targets=targets)
    assert j.shared_resources == ["cpu1", "endpoint_gpu1_lan_11434"]


def test_a_server_on_this_machine_holds_every_cpu_of_it():
    j = planned(targets=[{"name": "here", **LAN, "url": "http://127.0.0.1:11434"}], cpus=[0, 3])
    assert j.shared_resources == ["endpoint_127_0_0_1_11434", "cpu0", "cpu3"]


def test_the_paired_sides_take_turns():
    j = two_targets(design="paired")
    assert all(j.resource(t, jobs.PAIRED_TURN) == 1 for t in ("a", "b"))
    assert j.shared_resources.count(jobs.PAIRED_TURN) == 1
    assert j.shared_resources[-1] == jobs.PAIRED_TURN
    assert jobs.PAIRED_TURN not in two_targets().shared_resources
    assert jobs.PAIRED_TURN not in two_targets().resource_names()


def test_a_url_the_check_would_refuse_is_one_line():
    cfg = config.resolve(REPO_CONFIG)
    cfg["targets"] = [{"name": "x", "backend": "ollama", "url": "http://exa mple:1"}]
    with pytest.raises(config.ConfigError, match="config key `url` of target 'x'"):
        Jobs(cfg, ["x"], ["run1"], [1], CPUS)


def test_machine_cpus_are_the_ones_this_process_may_use():
    cpus = jobs.machine_cpus()
    assert cpus == sorted(cpus) and cpus
    if hasattr(os, "sched_getaffinity"):
        assert set(cpus) == os.sched_getaffinity(0)


# --- blocks ----------------------------------------------------------------------------------


def test_a_block_holds_reps_per_block_reps():
    assert REPS_PER_BLOCK == 1000
    assert [block_of(r) for r in (1, 999, 1000, 1001, 2000, 2001)] == [1, 1, 1, 2, 2, 3]
    assert block_of("1001") == 2


@pytest.mark.parametrize("reps, blocks, sizes", [
    (3, [1], [3]),
    (1000, [1], [1000]),
    (1001, [1, 2], [1000, 1]),
    (2000, [1, 2], [1000, 1000]),
])
def test_the_raw_files_of_each_block(reps, blocks, sizes):
    j = planned(reps=reps, prompt={"nonce_digits": 8})
    assert j.blocks == blocks
    assert [len(j.block_raw("embedded", "run1", b)) for b in blocks] == sizes
    files = [f for b in blocks for f in j.block_raw("embedded", "run2", str(b))]
    assert files == [f"results/article/raw/embedded/run2/rep{r}.json" for r in range(1, reps + 1)]
    assert j.block_raw("embedded", "run1", blocks[-1] + 1) == []


# --- files -----------------------------------------------------------------------------------


def test_every_file_of_the_jobs_lies_in_the_experiments_folder():
    """results/<experiment>/: the config's experiment (article by default), or results/ itself
    for an archive made before experiments had their own folders."""
    assert planned().results == "results/article"
    j = planned(experiment="smoke", reps=2)
    assert j.raw.format(target="t", run="run1", rep=2) == "results/smoke/raw/t/run1/rep2.json"
    assert j.block_raw("embedded", "run1", 1) == [
        f"results/smoke/raw/embedded/run1/rep{r}.json" for r in (1, 2)]
    assert j.block_prefix.format(target="t", run="r", block=1) == (
        "results/smoke/consolidated/t/r/block1")
    cfg = config.resolve(REPO_CONFIG)
    old = Jobs(cfg, ["embedded"], ["run1"], [1], CPUS, old_layout=True)
    assert old.block_raw("embedded", "run1", 1) == ["results/raw/embedded/run1/rep1.json"]


# --- tokens ----------------------------------------------------------------------------------


def test_a_blocks_token_changes_when_one_of_its_raw_files_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    j = two_targets(reps=2)
    raw = [j.raw.format(target="a", run="run1", rep=r) for r in (1, 2)]
    write_raw_atomic(raw[0], {"rep": 1})
    tokens = j.block_tokens()
    assert set(tokens) == {(t, r, 1) for t in ("a", "b") for r in ("run1", "run2")}
    assert j.block_tokens() == tokens  # read again, nothing changed: the same
    write_raw_atomic(raw[1], {"rep": 2})  # a rep measured
    added = j.block_tokens()
    assert added[("a", "run1", 1)] != tokens[("a", "run1", 1)]
    assert {k: v for k, v in added.items() if k != ("a", "run1", 1)} == {
        k: v for k, v in tokens.items() if k != ("a", "run1", 1)}
    with open(raw[0], "a") as fh:  # edited after it was written
        fh.write(" ")
    edited = j.block_tokens()
    assert edited[("a", "run1", 1)] not in (added[("a", "run1", 1)], tokens[("a", "run1", 1)])
    os.unlink(raw[0])  # deleted
    assert j.block_tokens()[("a", "run1", 1)] != edited[("a", "run1", 1)]
    assert jobs.raw_token(j.block_tokens()) != jobs.raw_token(edited)
    assert jobs.raw_token(edited) == jobs.raw_token(dict(edited))


def test_a_consolidated_blocks_token_is_its_ledgers_while_its_raw_files_stay(tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    j = two_targets(reps=2)
    raw = j.block_raw("a", "run1", 1)
    for rep, path in enumerate(raw, 1):
        write_raw_atomic(path, {"rep": rep})
    ledger = j.block_prefix.format(target="a", run="run1", block=1) + ".inventory.json"
    write_ledger(ledger, raw, "as-consolidated")
    assert j.block_tokens()[("a", "run1", 1)] == "as-consolidated"
    os.utime(raw[1], ns=(1, 1))
    assert j.block_tokens()[("a", "run1", 1)] != "as-consolidated"
