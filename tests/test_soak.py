"""Soak: 256 concurrent streams through the real pipeline against the scripted llama-server.

No request may be lost or sent twice (the server's record of every prompt it received against
requests.parquet), every stream must arrive whole, and the report must name the concurrency
the 256-way arm actually reached; if it fell short, that arm gets no headline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from doubles.fault_server import FaultServer
from e2e_helpers import DEFAULT_EXPERIMENT, copy_repo, results_dir, wait_for_no_processes

pytestmark = pytest.mark.slow  # the real pipeline (Snakemake), 256 streams

ARM, REPS, TOKENS = 256, 2, 8
CONFIG = f"""\
targets:
  - name: soak
    backend: llamacpp
    url: {{url}}
arms: [1, {ARM}]
requests_per_cell: {ARM}
reps: {REPS}
runs: 1
num_predict: {TOKENS}
warmup_predict: 1
request_timeout_s: 120
analysis:
  bootstrap: 100
"""
NONCE = re.compile(r"Request (\S+)\.")


def test_256_streams_lose_nothing_and_the_report_names_the_concurrency_reached(tmp_path):
    work = copy_repo(tmp_path / "soak")
    # 2 ms a token alone, 0.2 s with 256 generating: long enough for every stream to be open
    with FaultServer(slots=ARM, token_s=0.002, alpha=0.4, measured_predict=TOKENS) as server:
        (work / "soak.yaml").write_text(CONFIG.format(url=server.url))
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "soak.yaml"],
            cwd=work, capture_output=True, text=True, timeout=900,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        with server.lock:
            prompts = [b["prompt"] for b in server.bodies if b.get("n_predict") == TOKENS]
            served_at_once = server.max_in_flight
    assert wait_for_no_processes(str(work)) == []

    # nothing lost, nothing sent twice
    expected = REPS * 2 * ARM
    assert len(prompts) == expected
    assert len(set(prompts)) == expected, "a request was sent twice"
    req = pd.read_parquet(results_dir(work, DEFAULT_EXPERIMENT) / "requests.parquet")
    assert len(req) == expected
    assert set(req["nonce"].astype(str)) == {NONCE.search(p).group(1) for p in prompts}
    assert (req["chunks"] == TOKENS).all() and (req["output_tokens"] == TOKENS).all()
    assert req["suspect_reason"].isna().all()
    assert served_at_once > 1

    # the report names what the 256-way arm reached
    folder = results_dir(work, DEFAULT_EXPERIMENT)
    verdict = json.loads((folder / "checks/concurrency.json").read_text())
    rows = [r for v in verdict for r in v["evidence"]["rows"]]
    (row,) = [r for r in rows if r["arm"] == ARM]
    reached = row["reached_median"]
    assert 1 < reached <= ARM
    report = (results_dir(work, DEFAULT_EXPERIMENT) / "report.md").read_text()
    if reached < ARM:
        assert f"parallel-{ARM} reached at most {reached:g} requests in flight" in report
        assert "gets no headline" in report
        assert f"| parallel-{ARM} (not a headline) |" in report
    else:
        assert f"parallel-{ARM} {ARM} in flight" in report
