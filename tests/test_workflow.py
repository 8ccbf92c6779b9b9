"""The workflow itself: lint-clean, formatted, and wired so that each change reruns the right rules."""

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def run(*cmd):
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_snakemake_lint_is_clean():
    proc = run(sys.executable, "-m", "snakemake", "--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_snakefmt_check_is_clean():
    proc = run(str(Path(sys.executable).parent / "snakefmt"), "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_profile_serialises_server_jobs_and_ignores_script_mtimes():
    profile = yaml.safe_load((REPO / "profiles/default/profile.yaml").read_text())
    assert "llm_server=1" in profile["resources"]
    assert "code" not in profile["rerun-triggers"]
    for rule in ["fingerprint", "plan", "rep"]:
        assert "llm_server=1" in (REPO / f"rules/{rule}.smk").read_text(), rule


def test_ci_runs_exactly_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci/run").read_text()
    command = "bash setup.sh && .venv/bin/python -m pytest"
    assert command in readme and command in ci
