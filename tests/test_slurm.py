"""The smoke matrix (two embedded targets, one per CPU) through a real one-node SLURM cluster
(slurmctld, slurmd and munged started by tests/slurm_cluster.sh, as root), with the workflow's
SLURM profile (profiles/slurm, snakemake-executor-plugin-slurm).

From the raw files' own timestamps: the two targets' reps overlap in time, and one target's reps
never overlap each other. Then a running rep job is cancelled with scancel: no server survives
it, the run fails naming the rep, and the next invocation measures what is missing and redoes
no completed rep."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from doubles.wait import wait_for
from e2e_helpers import (
    REPO, SMOKE, copy_repo, file_states, jobs_run, llama_servers_under, results_dir,
)

pytestmark = [
    pytest.mark.e2e,
    # slurmd starts jobs as their users and munged runs as munge: the cluster needs root (CI
    # runs as root; elsewhere this shows as skipped, never as passed)
    pytest.mark.skipif(os.geteuid() != 0, reason="a private SLURM cluster needs root"),
]

MATRIX = [*SMOKE, "config/smoke-matrix.yaml", "short.yaml"]
# two reps of the serial and 2-way arms with short outputs (one thread per server), and status
# checks every few seconds rather than the profile's 10 s and up: the test's own time
SHORT = {"reps": 2, "num_predict": 16, "arms": [1, 2]}
PROFILE = ["--profile", "profiles/slurm", "--slurm-init-seconds-before-status-checks", "3"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The environment that reaches the cluster (SLURM_CONF, SLURM_PARTITION)."""
    state = tmp_path_factory.mktemp("slurm")
    script = str(REPO / "tests/slurm_cluster.sh")
    proc = subprocess.run(["bash", script, "start", str(state)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    env = {}
    for line in proc.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0]
    try:
        yield env
    finally:
        stop = subprocess.run(["bash", script, "stop", str(state)], capture_output=True,
                              text=True, timeout=300)
        assert stop.returncode == 0, stop.stderr[-3000:]
        assert not (state / "pids").exists(), "a daemon the test started is still recorded"


def slurm_snakemake(work, *args, cache, env, popen=False):
    cmd = [sys.executable, "-m", "snakemake", *PROFILE, *args]
    env = os.environ | {"PYTHONUNBUFFERED": "1", "SLOTBENCH_CACHE": str(cache)} | env
    if popen:
        return subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1200, env=env)


def spans(work) -> dict[str, list[tuple[float, float, int]]]:
    """target -> (started, finished, rep) of each raw file, from its own clock."""
    out: dict[str, list] = {}
    for raw in sorted((results_dir(work, "smoke-matrix") / "raw").rglob("rep*.json")):
        data = json.loads(raw.read_text())
        out.setdefault(data["target"], []).append(
            (data["started_unix"], data["finished_unix"], data["rep"]))
    return out


def overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.fixture(scope="module")
def measured(cluster, tmp_path_factory):
    work = copy_repo(tmp_path_factory.mktemp("slurm-work"))
    (work / "short.yaml").write_text(yaml.safe_dump(SHORT))
    cache = tmp_path_factory.mktemp("slurm-cache")
    proc = slurm_snakemake(work, *MATRIX, cache=cache, env=cluster)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return work, cache, proc


def test_two_endpoints_overlap_and_one_endpoints_reps_never_do(measured):
    work, cache, proc = measured
    out = proc.stdout + proc.stderr
    assert "has been submitted with SLURM jobid" in out, out[-3000:]
    by_target = spans(work)
    assert sorted(by_target) == ["emb-a", "emb-b"]
    assert all(len(reps) == 2 for reps in by_target.values())
    for target, reps in by_target.items():
        for i, a in enumerate(reps):
            for b in reps[i + 1:]:
                assert not overlap(a, b), f"{target}: reps {a[2]} and {b[2]} overlapped"
    across = [(a[2], b[2]) for a in by_target["emb-a"] for b in by_target["emb-b"]
              if overlap(a, b)]
    assert across, f"the two endpoints were measured in turn, not side by side: {by_target}"
    for target, cpu in (("emb-a", 0), ("emb-b", 1)):
        folder = results_dir(work, "smoke-matrix")
        fp = json.loads((folder / f"fingerprint/{target}/run1.json").read_text())
        assert fp["server"]["cpus"] == [cpu] and fp["server"]["flags"]["threads"] == 1, fp["server"]
    md = (results_dir(work, "smoke-matrix") / "report.md").read_text()
    assert "## Target: emb-a" in md and "## Target: emb-b" in md and "## Across targets" in md
    assert llama_servers_under(str(cache)) == []


def test_scancel_of_a_running_rep_leaves_no_server_and_the_next_run_resumes(measured, cluster):
    work, cache, _ = measured
    (work / "more.yaml").write_text(yaml.safe_dump({"reps": 3}))
    raw_dir = results_dir(work, "smoke-matrix") / "raw/emb-a/run1"
    log = results_dir(work, "smoke-matrix") / "logs/rep/emb-a/run1/rep3.log"
    kept = file_states(sorted((results_dir(work, "smoke-matrix") / "raw").rglob("rep[12].json")))
    run = slurm_snakemake(work, *MATRIX, "more.yaml", cache=cache, env=cluster, popen=True)
    env = os.environ | cluster
    try:
        def measuring() -> bool:
            assert run.poll() is None, run.stdout.read()[-3000:]
            return log.exists() and "position 0" in log.read_text()

        wait_for(measuring, 300, "emb-a rep 3 to start measuring", interval=0.2)
        jobs = subprocess.run(["squeue", "-h", "-o", "%A %k"], capture_output=True, text=True,
                              env=env, check=True).stdout.splitlines()
        (job,) = [j.split()[0] for j in jobs if "rep" in j and "emb-a" in j]
        subprocess.run(["scancel", job], env=env, check=True)
        out, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0, out[-3000:]
    wait_for(lambda: llama_servers_under(str(cache)) == [], 30,
             "the managed server to go after scancel", interval=0.2)
    assert not (raw_dir / "rep3.json").exists()
    assert "emb-a" in out and "rep3" in out, out[-3000:]

    again = slurm_snakemake(work, *MATRIX, "more.yaml", cache=cache, env=cluster)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (raw_dir / "rep3.json").exists()
    # emb-a's rep 3, and emb-b's if Snakemake cancelled it when the run failed: nothing else
    assert 1 <= jobs_run(again).count("rep") <= 2, jobs_run(again)
    folder = results_dir(work, "smoke-matrix")
    assert file_states(sorted((folder / "raw").rglob("rep[12].json"))) == kept
    assert llama_servers_under(str(cache)) == []
