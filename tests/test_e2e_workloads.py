"""End to end with workloads: a synthetic workload on the real embedded server gets exactly the
lengths it planned, request for request; on the scripted Ollama server, which cannot pin an
output's length, the lengths are ceilings and an arm that stopped early is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from doubles.ollama_double import OllamaDouble
from e2e_helpers import copy_repo, results_dir, snakemake

pytestmark = pytest.mark.e2e
# the real traces sit beside the checkout, never in it (see tests/test_traces.py)
REAL_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


def test_a_synthetic_workload_gets_every_planned_length_exactly_on_the_real_server(tmp_path):
    work = copy_repo(tmp_path / "synthetic")
    # config/workloads/synthetic.yaml, shorter: one rep of 160-token prompts, 24-token outputs
    (work / "short.yaml").write_text(yaml.safe_dump(
        {"reps": 1, "cooldown_s": 0,
         "workload": {"input_tokens": {"dist": "fixed", "value": 160},
                      "output_tokens": {"dist": "fixed", "value": 24}}}))
    proc = snakemake(work, "--configfile", "config/workloads/synthetic.yaml", "short.yaml",
                     cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = results_dir(work, "synthetic")
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == 4 + 4 + 4
    assert requests["prompt_tokens"].eq(160).all(), requests["prompt_tokens"].value_counts()
    assert requests["output_tokens"].eq(24).all(), requests["output_tokens"].value_counts()
    assert requests["planned_input_tokens"].eq(160).all()
    assert requests["planned_output_tokens"].eq(24).all() and requests["pinned"].all()
    assert requests["nonce"].is_unique
    # the raw file keeps each request's plan beside what it got
    raw = json.loads((out / "raw/embedded/run1/rep1.json").read_text())
    assert raw["experiment"]["workload"]["kind"] == "synthetic"
    first = raw["cells"][0]["requests"][0]
    assert first["planned"] == {"input_tokens": 160, "output_tokens": 24, "pinned": True}
    outputs = json.loads((out / "checks/outputs.json").read_text())
    prompts = json.loads((out / "checks/prompts.json").read_text())
    assert [v["verdict"] for v in outputs] == ["no"] and "pinned" in outputs[0]["summary"]
    assert [v["verdict"] for v in prompts] == ["no"]
    assert "every prompt its planned length" in prompts[0]["summary"]
    md = (out / "report.md").read_text()
    assert "Output lengths against the plan" in md and "synthetic: input 160, output 24" in md
    # a workload's result is archived, re-rendered without a server, and explained like any
    slotbench = [sys.executable, "-m", "slotbench"]
    done = snakemake(work, "archive", "--configfile", "config/workloads/synthetic.yaml",
                     "short.yaml", cache=tmp_path / "cache")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rendered = subprocess.run(
        [*slotbench, "archive-render", str(out / "archive/synthetic.tar.gz"), "--out",
         str(tmp_path / "rendered")], cwd=work, capture_output=True, text=True, timeout=600)
    assert rendered.returncode == 0, rendered.stdout[-2000:] + rendered.stderr[-2000:]
    assert "byte-identical to the archive" in rendered.stdout + rendered.stderr
    explained = subprocess.run([*slotbench, "explain", "integrity/embedded/outputs", "--results",
                                str(out)], cwd=work, capture_output=True, text=True, timeout=120)
    assert explained.returncode == 0 and "rep1.json" in explained.stdout, explained.stdout


def test_ceilings_on_ollama_are_said_and_an_arm_that_stopped_early_is_named(tmp_path):
    work = copy_repo(tmp_path / "ollama-workload")
    config = yaml.safe_load((work / "config/ollama.yaml").read_text())
    config["targets"][0]["url"] = None  # set below, once the double has its port
    with OllamaDouble(slots=4, token_s=0.004) as double:
        double.stop_early_when_active = (4, 0.5)  # four at once: half the planned output
        config["targets"][0]["url"] = double.url
        config |= {"experiment": "ollama-workload", "reps": 3, "cooldown_s": 0,
                   "warmup_predict": 4, "analysis": {"bootstrap": 200},
                   "workload": {"kind": "synthetic",
                                "input_tokens": {"dist": "uniform", "min": 30, "max": 60},
                                "output_tokens": {"dist": "fixed", "value": 24}}}
        (work / "ollama-workload.yaml").write_text(yaml.safe_dump(config))
        proc = snakemake(work, "--configfile", "ollama-workload.yaml", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = results_dir(work, "ollama-workload")
    requests = pd.read_parquet(out / "requests.parquet")
    assert not requests["pinned"].any(), "Ollama cannot pin an output's length"
    early = requests[requests["output_tokens"] < requests["planned_output_tokens"]]
    assert set(early["arm"]) == {4}
    outputs = json.loads((out / "checks/outputs.json").read_text())[0]
    assert outputs["fired"] and outputs["arms"] == [4]
    assert "ceilings" in outputs["summary"] and "parallel-4" in outputs["summary"]
    table = pd.read_csv(out / "checks/outputs.csv")
    assert len(table) == len(early) and set(table["arm"]) == {4}
    deviance = json.loads((out / "checks/deviance.json").read_text())[0]
    assert deviance["fired"], "the cells of the arm that stopped early are not named"
    # the prompt lengths were estimates (Ollama has no tokenizer endpoint), and said to be
    prompts = json.loads((out / "checks/prompts.json").read_text())[0]
    assert prompts["evidence"].get("planned_lengths") is True
    md = (out / "report.md").read_text()
    assert "ceilings (the backend cannot pin them)" in md


def test_a_real_trace_replayed_arrives_at_its_gaps_and_the_server_counts_its_lengths(tmp_path):
    from slotbench.measure.traces import read_trace, scale_length

    trace_path = REAL_TRACES / "azure-conv-2023.csv"
    if not trace_path.is_file():
        pytest.skip(f"{trace_path} is not beside this checkout (the real traces are never "
                    "shipped); the example traces' plans are covered by tests/test_workload.py")
    work = copy_repo(tmp_path / "trace")
    # config/workloads/trace.yaml on the real Azure trace replayed: its lengths at 0.06 (its
    # largest request then fits one 1024-token slot), its gaps × 4 (about 1.4 requests/s, what
    # two cores serve), a serial arm, a 2-way arm and the replaying rate arm, one rep
    (work / "azure.yaml").write_text(yaml.safe_dump(
        {"reps": 1, "cooldown_s": 0, "arms": [1, 2, {"rate": 1.0, "arrival": "trace"}],
         "workload": {"path": str(trace_path), "length_scale": 0.06, "mode": "replay",
                      "time_scale": 4.0}}))
    proc = snakemake(work, "--configfile", "config/workloads/trace.yaml", "azure.yaml",
                     cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = results_dir(work, "trace")
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == 12
    assert (requests["prompt_tokens"] == requests["planned_input_tokens"]).all()
    assert (requests["output_tokens"] == requests["planned_output_tokens"]).all()
    trace = read_trace(trace_path, "auto")
    raw = json.loads((out / "raw/embedded/run1/rep1.json").read_text())
    rows = [[r["planned"]["trace_row"] for r in c["requests"]] for c in raw["cells"]]
    assert rows[0] == rows[1] == rows[2], "the arms did not send the same window"
    for cell in raw["cells"]:  # every request its row's lengths, scaled
        for r, i in zip(cell["requests"], rows[0]):
            row = trace.rows[i]
            assert r["planned"]["output_tokens"] == scale_length(row.output_tokens, 0.06)
            assert r["planned"].get("trace_input_tokens", r["planned"]["input_tokens"]) == \
                scale_length(row.input_tokens, 0.06)
    rate = next(c for c in raw["cells"] if c["arm"] < 0)
    planned = [r["t_planned_s"] for r in rate["requests"]]
    gaps = [(trace.rows[i].t_s - trace.rows[rows[0][0]].t_s) * 4.0 for i in rows[0]]
    assert [p - planned[0] for p in planned] == pytest.approx(gaps, abs=1e-6)
    skew = max(r["t_ready_s"] - r["t_planned_s"] for r in rate["requests"])
    assert skew <= 0.010, f"launch skew {skew * 1000:.1f} ms beyond checks.launch_skew_s"
    assert rate["open"]["rate"] == pytest.approx(3 / gaps[-1])
    lengths = json.loads((out / "analysis/workload.json").read_text())["targets"]["embedded"]
    assert lengths["trace"]["rows"] == len(trace.rows) == 19366
    md = (out / "report.md").read_text()
    assert "the trace, × 0.06" in md and "azure-conv-2023.csv" in md


def test_a_shared_prefix_is_served_from_the_cache_as_planned_and_a_reused_one_is_flagged(
        tmp_path):
    work = copy_repo(tmp_path / "shared-prefix")
    small = {"reps": 1, "cooldown_s": 0, "requests_per_cell": 4,
             "workload": {"prefix_tokens": 200, "input_tokens": {"dist": "fixed", "value": 16},
                          "output_tokens": {"dist": "fixed", "value": 8}}}
    (work / "small.yaml").write_text(yaml.safe_dump(small))
    (work / "reused.yaml").write_text(yaml.safe_dump(
        {"experiment": "reused", "workload": {"prefix_scope": "rep"}}))
    verdicts = {}
    for name, files in (("shared-prefix", ["small.yaml"]),
                        ("reused", ["small.yaml", "reused.yaml"])):
        proc = snakemake(work, "--configfile", "config/workloads/shared-prefix.yaml", *files,
                         cache=tmp_path / "cache")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out = results_dir(work, name)
        verdicts[name] = json.loads((out / "checks/cache.json").read_text())[0]
        requests = pd.read_parquet(out / "requests.parquet")
        assert (requests["prompt_tokens"] == 216).all() and requests["prefix_group"].notna().all()
    # each cell's own prefixes: the hits it means, measured per arm, and the trap quiet
    quiet = verdicts["shared-prefix"]
    assert quiet["verdict"] == "no", quiet["summary"]
    rates = quiet["evidence"]["planned_hit_rate"]
    assert set(rates) == {"1", "2", "4"} and rates["1"] > 0.9, rates
    # the same prefixes in every cell of the rep: a later arm finds them cached, and is named
    fired = verdicts["reused"]
    assert fired["verdict"] == "yes" and fired["evidence"]["rows"], fired["summary"]
    assert all(r["position"] > 0 for r in fired["evidence"]["rows"])


def test_a_conversations_turns_run_in_order_each_carrying_the_last_live_reply(tmp_path):
    work = copy_repo(tmp_path / "multi-turn")
    # config/workloads/multi-turn.yaml, smaller: 2 sessions of 3 turns a cell, one rep
    (work / "small.yaml").write_text(yaml.safe_dump(
        {"reps": 1, "cooldown_s": 0, "requests_per_cell": 2, "arms": [1, 2],
         "workload": {"think_time_s": 0.2, "input_tokens": {"dist": "fixed", "value": 24},
                      "output_tokens": {"dist": "fixed", "value": 16}}}))
    proc = snakemake(work, "--configfile", "config/workloads/multi-turn.yaml", "small.yaml",
                     cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = results_dir(work, "multi-turn")
    raw = json.loads((out / "raw/embedded/run1/rep1.json").read_text())
    for cell in raw["cells"]:
        sessions: dict = {}
        for r in cell["requests"]:
            sessions.setdefault(r["turn"]["session"], []).append(r)
        assert len(sessions) == 2 and all(len(t) == 3 for t in sessions.values())
        for turns in sessions.values():
            turns.sort(key=lambda r: r["turn"]["turn"])
            assert [r["turn"]["turn"] for r in turns] == [0, 1, 2]
            for before, after in zip(turns, turns[1:]):
                # in order, never overlapping, after the think time
                assert after["t_sent_s"] >= before["t_done_s"] + 0.2
                # the history grew by the previous prompt and its live reply
                assert before["turn"]["reply"], "a turn's reply text was not kept"
                assert after["turn"]["prompt"].startswith(
                    before["turn"]["prompt"] + before["turn"]["reply"] + "\n\n")
                assert after["prompt_tokens"] > before["prompt_tokens"] + before["output_tokens"]
    requests = pd.read_parquet(out / "requests.parquet")
    first = requests[requests["turn"] == 0]
    assert (first["prompt_tokens"] == first["planned_input_tokens"]).all()
    assert (requests["output_tokens"] == 16).all()
    prompts = json.loads((out / "checks/prompts.json").read_text())[0]
    assert prompts["verdict"] == "no", prompts["summary"]
    cache = json.loads((out / "checks/cache.json").read_text())[0]
    assert cache["verdict"] == "no", cache["summary"]
