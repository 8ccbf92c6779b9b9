"""A target on another machine: every host-side row says which machine it describes.

slotbench's samplers read the machine they run on, the client host. For a managed target or a
loopback URL that is the server's machine too, and the thermal, host-contention and CPU-governor
rows say "this machine (client and server)"; for any other URL they are labelled as the client
host's, and no row speaks of the server's temperature or load (slotbench.core.hosts).

The unit tests here take each row kind in both cases. The end-to-end test runs the real
pipeline inside a network namespace of its own, where 198.51.100.7 (TEST-NET-2, not a loopback
address) is an address of the namespace's loopback interface and the scripted llama-server
listens on it: a target whose URL names another machine, answered by a local double.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import synthetic as syn
from doubles.fault_server import FaultServer
from e2e_helpers import SMOKE_EXPERIMENT, copy_repo, results_dir
from slotbench.core import hosts
from slotbench.measure import hostload, thermal
from slotbench.measure.backends import make_backend
from slotbench.measure.fingerprint import (
    current_fields,
    described_machine,
    fingerprint,
    fingerprint_shares_host,
)
from slotbench.measure.hostload import LinuxHostLoad
from slotbench.measure.targets import Connection
from slotbench.report.sections import machines_line
from slotbench.workflow.config import resolve

ADDRESS = "198.51.100.7"  # TEST-NET-2 (RFC 5737): no real machine's, and not loopback
REMOTE_URL = f"http://{ADDRESS}:8080"
LOCAL_TITLES = {"thermal": "Thermal throttling (this machine: client and server)",
                "host": "Host contention (other processes, steal; this machine: client and server)"}
CLIENT_TITLES = {"thermal": "Thermal throttling (client host)",
                 "host": "Host contention (other processes, steal; client host)"}


def result(work: Path, *parts: str) -> Path:
    """A file of the finished smoke-sized run's results (its experiment's folder)."""
    return results_dir(work, SMOKE_EXPERIMENT).joinpath(*parts)


# --- which machine a URL names ------------------------------------------------------------------


@pytest.mark.parametrize("url, here", [
    ("http://127.0.0.1:8080", True), ("http://127.3.4.5:8080", True), ("http://[::1]:8080", True),
    ("http://localhost:11434", True), ("http://LOCALHOST.:11434", True),
    ("http://[::ffff:127.0.0.1]:80", True),
    (REMOTE_URL, False), ("http://10.0.0.2:8000", False), ("http://gpu-box.example:8080", False),
    ("http://[2001:db8::1]:8080", False), ("http://0.0.0.0:8080", False), ("nonsense", False),
])
def test_a_loopback_url_is_this_machine_and_any_other_is_another(url, here):
    assert hosts.shares_client_host({"managed": False, "url": url}) is here


def test_a_managed_server_runs_on_this_machine():
    assert hosts.shares_client_host({"managed": True})


def test_old_and_new_fingerprints_say_where_the_server_ran():
    assert fingerprint_shares_host(syn.fingerprint()) is True  # a managed target
    old_remote = {"host": {"cpu_model": "x"},
                  "config": {"target": {"managed": False, "url": REMOTE_URL}}}
    assert fingerprint_shares_host(old_remote) is False
    assert fingerprint_shares_host({"server_host": {"same_as_client": False}}) is False
    assert fingerprint_shares_host({"target": "t"}) is None
    assert described_machine([syn.fingerprint(), old_remote]) == hosts.CLIENT_HOST
    assert described_machine([syn.fingerprint()]) == hosts.SHARED
    assert current_fields(old_remote)["client_host.cpu_model"] == "x"
    # the report's fingerprint section shows an old fingerprint's keys as they are, and says whose
    assert machines_line(old_remote).startswith(
        "Machines: host is the client host, the machine slotbench ran on. The server ran on "
        "another machine")
    assert "so client_host describes both" in machines_line(syn.fingerprint())


# --- host load: no server CPU on this machine for a server elsewhere -----------------------------


def write_proc(root: Path, cpu: list[int], ticks: dict[int, int]) -> None:
    tree = {1: ("init", 0), 200: ("python", 1), 300: ("llama-server", 1), 400: ("burner", 1)}
    proc = root / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "stat").write_text("cpu  " + " ".join(map(str, cpu)) + "\ncpu0 0 0 0 0\n")
    (proc / "loadavg").write_text("1.0 0.4 0.3 1/100 500\n")
    for pid, (name, ppid) in tree.items():
        (proc / str(pid)).mkdir(exist_ok=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks.get(pid, 0)), "0"] + ["0"] * 20
        (proc / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")


def test_a_server_on_another_machine_has_no_cpu_on_this_one(tmp_path, monkeypatch):
    conn = SimpleNamespace(server=None, target={"managed": False, "url": REMOTE_URL})
    assert hostload.server_pids_of(conn) is None
    local = SimpleNamespace(server=None, target={"managed": False, "url": "http://127.0.0.1:1"})
    assert callable(hostload.server_pids_of(local))
    clock = iter([100.0, 101.0])
    monkeypatch.setattr(hostload.time, "monotonic", lambda: next(clock))
    src = LinuxHostLoad(server_pids=None, root=tmp_path, own_pid=200)
    src.ticks = 100
    write_proc(tmp_path, [0] * 8, {})
    assert src.sample() == []
    write_proc(tmp_path, [100, 0, 0, 100, 0, 0, 0, 0], {200: 10, 300: 50, 400: 40})
    (row,) = src.sample()
    # a llama-server that happens to run here is not the target's: it is another process
    assert row["server_cores"] is None and row["other_cores"] == pytest.approx(0.9)
    assert row["top"] == "llama-server=0.50;burner=0.40"


# --- the checks and the report: each row kind, local and remote ---------------------------------


def remote_fingerprint() -> dict:
    return syn.fingerprint(
        server_host={"machine": "another machine", "same_as_client": False},
        server={"managed": False, "url": REMOTE_URL},
        config={"target": {"name": syn.TARGET, "backend": "llamacpp", "managed": False,
                           "url": REMOTE_URL}})


def host_samples(remote: bool, busy_rep: int | None = None) -> pd.DataFrame:
    rows = []
    for rep in range(1, 6):
        other = 1.0 if rep == busy_rep else 0.02
        for i in range(6):
            rows.append({"target": syn.TARGET, "run": syn.RUN, "rep": rep, "t_s": float(i),
                         "t_unix": syn.T0 + rep * 100 + i, "source": "host", "cpus": 2,
                         "busy_cores": other + 0.03 + (0 if remote else 1.5),
                         "steal_cores": 0.0, "iowait_cores": 0.0, "load1": 1.0,
                         "server_cores": None if remote else 1.5, "harness_cores": 0.03,
                         "other_cores": other,
                         "top": f"burner={other:.2f}" if rep == busy_rep else "sshd=0.02"})
    return pd.DataFrame(rows)


def thermal_samples(throttled_rep: int | None = None) -> pd.DataFrame:
    rows = []
    for rep in range(1, 6):
        for i in range(6):
            hot = rep == throttled_rep and i >= 3
            rows.append({"target": syn.TARGET, "run": syn.RUN, "rep": rep, "t_s": float(i),
                         "t_unix": syn.T0 + rep * 100 + i} | thermal.reading(
                "linux", "cpu0", temp_c=60.0, freq_mhz=2400.0, throttled=hot,
                detail="throttled: core_throttle_count +2" if hot else None))
    return thermal.thermal_frame(rows)


@functools.cache
def verdicts(remote: bool, busy: bool = False) -> dict:
    fp = remote_fingerprint() if remote else syn.fingerprint()
    data = syn.run(syn.make_requests(), fingerprints=[fp],
                   host=host_samples(remote, 3 if busy else None),
                   thermal=thermal_samples(2 if busy else None))
    return {v["trap"]: v for v in data.verdicts}


@pytest.mark.parametrize("trap", ["thermal", "host"])
def test_a_local_targets_rows_are_this_machines(trap):
    quiet, busy = verdicts(remote=False)[trap], verdicts(remote=False, busy=True)[trap]
    for v in (quiet, busy):
        assert v["title"] == LOCAL_TITLES[trap] and v["assessable"]
        assert v["evidence"]["machine"] == hosts.SHARED
        assert "this machine (client and server)" in v["summary"] + v["sentence"]
        assert "another machine" not in v["sentence"]
    assert busy["fired"] and not quiet["fired"]


@pytest.mark.parametrize("trap", ["thermal", "host"])
def test_a_remote_targets_rows_are_the_client_hosts_and_still_judge_it(trap):
    quiet, busy = verdicts(remote=True)[trap], verdicts(remote=True, busy=True)[trap]
    for v in (quiet, busy):
        assert v["title"] == CLIENT_TITLES[trap] and v["assessable"]
        assert v["evidence"]["machine"] == hosts.CLIENT_HOST
        assert "the client host" in v["summary"] + v["sentence"]
        assert "this machine (client and server)" not in v["sentence"]
        assert "reported neither its temperature nor its load" in v["sentence"]
    assert busy["fired"] and not quiet["fired"]  # a hot or busy client still counts


def test_a_fingerprint_from_before_server_host_keeps_a_local_rows_title_not_a_remote_ones():
    """An old local fingerprint keeps the bare titles its archived report has (an archive
    re-renders to the same tables); an old remote one is the client host's all the same."""
    old_local = syn.fingerprint()
    del old_local["server_host"]
    old_remote = remote_fingerprint()
    del old_remote["server_host"]
    for fp, titles, machine in ((old_local, None, hosts.SHARED),
                                (old_remote, CLIENT_TITLES, hosts.CLIENT_HOST)):
        data = syn.run(syn.make_requests(), fingerprints=[fp], host=host_samples(False),
                       thermal=thermal_samples())
        for v in (v for v in data.verdicts if v["trap"] in ("thermal", "host")):
            bare = {"thermal": "Thermal throttling",
                    "host": "Host contention (other processes, steal)"}[v["trap"]]
            assert v["title"] == (titles[v["trap"]] if titles else bare)
            assert v["evidence"]["machine"] == machine


def test_a_remote_target_without_samples_is_not_assessable_and_says_whose():
    fp = remote_fingerprint()
    data = syn.run(syn.make_requests(), fingerprints=[fp], host=None,
                   thermal=thermal.thermal_frame([]))
    by_trap = {v["trap"]: v for v in data.verdicts}
    for trap in ("thermal", "host"):
        v = by_trap[trap]
        assert v["verdict"] == "not assessable" and not v["assessable"] and not v["fired"]
        assert v["title"] == CLIENT_TITLES[trap] and "client host" in v["summary"]


@pytest.fixture(scope="module")
def reports():
    """The synthetic run's report with the target on this machine and on another one, a busy
    client in both (one render each)."""
    out = {}
    for remote in (False, True):
        fp = remote_fingerprint() if remote else syn.fingerprint()
        fp["client_host"]["cpu_governor"] = {"governor": "performance"}
        md, page, _, _ = syn.rendered(syn.make_requests(), fingerprints=[fp],
                                      host=host_samples(remote, 3),
                                      thermal=thermal_samples(2))
        out["remote" if remote else "local"] = (md, page)
    return out


@pytest.mark.slow  # two synthetic runs rendered through the real report
def test_the_local_report_labels_every_host_row_this_machine(reports):
    md, page = reports["local"]
    for title in LOCAL_TITLES.values():
        assert syn.trap_row(md, title)[1] == "yes"
    assert "#### Host contention (this machine: client and server)" in md
    assert "#### Thermal state (this machine: client and server)" in md
    assert "| server CPU |" in md  # the server's processes are on this machine
    assert "| client_host.cpu_governor.governor | performance |" in md
    assert ("Machines: this machine (client and server): the server ran on the machine "
            "slotbench ran on") in md
    assert "client host" not in md.lower().replace("client_host", "")


@pytest.mark.slow  # two synthetic runs rendered through the real report
def test_the_remote_report_labels_the_client_and_says_nothing_of_the_server_host(reports):
    md, page = reports["remote"]
    for title in CLIENT_TITLES.values():
        assert syn.trap_row(md, title)[1] == "yes"
        assert title in page
    assert "#### Host contention (client host)" in md and "#### Thermal state (client host)" in md
    assert "Warning: the client host reported throttling or thermal pressure" in md
    assert "of the CPU of the client host during 1 rep" in md
    assert "| client_host.cpu_governor.governor | performance |" in md
    assert "Machines: client_host is the client host, the machine slotbench ran on. The server " \
           "ran on another machine" in md
    for text in (md, page):
        assert "server CPU" not in text and "server host" not in text.lower()
        assert "this machine (client and server)" not in text
        assert "this machine: client and server" not in text


# --- the fingerprint: the client host apart from what the server reported ---------------------


def test_the_fingerprint_separates_the_client_host_from_the_server(tmp_path):
    """A target whose URL names another machine, its backend answered by the scripted
    llama-server (a seam: conn.target is what the fingerprint judges)."""
    with FaultServer(slots=3, build="recent") as server:
        for url, shared in ((REMOTE_URL, False), (server.url, True)):
            target = resolve({"targets": [{"name": "box", "backend": "llamacpp",
                                           "url": url}]})["targets"][0]
            conn = Connection(target, make_backend(target, server.url, 10), None)
            fp = fingerprint(conn, "box", "run1", {"target": target})
            assert "host" not in fp and fp["client_host"]["cores"] == os.cpu_count()
            assert {"cpu_model", "kernel", "cpu_governor"} <= set(fp["client_host"])
            assert fp["server_host"]["same_as_client"] is shared
            assert fp["server_host"]["machine"] == (hosts.SHARED if shared else
                                                    "another machine")
            assert fp["server"]["props"]["total_slots"] == 3  # what the server reported
            assert "cpus" not in fp["server"]  # this process's cores are not the server's


# --- end to end: the real pipeline against a server at a non-loopback address -------------------

INSIDE = """
import os, subprocess, sys
sys.path[:0] = [{tests!r}]
from doubles.fault_server import FaultServer

server = FaultServer(slots=4, token_s=0.01)  # a rep of a few seconds: samples to judge
server.host = {address!r}
server.start()
try:
    open("remote.yaml", "w").write(
        "targets:\\n  - {{name: remote, backend: llamacpp, url: '" + server.url + "'}}\\n"
        "thermal: {{interval_s: 0.25}}\\n")
    # the rule scripts import this copy's package, not an installed one
    env = os.environ | {{"PYTHONPATH": os.path.abspath("scripts")}}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile",
                           "config/smoke.yaml", "remote.yaml"], capture_output=True, text=True,
                          timeout=900, env=env)
    print(proc.stdout[-3000:] + proc.stderr[-5000:])
    sys.exit(proc.returncode)
finally:
    server.stop()
"""


def namespace_tools() -> str | None:
    """Why a network namespace cannot be made here, or None."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    return None


@pytest.fixture(scope="module")
def remote_run(tmp_path_factory):
    missing = namespace_tools()
    if missing:
        pytest.skip(f"a network namespace needs unshare and ip: {missing}")
    work = copy_repo(tmp_path_factory.mktemp("remote") / "work")
    setup = (f"ip link set lo up && ip addr add {ADDRESS}/32 dev lo && exec {sys.executable} -c "
             + shlex.quote(textwrap.dedent(INSIDE.format(tests=str(work / "tests"),
                                                        address=ADDRESS))))
    proc = subprocess.run(["unshare", "-rn", "sh", "-c", setup], cwd=work, capture_output=True,
                          text=True, timeout=1200,
                          env=os.environ | {"PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return work


@pytest.mark.slow  # the real pipeline (Snakemake) against the scripted llama-server
def test_a_server_at_a_non_loopback_address_gets_client_host_rows_only(remote_run):
    work = remote_run
    (fp_path,) = result(work, "fingerprint", "remote").glob("*.json")
    fp = json.loads(fp_path.read_text())
    assert fp["server_host"]["same_as_client"] is False and ADDRESS in fp["server"]["url"]
    samples = pd.read_parquet(result(work, "host.parquet"))
    assert len(samples) and samples["server_cores"].isna().all()
    md = result(work, "report.md").read_text()
    page = result(work, "report.html").read_text()
    for title in CLIENT_TITLES.values():
        assert syn.trap_row(md, title)[1] in ("yes", "no", "not assessable")
        assert title in page
    for text in (md, page):
        assert "server CPU" not in text and "server host" not in text.lower()
        assert "this machine (client and server)" not in text
        assert "this machine: client and server" not in text
        assert "Thermal throttling |" not in text and "Thermal throttling<" not in text
    assert "| client_host.cpu_model |" in md and "| server_host.machine | another machine |" in md
    for trap in ("thermal", "host"):
        (record,) = json.loads(result(work, "checks", f"{trap}.json").read_text())
        assert record["evidence"]["machine"] == hosts.CLIENT_HOST
        if trap == "host":  # the client host was sampled and judged
            assert record["assessable"] and record["evidence"]["rows"]
            assert all(r["server_cores"] is None for r in record["evidence"]["rows"])
