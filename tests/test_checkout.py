"""Code comes from the checkout being run: a second checkout sharing this venv runs its own
package in its rules, and its fingerprint and raw files record its own commit and dirty state.
(`python -m slotbench` is the checkout the venv was set up from, `pip install -e .`: the
workflow, not the venv, decides which code a rule runs.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doubles.fault_server import FaultServer
from e2e_helpers import DEFAULT_EXPERIMENT, REPO, copy_repo, results_dir

pytestmark = pytest.mark.slow  # Snakemake in a second checkout

CONFIG = """\
targets:
  - name: fault
    backend: llamacpp
    url: {url}
arms: [1, 2]
requests_per_cell: 2
reps: 1
runs: 1
num_predict: 4
warmup_predict: 1
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_second_checkout_runs_and_records_its_own_code(tmp_path):
    # this tree as a checkout of its own (copy_repo), a commit only it has, and an uncommitted
    # change
    other = copy_repo(tmp_path / "other")
    (other / "docs" / "second-checkout.md").write_text("a commit only this checkout has\n")
    git(other, "add", "-A")
    git(other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "mine")
    with open(other / "scripts/slotbench/core/fmt.py", "a") as fh:
        fh.write("\n# an uncommitted change\n")
    head = git(other, "rev-parse", "HEAD")
    assert head != git(REPO, "rev-parse", "HEAD")

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # outside the workflow, the venv's package is the one it was installed from
    found = subprocess.run([sys.executable, "-c", "import slotbench; print(slotbench.__file__)"],
                           cwd=other, capture_output=True, text=True, env=env, check=True)
    assert Path(found.stdout.strip()).resolve() == REPO / "scripts/slotbench/__init__.py"

    with FaultServer() as server:
        (other / "fault.yaml").write_text(CONFIG.format(url=server.url))
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "results/article/fingerprint/fault/run1.json",
             "results/article/raw/fault/run1/rep1.json", "--cores", "1", "--configfile",
             "fault.yaml"],
            cwd=other, capture_output=True, text=True, env=env, timeout=300,
        )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    folder = results_dir(other, DEFAULT_EXPERIMENT)
    fingerprint = json.loads((folder / "fingerprint/fault/run1.json").read_text())
    folder = results_dir(other, DEFAULT_EXPERIMENT)
    raw = json.loads((folder / "raw/fault/run1/rep1.json").read_text())
    assert fingerprint["pipeline"] == {"commit": head, "dirty": True}
    assert raw["code"] == {"commit": head, "dirty": True}
