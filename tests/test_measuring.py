"""The measuring lock (slotbench.workflow.measuring): two experiments, run by two Snakemakes at
once, never measure one server at the same time. Two processes stand in for their jobs; no
server is needed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from doubles.wait import wait_for
from slotbench.workflow import measuring

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
LAN_A = {"name": "a", "backend": "llamacpp", "url": "http://10.1.2.3:8080"}
LAN_B = {"name": "b", "backend": "llamacpp", "url": "http://10.1.2.4:8080"}
# a job that takes the locks, says so in a file, holds them until told to let go
JOB = """
import json, sys, time
from pathlib import Path
from slotbench.workflow import measuring
target, job, locks, flag = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
with measuring.held(target, job, sys.stderr, Path(locks), cpus=[0, 1]):
    Path(flag + ".held").write_text(str(time.monotonic()))
    while not Path(flag + ".release").exists():
        time.sleep(0.01)
Path(flag + ".done").write_text(str(time.monotonic()))
"""


def start(target: dict, job: dict, locks: Path, flag: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", JOB, json.dumps(target), json.dumps(job), str(locks), str(flag)],
        stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(SCRIPTS)})


def test_the_locks_are_the_endpoint_resources_in_one_order():
    managed = {"name": "m", "backend": "llamacpp", "managed": True, "server": {}}
    assert measuring.keys(managed, [1, 0]) == ["cpu0", "cpu1"]
    pinned = managed | {"server": {"cpus": [1]}}
    assert measuring.keys(pinned, [0, 1]) == ["cpu1"]
    assert measuring.keys(LAN_A, [0, 1]) == ["endpoint_10_1_2_3_8080"]
    local = LAN_A | {"url": "http://127.0.0.1:8080"}  # on this machine: its CPUs too
    assert measuring.keys(local, [0, 1]) == ["cpu0", "cpu1", "endpoint_127_0_0_1_8080"]


def test_a_second_job_on_the_same_server_waits_names_the_holder_then_measures(tmp_path):
    locks = tmp_path / "results/.measuring"
    first = start(LAN_A, {"experiment": "smoke", "target": "a", "run": "run1", "rep": 2},
                  locks, tmp_path / "first")
    second = None
    try:
        wait_for(lambda: (tmp_path / "first.held").exists(), 20, "the first job to hold the lock")
        holder = json.loads((locks / "endpoint_10_1_2_3_8080.lock").read_text())
        assert holder | {"pid": 0, "host": ""} == {"experiment": "smoke", "target": "a",
                                                   "run": "run1", "rep": 2, "pid": 0, "host": ""}
        assert holder["pid"] == first.pid
        second = start(LAN_A, {"experiment": "other", "target": "a", "run": "run1", "rep": 1},
                       locks, tmp_path / "second")
        time.sleep(1.0)  # long enough to have measured, had it not waited
        assert not (tmp_path / "second.held").exists(), "two jobs measured one server at once"
        assert second.poll() is None
        released = time.monotonic()  # one clock for every process of this machine
        (tmp_path / "first.release").write_text("")
        wait_for(lambda: (tmp_path / "second.held").exists(), 20, "the second job to measure")
        first.wait(10)
        assert float((tmp_path / "second.held").read_text()) > released  # once the first let go
        (tmp_path / "second.release").write_text("")
        second.wait(10)
        said = second.stderr.read().strip().splitlines()
        assert len(said) == 1, said  # one line, naming who measured
        assert said[0].startswith("slotbench: waiting to measure target a: experiment smoke, "
                                  f"target a, run run1, rep 2 (PID {first.pid} on ")
        assert said[0].endswith(f"is measuring on the same server "
                                f"({locks / 'endpoint_10_1_2_3_8080.lock'})")
        assert first.returncode == 0 and second.returncode == 0
        assert (locks / "endpoint_10_1_2_3_8080.lock").read_text() == ""  # nobody's now
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_jobs_on_different_servers_measure_side_by_side(tmp_path):
    locks = tmp_path / "results/.measuring"
    first = start(LAN_A, {"experiment": "smoke", "target": "a", "run": "run1", "rep": 1},
                  locks, tmp_path / "first")
    second = start(LAN_B, {"experiment": "other", "target": "b", "run": "run1", "rep": 1},
                   locks, tmp_path / "second")
    try:
        wait_for(lambda: (tmp_path / "first.held").exists()
                 and (tmp_path / "second.held").exists(), 20, "both jobs to measure at once")
    finally:
        for flag in ("first", "second"):
            (tmp_path / f"{flag}.release").write_text("")
        for proc in (first, second):
            proc.wait(10)
    assert second.stderr.read() == "" and first.stderr.read() == ""
