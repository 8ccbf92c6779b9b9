"""Fixtures shared by the end-to-end modules, and how the tests share the machine.

The suite runs on as many workers as the machine has cores (pytest-xdist, ``-n auto`` in
pyproject.toml). Each test holds the machine in one of three ways while it runs (setup, call and
teardown, so a session fixture such as the smoke run below counts too):

- **alone**: nothing else runs beside it. Every ``e2e`` test (the real pipeline on the real
  llama-server) and every test marked ``alone``: what it asserts depends on time, throughput or
  the machine's load (the pacer, the fidelity and open-loop timing tests, the load generator's
  scaling tests), so no other test may grade it.
- **beside others, but with the only real server**: an ``e2e`` test marked ``alone(False)``
  asserts what a real server run does (a rep resumed, a server stopped, a secret kept), never
  a number the machine's speed moves. It may share the machine with tests that start no real
  llama-server, never with another that does (llama.cpp's threads spin while they wait for each
  other, so two servers on two cores would slow each other many times over).
- **beside others**: every other test.

Three lock files carry this between the workers: the machine lock (held exclusively alone,
shared otherwise), the server lock (held by the tests with a real server), and a gate taken
first, which lets a test waiting to run alone in before the next shared one. Every worker takes
them in that order, so they cannot deadlock. Without pytest-xdist there is nothing to share.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from e2e_helpers import SMOKE, copy_repo, snakemake


@dataclass(frozen=True)
class SmokeRun:
    work: Path  # the finished work directory: never changed, tests work on copies
    stdout: str
    stderr: str
    elapsed_s: float
    cache: Path  # the SLOTBENCH_CACHE it ran with, which marks its servers


SMOKE_MEASURED: list[Path] = []  # this worker's smoke run, once it is measured


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
    SMOKE_MEASURED.append(work)
    return SmokeRun(work, proc.stdout, proc.stderr, elapsed, cache)


def machine_kind(item: pytest.Item) -> str:
    """"alone", "server" (a real server beside other tests) or "shared"; see the module doc."""
    mark = item.get_closest_marker("alone")
    alone = bool(mark.args[0]) if mark and mark.args else mark is not None
    if "smoke_template" in item.fixturenames and not SMOKE_MEASURED:
        return "alone"  # this test's setup measures the smoke run the others' numbers come from
    if item.get_closest_marker("e2e") is not None:
        return "alone" if mark is None or alone else "server"
    return "alone" if alone else "shared"


@contextmanager
def machine(kind: str) -> Iterator[None]:
    """Hold the machine for one test, as ``kind`` says (machine_kind)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield
        return
    base = Path(tempfile.gettempdir()) / f"slotbench-tests-{run}"
    with (open(f"{base}.gate", "a") as gate, open(f"{base}.machine", "a") as whole,
          open(f"{base}.server", "a") as server):
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(whole, fcntl.LOCK_EX if kind == "alone" else fcntl.LOCK_SH)
        if kind != "alone":
            fcntl.flock(gate, fcntl.LOCK_UN)
        if kind == "server":
            fcntl.flock(server, fcntl.LOCK_EX)
        yield  # closing the files lets every lock go


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with machine(machine_kind(item)):
        yield


def pytest_collection_modifyitems(config, items):
    """One module's tests run on one worker (its module fixtures are made once), and every test
    that copies the session's smoke run on the same one (the smoke run is measured once)."""
    for item in items:
        group = "smoke" if "smoke_template" in item.fixturenames else item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))
