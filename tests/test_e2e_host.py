"""Host contention on the real embedded server: a CPU burner started during a rep added to a
finished smoke run is named, with that rep and its process name. (The smoke run without it stays
quiet: that is asserted in tests/test_e2e.py, so the suite measures the quiet run once.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import yaml

from doubles.wait import wait_for
from e2e_helpers import SMOKE, copy_work, results_dir

pytestmark = pytest.mark.e2e

# a busy loop whose process name (PR_SET_NAME) is "cpuburner", so the report can name it
BURNER = ("import ctypes; ctypes.CDLL('libc.so.6').prctl(15, b'cpuburner', 0, 0, 0)\n"
          "while True:\n    pass\n")


def host_verdict(work) -> dict:
    (record,) = json.loads((results_dir(work) / "checks/host.json").read_text())
    return record


def test_a_burner_during_one_rep_is_named(tmp_path, smoke_template):
    cache = tmp_path / "cache"
    work = copy_work(smoke_template.work, tmp_path / "burner")
    (work / "four.yaml").write_text(yaml.safe_dump({"reps": 4}))
    folder = results_dir(work)
    raw_dir, log = folder / "raw/embedded/run1", folder / "logs/rep/embedded/run1"
    rep = "rep4"

    def measuring():  # its first cell done
        return (log / f"{rep}.log").exists() and "position 0" in (log / f"{rep}.log").read_text()

    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *SMOKE, "four.yaml"]
    env = os.environ | {"SLOTBENCH_CACHE": str(cache)}
    run = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env)
    burner = None
    try:
        wait_for(measuring, 300, f"{rep} to be measuring")
        burner = subprocess.Popen([sys.executable, "-c", BURNER])
        wait_for(lambda: (raw_dir / f"{rep}.json").exists(), 300, f"{rep} to finish")
        burner.kill()
        out, _ = run.communicate(timeout=600)
    finally:
        for p in (burner, run):
            if p is not None and p.poll() is None:
                p.kill()
    assert run.returncode == 0, out[-3000:]
    v = host_verdict(work)
    number = int(rep.removeprefix("rep"))
    assert v["fired"] and v["effect"] == "warn", v["summary"]
    rows = {r["rep"]: r for r in v["evidence"]["rows"]}
    assert rows[number]["contended"] and "cpuburner" in rows[number]["top"], rows[number]
    assert not any(rows[r]["contended"] for r in rows if r != number), rows  # the quiet reps
    assert f"run1 rep {number} (" in v["summary"]
    md = (results_dir(work) / "report.md").read_text()
    head = md[md.index("## Target: embedded") : md.index("**Per-arm results**")]
    assert ("Warning: other processes took more than 10% of the CPU of this machine (client and "
            "server)") in head
    assert "cpuburner" in head
