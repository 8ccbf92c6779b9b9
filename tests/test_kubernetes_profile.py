"""profiles/kubernetes, dry-run with the plugins it needs (profiles/kubernetes/requirements.txt),
in a venv of their own that also sees the project's .venv: no cluster, no kubeconfig, no server.

The venv is built once per requirements file (its SHA-256 names it) under $SLOTBENCH_CACHE and
reused: built in a temporary directory and renamed into place, so a build that was interrupted
is never used. It needs the package index once; without it the test fails, saying so."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest

from e2e_helpers import REPO, copy_repo

pytestmark = pytest.mark.slow  # a venv of its own and a Snakemake dry run

REQUIREMENTS = REPO / "profiles/kubernetes/requirements.txt"
DRY_RUN = ["-n", "--profile", "profiles/kubernetes", "--configfile", "config/matrix.yaml"]
# config/matrix.yaml: two endpoints x three slot counts, one run of three reps each
TARGETS = {f"emb-{e}-parallel{p}" for e in "ab" for p in (1, 2, 4)}
REPS = {(target, rep) for target in TARGETS for rep in (1, 2, 3)}

# What the kubernetes plugin made of the profile's settings: a dry run says nothing about the
# executor (Snakemake validates them against the plugin, then lists the jobs with its dryrun
# executor), so this asks Snakemake's own parser, with the same arguments, and the plugin.
SETTINGS = """
import sys
from snakemake.cli import parse_args
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
_, args = parse_args(sys.argv[1:])
plugin = ExecutorPluginRegistry().get_plugin(args.executor)
settings = plugin.get_settings(args)
print("executor", plugin.name, type(settings).__module__)
print("namespace", settings.namespace)
print("persistent-volumes", *[volume.unparse() for volume in settings.persistent_volumes])
print("container-image", args.container_image)
print("storage", args.default_storage_provider, args.default_storage_prefix)
"""


def base_python() -> str:
    """The interpreter the tests run on, outside any venv (a venv made from a venv's python
    would point at that venv's symlink)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", "venv", vars={"base": venv, "platbase": venv}))


def pth_text() -> str:
    # addsitedir, not a bare path: the .venv's own .pth files (slotbench.pth) apply too
    return "".join(f"import site; site.addsitedir({p!r})\n" for p in site.getsitepackages())


def usable(venv: Path) -> bool:
    """A finished venv for this interpreter and this .venv (another checkout's .venv, or
    another Python, shares the cache directory but not the venv)."""
    try:
        cfg = (venv / "pyvenv.cfg").read_text()
        pth = (site_packages(venv) / "slotbench-venv.pth").read_text()
    except OSError:
        return False
    home = re.search(r"^home\s*=\s*(.*)$", cfg, re.M)
    return bool(home) and Path(home[1].strip()) == Path(base_python()).parent and pth == pth_text()


def run(cmd: list, what: str, timeout: float, **kwargs) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: no answer in {timeout:.0f} s", pytrace=False)
    if proc.returncode != 0:
        out = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines()
                        if not line.startswith("WARNING: Location"))
        pytest.fail(f"{what} failed (exit {proc.returncode}):\n{out[-4000:]}", pytrace=False)
    return proc


def build(venv: Path) -> None:
    run([base_python(), "-m", "venv", "--without-pip", str(venv)], "python -m venv", 120)
    site_packages(venv).mkdir(parents=True, exist_ok=True)
    (site_packages(venv) / "slotbench-venv.pth").write_text(pth_text())
    python = str(venv / "bin" / "python")
    # pip is the .venv's (the .pth); --ignore-installed: every pin lands in this venv, whatever
    # the .venv holds. pip compiles the modules: with PYTHONDONTWRITEBYTECODE set, nothing else
    # would, and every run would compile the kubernetes client again (seconds)
    install = [python, "-m", "pip", "install", "--no-deps", "--ignore-installed",
               "--disable-pip-version-check", "-r", str(REQUIREMENTS)]
    run(install, f"building {venv}: pip install -r {REQUIREMENTS.relative_to(REPO)}"
        " (it needs the package index, once)", 900)
    # --no-deps installs only the list: what a pinned package needs must be in it or in .venv
    run([python, "-m", "pip", "check"], f"pip check in {venv} (the list and .venv together)", 120)


def kubernetes_venv() -> Path:
    """$SLOTBENCH_CACHE/venvs/kubernetes-<hash of requirements.txt>, built on first use."""
    cache = Path(os.environ.get("SLOTBENCH_CACHE", Path.home() / ".cache" / "slotbench"))
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    venv = cache / "venvs" / f"kubernetes-{digest}"
    if usable(venv):
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    for old in venv.parent.glob(".kubernetes-*"):  # what an interrupted build left, a day on
        if time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{venv.name}-", dir=venv.parent))
    try:
        build(staging)
        if venv.exists() and not usable(venv):  # made for another interpreter or .venv
            stale = venv.with_name(f".{venv.name}-stale-{os.getpid()}")
            venv.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            staging.rename(venv)
        except OSError:  # another session renamed its build into place first
            if not usable(venv):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return venv


def test_kubernetes_profile_dry_run(tmp_path):
    venv = kubernetes_venv()
    python = str(venv / "bin" / "python")
    work = copy_repo(tmp_path / "work")
    prefix = tmp_path / "shared-volume"
    env = os.environ | {
        "SLOTBENCH_STORAGE_PREFIX": str(prefix),
        "SLOTBENCH_CONTAINER_IMAGE": "registry.invalid/slotbench:test",
        "SLOTBENCH_K8S_PVC": "slotbench-test",
        "SLOTBENCH_K8S_NAMESPACE": "slotbench-test-ns",
        "KUBECONFIG": str(tmp_path / "no-kubeconfig"),  # a dry run must not need a cluster
        "SLOTBENCH_CACHE": str(tmp_path / "cache"),
        "PYTHONUNBUFFERED": "1",
    }

    settings = run([python, "-c", SETTINGS, *DRY_RUN], "the profile's settings", 120,
                   cwd=work, env=env)
    assert "Traceback" not in settings.stdout + settings.stderr, settings.stderr[-3000:]
    assert settings.stdout.splitlines() == [
        "executor kubernetes snakemake_executor_plugin_kubernetes",
        "namespace slotbench-test-ns",
        f"persistent-volumes slotbench-test:{prefix}",
        "container-image registry.invalid/slotbench:test",
        f"storage fs {prefix}",
    ], settings.stdout

    proc = subprocess.run([python, "-m", "snakemake", *DRY_RUN], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "Traceback" not in out, out[-6000:]
    # every rep is a job whose output goes to the fs storage, under the shared volume
    reps = re.findall(rf"^rule rep:\n(?:    .*\n)*?    output: {re.escape(str(prefix))}"
                      r"/results/matrix/raw/([^/]+)/run1/rep(\d+)\.json \(send to storage\)",
                      out, re.M)
    assert len(reps) == 18 and {(t, int(r)) for t, r in reps} == REPS, out[-6000:]
    assert re.search(r"^rep\s+18$", out, re.M), out[-3000:]
    # a dry run writes no results, here or on the volume
    assert [p.name for p in (work / "results").iterdir()] == [".gitkeep"] and not prefix.exists()
