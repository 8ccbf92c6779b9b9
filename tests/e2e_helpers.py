"""Run the real pipeline in a throw-away copy of this repository."""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import py_compile
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Iterator

from doubles.wait import wait_for

REPO = Path(__file__).resolve().parents[1]
SMOKE = ["--configfile", "config/smoke.yaml"]
SMOKE_EXPERIMENT = "smoke"  # config/smoke.yaml's experiment (and of configs layered on it)
DEFAULT_EXPERIMENT = "article"  # config/config.yaml's: a config that names none gets it


def results_dir(work: Path, experiment: str = SMOKE_EXPERIMENT) -> Path:
    """An experiment's folder in a work directory, where every output of its config lands:
    ``work/results/<experiment>`` (slotbench.core.experiments.results_dir)."""
    return Path(work) / "results" / experiment


def shipped() -> list[str]:
    """What git would ship (tracked and new, not ignored files), relative to the repository."""
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True, check=True,
    ).stdout.decode().split("\0")
    return [rel for rel in files if rel and (REPO / rel).is_file()]


@cache
def bytecode() -> dict[str, Path]:
    """The package's modules compiled once a session, outside the repository: relative path of
    the cached bytecode -> the compiled file. A user's Python writes these on its first run and
    every rule job after reads them; a test copy starts with them too, where an environment that
    sets PYTHONDONTWRITEBYTECODE would otherwise compile each module again in every job of every
    copy. Python checks each one against its source's mtime and size, which copies keep, so a
    module a test changes is compiled from its new source."""
    folder = Path(tempfile.mkdtemp(prefix="slotbench-bytecode-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    found = {}
    for rel in shipped():
        if rel.startswith("scripts/") and rel.endswith(".py"):
            cached = importlib.util.cache_from_source(rel)
            found[cached] = Path(py_compile.compile(str(REPO / rel), cfile=str(folder / cached),
                                                    doraise=True))
    return found


def copy_repo(dest: Path, git: bool = True) -> Path:
    """Copy what git would ship (tracked and new, not ignored files): no results, no .venv; and
    the package's bytecode (``bytecode``), which git ignores.

    With ``git``, the copy is a git checkout of its own (one commit of what was copied), so the
    fingerprints and archives made in it record a real commit and dirty state, as they would in
    a user's checkout.
    """
    for rel in shipped():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)
    for cached, compiled in bytecode().items():
        (dest / cached).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(compiled, dest / cached)
    if git:
        for args in (["init", "--quiet"], ["add", "-A"],
                     ["-c", "user.name=slotbench tests", "-c", "user.email=tests@slotbench",
                      "commit", "--quiet", "--no-verify", "-m", "test copy"]):
            subprocess.run(["git", "-C", str(dest), *args], check=True, capture_output=True)
    return dest


def interruptible() -> None:
    """A ``preexec_fn`` for a run a test interrupts with SIGINT: the signal's default action in
    the child. A shell without job control starts its background commands with SIGINT ignored
    (``pytest … &``), Python keeps it ignored, and every process below would inherit that: a
    Ctrl-C the test sends would then reach nothing, and the run would finish."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def copy_work(work: Path, dest: Path) -> Path:
    """A copy of a finished work directory, results and Snakemake metadata included (mtimes
    kept, so Snakemake finds it as up to date as the original)."""
    shutil.copytree(work, dest, symlinks=True)
    return dest


def snakemake(workdir: Path, *args: str, cache: Path, timeout: float = 900,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run snakemake in ``workdir``; ``cache`` holds the model, so its path marks our servers.

    ``env`` adds variables (e.g. an API key the config names) to the inherited environment.
    """
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args]
    env = os.environ | {"PYTHONUNBUFFERED": "1", "SLOTBENCH_CACHE": str(cache)} | (env or {})
    return subprocess.run(
        cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env
    )


def jobs_run(proc: subprocess.CompletedProcess) -> list[str]:
    """Names of the rules Snakemake executed, from its log lines ("localrule rep:")."""
    out = proc.stdout + proc.stderr
    return [line.split()[1].rstrip(":") for line in out.splitlines()
            if line.startswith(("localrule ", "rule ")) and line.rstrip().endswith(":")]


def file_states(paths: list[Path]) -> dict[str, tuple[str, int]]:
    return {
        str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in paths
    }


def llama_servers_under(cache_marker: str) -> list[int]:
    """PIDs of llama-server processes whose command line mentions ``cache_marker``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "llama-server" in cmdline and cache_marker in cmdline:
            pids.append(int(proc.name))
    return pids


def processes_mentioning(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose command line mentions ``marker`` (a
    work directory: its Snakemake, its rule scripts, a server started for it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append((int(proc.name), cmdline))
    return found


def wait_for_no_processes(marker: str, timeout: float = 15) -> list[tuple[int, str]]:
    """Wait until no process mentions ``marker``; return those still there at the timeout
    (callers assert it is empty, so a failure shows their command lines)."""
    try:
        wait_for(lambda: not processes_mentioning(marker), timeout,
                 f"no process mentioning {marker}", interval=0.2)
    except AssertionError:
        return processes_mentioning(marker)
    return []


@contextmanager
def small_filesystem(directory: Path, size: str = "120m") -> Iterator[Path | None]:
    """``directory`` on its own small file system (tmpfs) with its files as they were (mtimes
    kept); None where this machine cannot mount one."""
    held = {p.name: (p.read_bytes(), p.stat()) for p in directory.iterdir()}
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        yield None
        return
    try:
        for name, (data, st) in held.items():
            (directory / name).write_bytes(data)
            os.utime(directory / name, ns=(st.st_atime_ns, st.st_mtime_ns))
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(directory: Path, leave_bytes: int = 0) -> Path:
    """Fill ``directory``'s file system until ``leave_bytes`` are left (0: completely)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 4096, 1):
            while leave_bytes == 0 or shutil.disk_usage(directory).free > leave_bytes + size:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
            if leave_bytes:
                break
    finally:
        os.close(fd)
    return filler


def slotbench(workdir: Path, *args: str, cache: Path, timeout: float = 900,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the ``slotbench`` command in ``workdir`` as its venv's launcher runs it (``python -m
    slotbench``), with that checkout's package first on the path; ``cache`` as for snakemake."""
    env = os.environ | {"PYTHONUNBUFFERED": "1", "SLOTBENCH_CACHE": str(cache),
                        "PYTHONPATH": str(Path(workdir) / "scripts")} | (env or {})
    return subprocess.run([sys.executable, "-m", "slotbench", *args], cwd=workdir,
                          capture_output=True, text=True, timeout=timeout, env=env)
