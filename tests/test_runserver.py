"""The run's server (slotbench.measure.servers.supervisor): reused only by the Snakemake that started it, never
outliving it, and never mistaking another process for its own.

The end-to-end tests (test_e2e.py, test_e2e_reruns.py) drive it through Snakemake on the real
server; here its supervisor is started directly on the real llama-server, with a stand-in
process as the owning Snakemake, so that the owner can be killed on cue.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from doubles.wait import wait_for
from slotbench.measure.servers import supervisor as runserver
from slotbench.measure.servers.llamacpp import ServerError
from slotbench.measure.servers.supervisor import alive, run_server, stop

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
RESULTS = "results/smoke"  # the experiment's folder, as a job of config/smoke.yaml names it
TARGET = {"name": "embedded", "backend": "llamacpp", "managed": True,
          "server": {"parallel": 2, "ctx_size": 1024, "threads": 1, "startup_timeout_s": 120}}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(SCRIPTS))
    return tmp_path


@pytest.fixture
def owner():
    """A stand-in for the Snakemake that runs the jobs."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_state_naming_someone_elses_processes_stops_nothing(workdir):
    """A PID in a stale state file may belong to an unrelated process by now: it is left alone,
    and so is a state file another machine wrote (a cluster node)."""
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        for host in (socket.gethostname(), "another-node"):
            path = workdir / f"{host}.json"
            path.write_text(json.dumps({"host": host, "supervisor": bystander.pid,
                                        "pid": bystander.pid, "binary": "/x/llama-server"}))
            stop(path, wait_s=0.5)
            assert not path.exists()
            assert bystander.poll() is None, "an unrelated process was killed"
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.slow  # the real llama-server, through its supervisor
def test_a_server_is_reused_by_its_own_snakemake_only_and_dies_with_it(workdir, owner):
    """Two jobs of one run get one server process; another owner's job starts its own; and
    when the owning Snakemake is killed (-9), its supervisor and server go within seconds."""
    log = workdir / "job.server.log"
    with run_server(TARGET, "run1", log, owner.pid, RESULTS) as first:
        pid, supervisor = first.pid, first.state["supervisor"]
        assert first.alive() and first.describe()["jobs_before"] == 0
    assert "started the run's server: PID" in log.read_text()
    with run_server(TARGET, "run1", log, owner.pid, RESULTS) as second:
        assert second.pid == pid and second.describe()["jobs_before"] == 1
    assert "reused the run's server: PID" in log.read_text()
    assert (workdir / RESULTS / "logs/server/embedded/run1.log").stat().st_size > 0
    # another experiment's run1 is another run: a server, a state and a log of its own
    with run_server(TARGET, "run1", log, owner.pid, "results/other") as theirs:
        # one idle server at a time on these CPUs: the smoke run's was stopped for it
        assert theirs.pid != pid and not alive(pid)
    assert (workdir / "results/other/logs/server/embedded/run1.log").is_file()
    assert runserver._state_path("embedded", "run1", "results/other").is_file()

    other = subprocess.Popen(["sleep", "600"])
    try:
        with run_server(TARGET, "run1", log, other.pid, RESULTS) as third:
            assert third.pid != pid  # a new owner never inherits a server
            pid, supervisor = third.pid, third.state["supervisor"]
        assert not alive(first.pid)
        other.send_signal(signal.SIGKILL)
        other.wait()
        wait_for(lambda: not alive(pid) and not alive(supervisor), 20,
                 "the server and its supervisor to go with their owner (SIGKILL)")
        assert not runserver._state_path("embedded", "run1", RESULTS).exists()
    finally:
        if other.poll() is None:
            other.kill()


@pytest.mark.slow  # the real llama-server, through its supervisor
def test_a_job_that_fails_stops_the_server_and_the_next_starts_a_fresh_one(workdir, owner):
    log = workdir / "job.server.log"
    with pytest.raises(RuntimeError):
        with run_server(TARGET, "run1", log, owner.pid, RESULTS) as server:
            pid = server.pid
            raise RuntimeError("a request failed")
    assert not alive(pid)
    with run_server(TARGET, "run1", log, owner.pid, RESULTS) as server:
        assert server.pid != pid and server.describe()["jobs_before"] == 0
        # a job killed outright (SIGKILL) cannot release the server: it stays marked in use
        state = json.loads(runserver._state_path("embedded", "run1", RESULTS).read_text())
        assert state["holder"] == os.getpid()
    abandoned = runserver._state_path("embedded", "run1", RESULTS)
    abandoned.write_text(json.dumps(json.loads(abandoned.read_text()) | {"holder": 1}))
    with run_server(TARGET, "run1", log, owner.pid, RESULTS) as fresh:
        assert fresh.pid != server.pid and not alive(server.pid)
    assert runserver.stop_owned(owner.pid) == ["embedded/run1"]
    assert not alive(fresh.pid)


@pytest.mark.slow  # the real llama-server, through its supervisor
def test_a_server_that_cannot_start_is_named_with_its_log(workdir, owner):
    bad = TARGET | {"server": TARGET["server"] | {"threads": "not-a-number"}}
    with pytest.raises(ServerError, match="llama-server exited with code"):
        with run_server(bad, "run1", workdir / "job.server.log", owner.pid, RESULTS):
            pass
    assert not runserver._state_path("embedded", "run1", RESULTS).exists()
    assert os.listdir(workdir / ".snakemake/slotbench/servers/smoke/embedded") == ["run1.lock"]
