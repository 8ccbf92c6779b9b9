"""The workflow itself: lint-clean, formatted, and wired so that each change reruns the right rules."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from e2e_helpers import copy_repo, results_dir
from slotbench.measure.rawfiles import write_ledger, write_raw_atomic
from slotbench.workflow.jobs import BLOCK_PREFIX

REPO = Path(__file__).resolve().parents[1]


def run(*cmd):
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # Snakemake
def test_snakemake_lint_is_clean():
    proc = run(sys.executable, "-m", "snakemake", "--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.slow  # snakefmt
def test_snakefmt_check_is_clean():
    proc = run(str(Path(sys.executable).parent / "snakefmt"), "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_profile_ignores_script_mtimes():
    profile = yaml.safe_load((REPO / "profiles/default/profile.yaml").read_text())
    assert "code" not in profile["rerun-triggers"]


@pytest.mark.slow  # Snakemake
def test_measuring_jobs_hold_their_endpoint_and_analysis_jobs_stay_local():
    """A dry run of the matrix: each measuring job holds the CPU its server is pinned to (the
    default target holds both), asks for its cores and a runtime; the analysis rules are
    localrules, so that they never queue on a cluster."""
    proc = run(sys.executable, "-m", "snakemake", "-n", "--jobs", "2", "--configfile",
               "config/matrix.yaml")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    jobs = {}
    for block in out.split("\nrule ")[1:] + out.split("\nlocalrule ")[1:]:
        rule = block.split(":", 1)[0]
        wildcards = next((line for line in block.splitlines() if "wildcards:" in line), "")
        res = next((line for line in block.splitlines() if "resources:" in line), "")
        jobs.setdefault(rule, []).append((wildcards, res))
    for rule in ("fingerprint", "plan", "rep"):
        for wildcards, res in jobs[rule]:
            endpoint = "cpu0=1" if "target=emb-a-" in wildcards else "cpu1=1"
            other = "cpu1=1" if endpoint == "cpu0=1" else "cpu0=1"
            assert endpoint in res and other not in res and "cpus_per_task=1" in res, (rule, res)
            assert "runtime=" in res, res


@pytest.mark.slow  # Snakemake
def test_a_runs_measuring_jobs_share_one_priority_and_runs_go_in_order():
    """A run's fingerprint, plan and reps share its server, so Snakemake is asked to schedule
    them together (one priority per run, earlier runs higher) rather than interleave runs and
    restart servers."""
    proc = run(sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config", "runs=3",
               "reps=2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    priority = {}
    for block in out.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        lines = block.splitlines()
        wildcards = next((line for line in lines if "wildcards:" in line), "")
        if rule in ("fingerprint", "plan", "rep"):
            found = next((line for line in lines if line.strip().startswith("priority:")), None)
            assert found, (rule, wildcards)
            run_id = wildcards.split("run=")[1].split(",")[0]
            priority.setdefault(run_id, set()).add(int(found.split(":")[1]))
    assert all(len(p) == 1 for p in priority.values()), priority
    (first,), (second,), (third,) = (priority[r] for r in ("run1", "run2", "run3"))
    assert first > second > third, priority


@pytest.mark.slow  # Snakemake
def test_every_rule_but_the_measuring_ones_is_a_localrule():
    """Only fingerprint, plan and rep talk to a server; a new rule must say where it runs."""
    listed = run(sys.executable, "-m", "snakemake", "--list-rules")
    rules = {line.split()[0] for line in listed.stdout.splitlines()
             if line.strip() and not line.startswith(" ")}
    text = (REPO / "Snakefile").read_text()
    block = text[text.index("localrules:"):].split("\n\n", 1)[0]
    local = {line.strip().rstrip(",") for line in block.splitlines()[1:] if line.strip()}
    assert rules - local == {"fingerprint", "plan", "rep"}, rules - local
    assert local <= rules, local - rules


def test_ci_runs_exactly_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci/run").read_text()
    command = "bash setup.sh && .venv/bin/python -m pytest"
    assert command in readme and command in ci


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and directory under ``root`` but Snakemake's own .snakemake/ (where
    smkstate.settle records its host): its modification time and bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".snakemake":
            continue
        stat = path.lstat()
        found[str(rel)] = (stat.st_mtime_ns, None if path.is_dir() else path.read_bytes())
    return found


@pytest.mark.slow
def test_reading_the_workflow_changes_no_file(tmp_path):
    """A dry run reads the raw files' states, the consolidation's ledgers and the package's
    modules as the workflow is parsed, and writes none of them: twice over a results tree with
    measured reps, a missing one, a consolidated block whose rep changed since, and outputs."""
    work = copy_repo(tmp_path / "repo", git=False)
    smoke = results_dir(work)  # config/smoke.yaml's experiment
    raws = [smoke / f"raw/embedded/run1/rep{rep}.json" for rep in (1, 2, 3)]
    for rep, raw in enumerate(raws[:2], 1):
        write_raw_atomic(raw, {"rep": rep})
    ledger = smoke / (BLOCK_PREFIX.format(target="embedded", run="run1", block=1)
                      + ".inventory.json")
    os.chdir(work)
    try:
        write_ledger(ledger, [str(r.relative_to(work)) for r in raws], "consolidated-before")
    finally:
        os.chdir(REPO)
    write_raw_atomic(raws[2], {"rep": 3})  # measured since the block was consolidated
    for name in ("plan/embedded/run1.json", "report.md"):
        (smoke / name).parent.mkdir(parents=True, exist_ok=True)
        (smoke / name).write_text("{}\n")
    before = snapshot(work)
    env = os.environ | {"SLOTBENCH_CACHE": str(tmp_path / "cache"),
                        "PYTHONPATH": str(work / "scripts")}
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1",
                               "--configfile", "config/smoke.yaml"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        after = snapshot(work)
        changed = sorted(k for k in before.keys() | after.keys()
                         if before.get(k) != after.get(k))
        assert not changed, changed
