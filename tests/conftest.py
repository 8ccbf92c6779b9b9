"""Fixtures shared by the end-to-end modules, and the guard that keeps the fast tier fast.

Two tiers: ``pytest -m "not slow"`` runs in about a minute, with no Snakemake and no real
server; plain ``pytest`` runs everything. A test belongs in the slow tier (``@pytest.mark.slow``,
or ``pytestmark`` for its module) when it starts Snakemake, the real llama-server (directly or
through the managed server's supervisor), a SLURM cluster, or takes more than a second or two.
Every ``e2e`` test is slow. A test not marked slow that starts such a process fails, saying so:
the split checks itself in every run, whichever tier is selected.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e_helpers import SMOKE, copy_repo, snakemake

# --------------------------------------------------------------------------------------------
# The fast tier's guard
# --------------------------------------------------------------------------------------------

SLOW_PROGRAMS = {"snakemake": "Snakemake", "llama-server": "the real llama-server"}
WRAPPERS = {"taskset", "chrt", "nice", "ionice", "env", "timeout", "setsid", "stdbuf", "sudo"}
SHELLS = {"sh", "bash", "dash"}
STARTED = pytest.StashKey[list]()
_fast_item: pytest.Item | None = None  # the test running now, when it is not marked slow


def supervisor_module() -> str:
    """The module the managed server's supervisor runs as (python -m …): it starts the real
    server as its own child, out of this process's sight."""
    from slotbench.measure.servers import supervisor as runserver

    return runserver.__name__


def slow_program(args) -> str | None:
    """What a command line starts that belongs to the slow tier, or None: its program (after
    wrappers such as taskset, or as ``python -m``) is snakemake or llama-server, or the managed
    server's supervisor; ``sh -c`` strings are read too."""
    if isinstance(args, (str, bytes)):  # a shell line: each of its commands
        lexer = shlex.shlex(os.fsdecode(args), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        commands: list[list[str]] = [[]]
        for word in lexer:
            if word in (";", "&&", "||", "|", "&"):
                commands.append([])
            else:
                commands[-1].append(word)
        return next(filter(None, map(slow_program, commands)), None)
    argv = [os.fsdecode(a) for a in ([args] if isinstance(args, os.PathLike) else args)]
    if not argv:
        return None
    first = Path(argv[0]).name
    for i, word in enumerate(argv):
        name = Path(word).name
        after_m = i > 0 and argv[i - 1] == "-m"
        if name in SLOW_PROGRAMS and (i == 0 or after_m or first in WRAPPERS):
            return SLOW_PROGRAMS[name]
        if after_m and word == supervisor_module():
            return "the managed server's supervisor (it starts the real llama-server)"
        if i > 0 and argv[i - 1] == "-c" and first in SHELLS:
            return slow_program(word)
    return None


_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self, args, *rest, **kwargs):
    item = _fast_item
    what = slow_program(args) if item is not None else None
    if what is not None:
        line = (os.fsdecode(args) if isinstance(args, (str, bytes, os.PathLike))
                else " ".join(map(os.fsdecode, args)))
        message = (f"{item.nodeid} is not marked slow but starts {what}: {line[:200]}\n"
                   "Mark it @pytest.mark.slow (or its module: pytestmark = pytest.mark.slow); "
                   "the fast tier, pytest -m \"not slow\", runs without Snakemake and the real "
                   "server.")
        item.stash.setdefault(STARTED, []).append(message)
        pytest.fail(message, pytrace=False)  # a BaseException: no `except Exception` hides it
    _popen_init(self, args, *rest, **kwargs)


def pytest_configure(config):
    # every subprocess (subprocess.run, check_output, asyncio's subprocesses) is a Popen
    subprocess.Popen.__init__ = _guarded_popen_init


def pytest_unconfigure(config):
    subprocess.Popen.__init__ = _popen_init


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Every e2e test (the real pipeline on the real server) is slow; before -m selects."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Guard a test not marked slow through its setup, call and teardown."""
    global _fast_item
    _fast_item = None if item.get_closest_marker("slow") else item
    try:
        return (yield)
    finally:
        _fast_item = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A start caught in another thread (where its failure does not reach the test) still
    fails the test."""
    report = yield
    started = item.stash.get(STARTED, [])
    if started and report.passed and call.when == "call":
        report.outcome = "failed"
        report.longrepr = "\n".join(started)
    return report


# --------------------------------------------------------------------------------------------
# The session's one smoke run
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmokeRun:
    work: Path  # the finished work directory: never changed, tests work on copies
    stdout: str
    stderr: str
    elapsed_s: float
    cache: Path  # the SLOTBENCH_CACHE it ran with, which marks its servers


@pytest.fixture(scope="session")
def smoke_template(tmp_path_factory) -> SmokeRun:
    """One real smoke run (config/smoke.yaml on the embedded llama-server) for the whole
    session. Modules that build on a finished run copy it (e2e_helpers.copy_work), so the
    suite measures the plain smoke run once."""
    cache = tmp_path_factory.mktemp("smoke-cache")
    work = copy_repo(tmp_path_factory.mktemp("smoke-template"))
    started = time.monotonic()
    proc = snakemake(work, *SMOKE, cache=cache)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return SmokeRun(work, proc.stdout, proc.stderr, elapsed, cache)
