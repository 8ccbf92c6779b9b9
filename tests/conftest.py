"""Fixtures shared by the end-to-end modules."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e_helpers import SMOKE, copy_repo, snakemake


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
