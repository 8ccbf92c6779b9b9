"""slotbench installs like any Python project: `pip install -e .` (setup.sh runs it) declares the
package and its pinned dependencies, `python -m slotbench` works from any directory, the venv
holds no hand-written .pth and Snakemake's own entry point, and the check of --configfile files
lives in the workflow profile, so it holds for `python -m snakemake` too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from importlib.metadata import distributions
from pathlib import Path

import pytest

from e2e_helpers import REPO

VENV_BIN = Path(sys.executable).parent


def requirement_lines() -> list[str]:
    lines = (REPO / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def plain_env() -> dict[str, str]:
    """The environment a user's shell has: no PYTHONPATH pointing into the checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_slotbench_is_installed_editable_from_this_checkout_with_its_pinned_dependencies():
    # the venv's record of the install (pytest's pythonpath also shows the build's egg-info)
    site = sysconfig.get_path("purelib")
    found = list(distributions(name="slotbench", path=[site]))
    assert len(found) == 1, f"slotbench is not installed in {site}: run bash setup.sh"
    direct = json.loads(found[0].read_text("direct_url.json"))
    assert direct["dir_info"].get("editable") is True
    assert Path(direct["url"].removeprefix("file://")).resolve() == REPO
    assert sorted(found[0].requires) == sorted(requirement_lines())
    assert all("==" in line for line in requirement_lines())


def test_the_venv_has_no_hand_written_pth_and_snakemakes_own_entry_point():
    site = Path(sysconfig.get_path("purelib"))
    assert not (site / "slotbench.pth").exists()
    launcher = (VENV_BIN / "snakemake").read_text()
    assert "from snakemake.cli import main" in launcher
    assert "slotbench" not in launcher


def test_python_m_slotbench_works_from_any_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "slotbench", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=plain_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout and "compare" in proc.stdout
    where = subprocess.run([sys.executable, "-c", "import slotbench; print(slotbench.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env=plain_env())
    assert Path(where.stdout.strip()).resolve() == REPO / "scripts/slotbench/__init__.py"


@pytest.mark.slow  # a fresh venv and pip's build
def test_pip_install_e_works_in_a_fresh_venv(tmp_path):
    """A new venv, and this venv's pip pointed at it (--python): the build (pinned setuptools,
    in isolation) and the editable install; --no-deps, the dependencies being the list above."""
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install",
         "--disable-pip-version-check", "--quiet", "--no-deps", "-e", str(REPO)],
        capture_output=True, text=True, timeout=600, env=plain_env())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    probe = ("import importlib.metadata as m, slotbench; "
             "print(slotbench.__file__); print(m.version('slotbench')); "
             "print(len(m.requires('slotbench')))")
    out = subprocess.run([str(venv / "bin/python"), "-c", probe], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=plain_env())
    assert out.returncode == 0, out.stderr[-2000:]
    file, ver, n = out.stdout.split()
    assert Path(file).resolve() == REPO / "scripts/slotbench/__init__.py"
    assert ver == "0.1.0" and int(n) == len(requirement_lines())


@pytest.mark.slow  # Snakemake
def test_a_missing_configfile_is_one_line_for_python_m_snakemake_too(tmp_path):
    """The check is the workflow profile's, not an entry point's: `python -m snakemake` gets it."""
    for args, said in ((["--configfile", "nope.yaml"],
                        "Error: config file nope.yaml does not exist; nothing was run."),
                       (["--configfile", str(tmp_path / "bad.yaml")],
                        f"Error: config file {tmp_path / 'bad.yaml'}, line 2, column 5: "
                        "not valid YAML")):
        (tmp_path / "bad.yaml").write_text("arms: [1, 2\nreps: 3\n")
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=120, env=plain_env())
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr
        assert [line for line in proc.stderr.splitlines() if line.startswith("Error")] == [
            line for line in proc.stderr.splitlines() if line.startswith(said)], proc.stderr
        assert said in proc.stderr
