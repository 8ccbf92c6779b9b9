"""Host contention: the sampler splits the machine's CPU into the server, the harness and
everything else by name, and the check names the reps that shared the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import synthetic as syn
from slotbench.checks import host
from slotbench.measure import hostload
from slotbench.measure.hostload import LinuxHostLoad, PsHostLoad

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
LOCAL_TITLE = "Host contention (other processes, steal; this machine: client and server)"
# pid: (name, parent)
TREE = {1: ("init", 0), 100: ("snakemake", 1), 200: ("python", 100), 300: ("llama-server", 200),
        301: ("llama-server", 300), 400: ("burner", 1), 500: ("sshd", 1)}


def write_proc(root, cpu: list[int], ticks: dict[int, int], load1=0.5):
    proc = root / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "stat").write_text("cpu  " + " ".join(map(str, cpu)) + "\ncpu0 0 0 0 0\n")
    (proc / "loadavg").write_text(f"{load1} 0.4 0.3 1/100 500\n")
    for pid, (name, ppid) in TREE.items():
        d = proc / str(pid)
        d.mkdir(exist_ok=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks.get(pid, 0)), "0"] + ["0"] * 20
        (d / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")


def test_linux_splits_cpu_into_server_harness_and_others(tmp_path, monkeypatch):
    clock = iter([100.0, 101.0])
    monkeypatch.setattr(hostload.time, "monotonic", lambda: next(clock))
    src = LinuxHostLoad(server_pids=lambda: {300}, root=tmp_path, own_pid=200)
    src.ticks = 100
    # user nice system idle iowait irq softirq steal
    write_proc(tmp_path, [0, 0, 0, 0, 0, 0, 0, 0], {})
    assert src.sample() == []  # the baseline
    # in one second: 170 busy ticks + 10 steal + 20 idle of 2 cores' 200
    write_proc(tmp_path, [150, 0, 20, 20, 0, 0, 0, 10],
               {300: 60, 301: 40, 200: 5, 100: 1, 400: 60, 500: 2}, load1=2.5)
    (row,) = src.sample()
    assert row["busy_cores"] == pytest.approx(1.7) and row["steal_cores"] == pytest.approx(0.1)
    assert row["server_cores"] == pytest.approx(1.0)  # the server and its child
    assert row["harness_cores"] == pytest.approx(0.06)  # the rep job and snakemake above it
    assert row["other_cores"] == pytest.approx(1.7 - 1.0 - 0.06)
    assert row["top"] == "burner=0.60;sshd=0.02" and row["load1"] == 2.5


def test_ps_source_reads_percent_cpu_by_process():
    out = "\n".join(["    1     0   0.0 /sbin/launchd", "  100     1   1.0 snakemake",
                     "  200   100   2.0 python", "  300   200 150.0 /opt/bin/llama-server",
                     "  400     1  95.0 /usr/bin/yes"])
    (row,) = PsHostLoad(server_pids=lambda: {300}, run=lambda cmd: out, own_pid=200).sample()
    assert row["server_cores"] == pytest.approx(1.5) and row["harness_cores"] == pytest.approx(0.03)
    assert row["other_cores"] == pytest.approx(0.95) and row["top"] == "yes=0.95"
    assert row["steal_cores"] is None


def test_host_source_by_platform():
    assert hostload.host_source(platform="win32") is None
    assert isinstance(hostload.host_source(platform="darwin"), PsHostLoad)


def host_samples(busy_reps=(), cores=1.0, reps=5, name="burner"):
    rows = []
    for rep in range(1, reps + 1):
        for i in range(8):
            other = cores if rep in busy_reps else 0.02
            rows.append(
                {
                    "target": syn.TARGET,
                    "run": syn.RUN,
                    "rep": rep,
                    "t_s": float(i) - 2,
                    "t_unix": syn.T0 + rep * 100 + i,
                    "source": "host",
                    "cpus": 2,
                    "busy_cores": 1.9 + other,
                    "steal_cores": 0.0,
                    "iowait_cores": 0.0,
                    "load1": 2.0,
                    "server_cores": 1.9,
                    "harness_cores": 0.03,
                    "other_cores": other,
                    "top": f"{name}={other:.2f};sshd=0.01" if rep in busy_reps else "sshd=0.02",
                }
            )
    return pd.DataFrame(rows)


def verdict(samples, **kw):
    data = syn.run(syn.make_requests(), host=samples, **kw)
    return next(v for v in data.verdicts if v["trap"] == "host"), data


def test_a_busy_neighbour_is_named_with_its_rep_and_process():
    v, data = verdict(host_samples(busy_reps=(3,)))
    assert v["fired"] and v["verdict"] == "yes" and v["effect"] == "warn"
    assert "run1 rep 3 (50%: burner 1.00 cores" in v["summary"]
    assert data.decision[syn.TARGET]["warnings"][0]["text"].startswith(
        "Warning: other processes took more than 10% of the CPU of this machine (client and "
        "server) during 1 rep"
    )
    rows = {r["rep"]: r for r in v["evidence"]["rows"]}
    assert rows[3]["contended"] and not rows[2]["contended"]
    assert rows[3]["samples"] == 6  # the measured part only (t_s >= 0)


@pytest.mark.slow  # a synthetic run's report
def test_a_quiet_machine_stays_quiet_and_the_threshold_is_the_config_key():
    v, _ = verdict(host_samples())
    assert not v["fired"] and v["effect"] == "none" and v["config_key"] == "checks.host_threshold"
    assert "at most 1% of its CPU in any rep" in v["summary"]
    v, _ = verdict(
        host_samples(busy_reps=(3,), cores=0.3), cfg=syn.config(checks__host_threshold=0.2)
    )
    assert not v["fired"]


def test_no_host_samples_is_not_assessable():
    v, _ = verdict(None)
    assert not v["assessable"] and v["verdict"] == "not assessable" and not v["fired"]


@pytest.mark.slow  # a synthetic run's report
def test_the_report_warns_before_the_headline_and_lists_the_reps():
    md = syn.rendered(syn.make_requests(), host=host_samples(busy_reps=(3,)))[0]
    head = syn.section(md, syn.TARGET)
    warning = ("> ⚠ **Warning: other processes took more than 10% of the CPU of this machine "
               "(client and server)")
    assert warning in head and head.index(warning) < head.index("**Per-arm results**")
    assert "| run1 rep 3 | 6 | 1.00 (50.0%) | 1.00 | 0.0% | 2.00 | 1.90 | burner 1.00 cores" in md
    assert syn.trap_row(md, LOCAL_TITLE)[1] == "yes"
    assert list(host.HOST_COLUMNS)[:3] == ["target", "run", "rep"]


PINNED_PROBE = r"""
import json, os, time
from slotbench.measure.hostload import LinuxHostLoad
os.sched_setaffinity(0, {0})  # this rep runs on CPU 0
load = LinuxHostLoad()
load.sample()
time.sleep(1.0)
print(json.dumps(load.sample()[0]))
"""
BURN = "import ctypes; ctypes.CDLL('libc.so.6').prctl(15, b'%s', 0, 0, 0)\nwhile True: pass"


@pytest.mark.slow  # burns both CPUs for a second
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin apart")
def test_a_pinned_rep_counts_only_its_cpus_and_what_may_run_on_them():
    """Another target's rep pinned to the other CPU does not compete; a process that may run
    anywhere does."""
    def burner(name, cpus):
        return subprocess.Popen([sys.executable, "-c", BURN % name],
                                preexec_fn=lambda: os.sched_setaffinity(0, cpus))

    burners = [burner("nextdoor", {1}), burner("anywhere", {0, 1})]
    try:
        time.sleep(0.3)
        proc = subprocess.run([sys.executable, "-c", PINNED_PROBE], capture_output=True,
                              text=True, timeout=60, env=os.environ | {"PYTHONPATH": str(SCRIPTS)})
    finally:
        for b in burners:
            b.kill()
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    assert row["cpus"] == 1
    assert "nextdoor" not in row["top"] and "anywhere" in row["top"], row["top"]
