"""What a killed Snakemake leaves behind, settled before the next run looks (slotbench.workflow.smkstate).

The records are made the way Snakemake makes them (snakemake.persistence); the round trip
through record_path and marked_incomplete is checked against Snakemake's own code."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from slotbench.measure.rawfiles import write_raw_atomic
from slotbench.workflow import smkstate

RAW = "results/smoke/raw/t/run1/rep2.json"  # in its experiment's folder


def mark(work: Path, path: str) -> Path:
    record = Path(smkstate.record_path(work / ".snakemake" / "incomplete", path))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("")
    return record


def lock(work: Path, host: str | None = None) -> None:
    """The lock a Snakemake takes, and the host slotbench recorded when it started."""
    locks = work / ".snakemake" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "0.output.lock").write_text("results/x\n")
    (work / ".snakemake" / "slotbench-host").write_text(f"{host or socket.gethostname()}\n")


def test_record_paths_are_snakemakes_own(tmp_path):
    from snakemake.persistence.file import FilePersistence

    snakemake_side = SimpleNamespace(_fetch_max_len=lambda subject: 255)
    for path in (RAW, "results/" + "x" * 400 + ".json"):
        ours = smkstate.record_path(tmp_path / "incomplete", path)
        theirs = FilePersistence._record_path(snakemake_side, str(tmp_path / "incomplete"), path)
        assert ours == theirs
    long = "results/" + "x" * 400 + ".json"
    mark(tmp_path, long)
    assert long in smkstate.marked_incomplete(tmp_path)


def test_a_complete_raw_file_marked_incomplete_is_kept(tmp_path):
    write_raw_atomic(tmp_path / RAW, {"rep": 2})
    before = (tmp_path / RAW).read_bytes()
    mark(tmp_path, RAW)
    mark(tmp_path, RAW + ".sha256")
    said = smkstate.settle(tmp_path)
    assert said == [f"slotbench: kept {RAW}: the rep was measured completely before Snakemake "
                    "stopped"]
    assert (tmp_path / RAW).read_bytes() == before
    assert smkstate.marked_incomplete(tmp_path) == {}


@pytest.mark.parametrize("raw", [RAW, "results/raw/t/run1/rep2.json"],
                         ids=["experiment", "before experiments had their own folders"])
def test_a_raw_file_that_does_not_match_its_hash_is_removed_with_it(tmp_path, raw):
    write_raw_atomic(tmp_path / raw, {"rep": 2})
    (tmp_path / raw).write_text('{"rep": 2, "cells": [')
    mark(tmp_path, raw)
    said = smkstate.settle(tmp_path)
    assert "it was removed and that rep will be measured again" in said[0]
    assert not (tmp_path / raw).exists() and not (tmp_path / f"{raw}.sha256").exists()


@pytest.mark.parametrize("folder", ["results/smoke", "results/a.b-1"])
def test_derived_outputs_marked_incomplete_are_deleted_and_plans_kept(tmp_path, folder):
    derived, kept = f"{folder}/cells.parquet", [f"{folder}/plan/t/run1.json",
                                                f"{folder}/fingerprint/t/run1.json"]
    for path in (derived, *kept):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
        mark(tmp_path, path)
    smkstate.settle(tmp_path)
    assert not (tmp_path / derived).exists()
    assert all((tmp_path / path).exists() for path in kept)
    assert smkstate.marked_incomplete(tmp_path) == {}


def test_the_lock_of_a_snakemake_that_is_gone_is_removed_and_then_its_marks_settled(tmp_path):
    lock(tmp_path)
    mark(tmp_path, "results/cells.parquet")
    said = smkstate.settle(tmp_path)
    assert said == ["slotbench: removed the lock left by a Snakemake that is no longer running "
                    "(it was killed or its machine stopped)"]
    assert not smkstate.locked(tmp_path)
    assert smkstate.marked_incomplete(tmp_path) == {}


@pytest.fixture
def snakemake_at_work(tmp_path):
    """Another Snakemake (any process whose command line says so) working in tmp_path."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "snakemake"],
                            cwd=tmp_path)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("owner", ["live", "other host", "unknown host"])
def test_a_lock_that_may_be_live_is_left_and_nothing_is_touched(tmp_path, owner, request):
    lock(tmp_path, host="another-machine" if owner == "other host" else None)
    if owner == "live":
        proc = request.getfixturevalue("snakemake_at_work")
        assert smkstate.others_at_work(tmp_path) == [proc.pid]
    elif owner == "unknown host":
        (tmp_path / ".snakemake/slotbench-host").unlink()
    (tmp_path / "results").mkdir()
    (tmp_path / "results/cells.parquet").write_text("being written")
    mark(tmp_path, "results/cells.parquet")
    assert smkstate.settle(tmp_path) == []
    assert smkstate.locked(tmp_path)
    assert (tmp_path / "results/cells.parquet").exists()
    assert "results/cells.parquet" in smkstate.marked_incomplete(tmp_path)


def test_the_schedulers_pending_timer_no_longer_holds_the_exit():
    """Snakemake's scheduler leaves a re-evaluation timer pending when the workflow ends; the
    interpreter waits for it at exit. onsuccess/onerror cancel it: here a 60 s timer."""
    code = ("import threading, time\n"
            "from slotbench.workflow import smkstate\n"
            "fired = []\n"
            "threading.Timer(60, fired.append, (1,)).start()\n"
            "print(smkstate.drop_pending_timers(), smkstate.drop_pending_timers())\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "0"]
    assert time.monotonic() - t0 < 30
