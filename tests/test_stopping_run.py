"""reps: auto through the real workflow (Snakefile, rules, the look checkpoint, consolidation,
analysis, checks and report) against the scripted llama-server: a nearly noiseless ideal
server stops precise in whole rotation blocks, is up to date afterwards, re-renders its trail
byte for byte and grows only by new blocks when the target tightens; a noisy one with a target
it cannot reach stops futile or at max_reps and says so. The real embedded server's sequential
run is a benchmark (benchmarks/RESULTS.md), not a test: it takes as long as the data needs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from doubles.fault_server import FaultServer
from e2e_helpers import copy_repo, results_dir

pytestmark = pytest.mark.slow  # Snakemake against a scripted server

BLOCK = 2  # arms [1, 2]: a rotation block is two reps
CONFIG = {
    "experiment": "auto",
    "arms": [1, 2],
    "requests_per_cell": 4,
    "reps": "auto",
    "runs": 2,
    "num_predict": 6,
    "warmup_predict": 2,
    "request_timeout_s": 5,
    "cooldown_s": 0,
    "analysis": {"bootstrap": 100},
}
ENV = os.environ | {"PYTHONUNBUFFERED": "1"}


def run(work: Path, *args: str, files=("auto.yaml",)) -> subprocess.CompletedProcess:
    configfiles = [a for f in files for a in ("--configfile", f)]
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args,
                           *configfiles], cwd=work, capture_output=True, text=True,
                          timeout=600, env=ENV)


def output(proc) -> str:
    return (proc.stdout or "") + (proc.stderr or "")


def write(work: Path, server: FaultServer, **over) -> None:
    cfg = CONFIG | {"targets": [{"name": "ideal", "backend": "llamacpp", "url": server.url}]}
    (work / "auto.yaml").write_text(yaml.safe_dump(cfg | over))


def raw_reps(out: Path, run_id: str) -> list[int]:
    return sorted(int(re.search(r"rep(\d+)\.json$", p.name).group(1))
                  for p in (out / "raw/ideal" / run_id).glob("rep*.json"))


def digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((out / "raw").rglob("rep*.json*"))}


def stopped(out: Path) -> dict:
    found = sorted((out / "stopping").glob("*/stopped.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text())


@pytest.fixture(scope="module")
def ideal(tmp_path_factory):
    """An ideal server (perfect batching, every token on time) measured with reps: auto: the
    first sequential run, as it finished."""
    base = tmp_path_factory.mktemp("stopping")
    server = FaultServer(slots=4, token_s=0.02, measured_predict=6).start()
    work = copy_repo(base / "work")
    write(work, server, stopping={"max_reps": 30})
    proc = run(work)
    yield work, server, proc
    server.stop()


def test_an_ideal_server_stops_precise_in_whole_blocks_well_before_max_reps(ideal):
    work, _, proc = ideal
    text = output(proc)
    assert proc.returncode == 0, text[-4000:]
    # said before anything ran, and one line per look
    assert "reps: auto: whole blocks of 2 reps in each run" in text
    looks = re.findall(r"^look (\d+): (\d+) reps/run · (.*)$", text, re.M)
    assert looks and [int(k) for k, _, _ in looks] == list(range(1, len(looks) + 1))
    assert "stop: precise" in looks[-1][2] and "(target 5%)" in looks[0][2]
    out = results_dir(work, "auto")
    stop = stopped(out)
    assert stop["decision"] == "precise"
    reps = stop["reps_per_run"]
    # the sequence is bounded from 9 a run; well before 30 even when the machine is busy
    assert reps % BLOCK == 0 and 9 <= reps <= 16, reps
    # whole blocks in every run, nothing beyond the stop
    assert raw_reps(out, "run1") == raw_reps(out, "run2") == list(range(1, reps + 1))
    cells = pd.read_parquet(out / "cells.parquet")
    positions = cells.groupby(["run", "arm"])["position"].value_counts().unstack()
    assert (positions == reps // BLOCK).all().all(), positions  # every arm, every position
    trail = pd.read_csv(out / "analysis/stopping.csv")
    assert trail["look"].max() == reps // BLOCK
    assert set(trail.loc[trail["look"] == trail["look"].max(), "decision"]) == {"precise"}
    summary = pd.read_csv(out / "analysis/summary.csv")
    p2 = summary[summary["arm"] == 2].iloc[0]
    assert 1.8 < p2["speedup_lo"] <= p2["speedup"] <= p2["speedup_hi"] < 2.2
    md = (out / "report.md").read_text()
    assert "## Stopping" in md and "stopped precise" in md
    assert "speedup [95% sequential CI]" in md and "Not precise" not in md


def test_a_finished_sequential_run_is_up_to_date_and_its_trail_re_renders_byte_identically(
        ideal):
    work, _, first = ideal
    assert first.returncode == 0, output(first)[-3000:]
    out = results_dir(work, "auto")
    dry = run(work, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in output(dry), output(dry)[-3000:]
    trail = (out / "analysis/stopping.csv").read_bytes()
    before = digests(out)
    again = run(work, "--forcerun", "analyse")
    assert again.returncode == 0, output(again)[-3000:]
    assert (out / "analysis/stopping.csv").read_bytes() == trail
    assert digests(out) == before
    # the trail the analysis decided again is the one the looks followed
    looks = sorted((out / "stopping").glob("*/look*.json"))
    decided = pd.read_csv(out / "analysis/stopping.csv").groupby("look")["look_decision"].first()
    for path in looks:
        look = json.loads(path.read_text())
        assert decided[look["look"]] == look["decision"], path


def test_tightening_the_target_adds_whole_blocks_and_keeps_every_raw_file(ideal):
    work, server, first = ideal
    assert first.returncode == 0, output(first)[-3000:]
    out = results_dir(work, "auto")
    before = digests(out)
    reps = stopped(out)["reps_per_run"]
    # a target tighter than the widest interval the first run stopped with: two blocks at most
    trail = pd.read_csv(out / "analysis/stopping.csv")
    widest = trail.loc[trail["look"] == trail["look"].max(), "rel"].max()
    write(work, server, stopping={"max_reps": reps + 4},
          checks={"precision": round(0.7 * float(widest), 5)})
    proc = run(work)
    text = output(proc)
    assert proc.returncode == 0, text[-3000:]
    stop = stopped(out)
    assert stop["reps_per_run"] > reps and stop["reps_per_run"] % BLOCK == 0, (stop, text[-3000:])
    assert raw_reps(out, "run1") == raw_reps(out, "run2") == list(
        range(1, stop["reps_per_run"] + 1))
    after = digests(out)
    assert {k: after[k] for k in before} == before  # every earlier raw file byte-identical
    # the first look after the measured ones is where it resumed deciding
    assert re.search(rf"^look {reps // BLOCK}: ", text, re.M)
    assert not re.search(r"^look 1: ", text, re.M)
    md = (out / "report.md").read_text()
    assert f"stopped {stop['decision']}" in md
    assert ("Not precise" in md) == (stop["decision"] != "precise")
    # loosening again measures nothing: the report is re-rendered from the reps there are
    write(work, server, stopping={"max_reps": reps + 4})
    proc = run(work)
    assert proc.returncode == 0, output(proc)[-3000:]
    assert digests(out) == after and stopped(out)["decision"] == "precise"
    assert "stopped precise" in (out / "report.md").read_text()


def test_a_noisy_server_with_an_unreachable_target_stops_and_says_so(tmp_path):
    server = FaultServer(slots=4, token_s=0.01, measured_predict=6)
    server.noise = 0.6
    server.start()
    try:
        work = copy_repo(tmp_path / "work")
        write(work, server, runs=1, stopping={"min_reps": 4, "max_reps": 10},
              checks={"precision": 0.01})
        proc = run(work)
    finally:
        server.stop()
    text = output(proc)
    assert proc.returncode == 0, text[-4000:]
    out = results_dir(work, "auto")
    stop = stopped(out)
    assert stop["decision"] in ("futile", "max_reps"), stop
    assert raw_reps(out, "run1") == list(range(1, stop["reps_per_run"] + 1))
    md = (out / "report.md").read_text()
    section = md[md.index("## Stopping"):md.index("## Target")]
    assert f"stopped {stop['decision']}" in section and "Missed the ±1% target" in section
    assert "Not precise" in section and "no headline here is claimed" in section
    sufficiency = json.loads((out / "checks/sufficiency.json").read_text())[0]
    assert sufficiency["fired"], sufficiency["summary"]  # no interval claimed as precise
    assert "Enough reps:" not in md  # the sufficiency check's sentence when every one meets it


def test_a_sequential_run_that_fails_a_rep_resumes_where_it_stopped(tmp_path):
    """A server that fails a request fails the rep it hits, by name; the next plain run keeps
    every rep measured before, measures only what is missing and goes on looking."""
    server = FaultServer(slots=4, token_s=0.01, measured_predict=6).start()
    try:
        work = copy_repo(tmp_path / "work")
        write(work, server, runs=1, stopping={"min_reps": 4, "max_reps": 8})
        per_rep = 2 * 4  # arms × requests_per_cell
        # the second block's first rep measured (Snakemake runs its two in either order), the
        # other fails at its third measured request
        server.arm("http500", skip=3 * per_rep + 2)
        failed = run(work)
        assert failed.returncode != 0
        errors = [line for line in output(failed).splitlines() if line.startswith("ERROR: ")]
        assert errors and re.search(r"^ERROR: target ideal, run run1, rep [34], arm [12] "
                                    r"\(position [01]\), request [0-3]: .*HTTP 500", errors[0])
        out = results_dir(work, "auto")
        before = raw_reps(out, "run1")
        assert len(before) == 3 and before[:2] == [1, 2]
        kept = digests(out)
        server.arm(None)
        server.reset_counts()
        resumed = run(work)
        assert resumed.returncode == 0, output(resumed)[-3000:]
    finally:
        server.stop()
    stop = stopped(out)
    reps = stop["reps_per_run"]
    assert raw_reps(out, "run1") == list(range(1, reps + 1)) and reps >= 4
    after = digests(out)
    assert {k: after[k] for k in kept} == kept  # the three reps kept, as they were
    with server.lock:
        measured = sum(1 for b in server.bodies if b.get("n_predict") == 6)
    assert measured == per_rep * (reps - 3)  # none of them was measured again
