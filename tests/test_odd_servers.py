"""Odd servers through the real pipeline: a server whose every count is wrong, and streams held
on their way (Nagle's algorithm left on, a proxy that sends the response when it is over).

Each case runs the workflow in a throw-away copy of the repository against the scripted
llama-server (tests/doubles/fault_server.py), and reads what a user reads: the verdict records, the
report and the tables. The cases run two at a time: each is a small run of its own server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from doubles.exporter import Exporter, dcgm
from doubles.fault_server import FaultServer
from e2e_helpers import DEFAULT_EXPERIMENT, copy_repo, results_dir

pytestmark = pytest.mark.slow  # the real pipeline (Snakemake) against scripted servers

CONFIG = """\
targets:
  - name: odd
    backend: llamacpp
    url: {url}
arms: [1, 2]
requests_per_cell: 4
reps: 2
runs: 1
num_predict: 16
warmup_predict: 2
request_timeout_s: 10
analysis:
  bootstrap: 100
"""
# name -> (scripted fault, buffering): a wrong count on every request; tokens held by Nagle's
# algorithm on a reused connection, or until the response is over; the same server streaming
# with TCP_NODELAY, as a server should
CASES = {"counts": ("counts", None), "nagle": (None, "nagle"), "end": (None, "end"),
         "nodelay": (None, None)}


# The nodelay case's server has no /metrics (it answers 404, as llama-server without --metrics
# does) and an exporter beside it (a GPU's energy, DCGM's names) dies after this many scrapes,
# in the middle of a cell: the reps complete and what is missing is "not assessable".
EXPORTER_DIES_AFTER = 6


def _dying_exporter():
    exporter = Exporter(dcgm(energy_mj=lambda t: 150_000 * t))

    def die():
        while exporter.hits < EXPORTER_DIES_AFTER:
            time.sleep(0.01)
        exporter.dead = True

    threading.Thread(target=die, daemon=True).start()
    return exporter


def _run(root: Path, name: str) -> dict:
    fault, buffering = CASES[name]
    work = copy_repo(root / name, git=False)
    with FaultServer(slots=4, token_s=0.005, measured_predict=16) as server, \
            _dying_exporter() as exporter:
        server.buffering = buffering
        server.arm(fault, skip=0)
        config = CONFIG.format(url=server.url)
        if name == "nodelay":
            config = config.replace(f"    url: {server.url}\n", f"    url: {server.url}\n"
                                    f"    exporters: [{exporter.url}/metrics]\n")
            config += "telemetry:\n  interval_s: 0.05\n"
        (work / "odd.yaml").write_text(config)
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "odd.yaml"],
            cwd=work, capture_output=True, text=True, timeout=300,
        )
    return {"work": work, "returncode": proc.returncode, "output": proc.stdout + proc.stderr,
            "exporter": exporter.url + "/metrics"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("odd-servers")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run, root, name) for name in CASES}
    return {name: f.result() for name, f in futures.items()}


def verdict(result: dict, trap: str) -> dict:
    folder = results_dir(result["work"], DEFAULT_EXPERIMENT)
    records = json.loads((folder / f"checks/{trap}.json").read_text())
    (record,) = [r for r in records if r["target"] == "odd"]
    return record


def report(result: dict) -> str:
    assert result["returncode"] == 0, result["output"][-4000:]
    return (results_dir(result["work"], DEFAULT_EXPERIMENT) / "report.md").read_text()


def test_a_server_whose_every_count_is_wrong_is_named_in_the_traps_table(runs):
    md = report(runs["counts"])
    record = verdict(runs["counts"], "server_numbers")
    assert record["fired"] and record["effect"] == "refuse"
    assert "no cell of odd is left behind the headline" in record["sentence"]
    row = next(line for line in md.splitlines()
               if line.startswith("| Server counts and timings"))
    assert "16 requests of 16 disagreed with the client" in row, row
    refusal = next(line for line in md.splitlines() if "Refused: no headline for odd" in line)
    assert "did not hold up against what the client saw" in refusal
    assert "the checks gave no verdict" not in md
    folder = results_dir(runs["counts"]["work"], DEFAULT_EXPERIMENT)
    cells = pd.read_parquet(folder / "cells.parquet")
    assert len(cells) == 4 and cells["excluded"].notna().all()
    assert cells["excluded"].str.startswith("server numbers: 4 of 4 requests").all()
    assert cells["excluded"].str.contains("reported 1600 output tokens, more than the 16 asked",
                                          regex=False).all()


@pytest.mark.parametrize("name", ["nagle", "end"])
def test_a_buffered_stream_is_named_and_not_blamed_on_the_server(runs, name):
    md = report(runs[name])
    buffered = verdict(runs[name], "buffering")
    assert buffered["fired"], buffered
    assert buffered["sentence"].startswith("The stream was buffered between the server and the "
                                           "client (")
    assert "proxy_buffering off" in buffered["sentence"] and "TCP_NODELAY" in md
    serial = verdict(runs[name], "serialisation")
    assert not serial["fired"], serial
    assert "served one request at a time" not in md
    assert "no two of its requests were generating at once" not in md
    # time to first token is named, not quoted, in the headline and the per-arm table
    headline = next(line for line in md.splitlines() if "concurrency buys" in line
                    or "concurrency costs" in line)
    assert "time to first token" in headline and "cannot be quoted" in headline
    assert "multiplies time to first token" not in headline
    assert "not quoted" in md
    cells = pd.read_parquet(results_dir(runs[name]["work"], DEFAULT_EXPERIMENT) / "cells.parquet")
    assert (cells["gen_streams"] <= cells["gen_streams_max"] + 1e-9).all(), cells


def test_the_same_server_with_tcp_nodelay_is_neither_buffered_nor_serialised(runs):
    md = report(runs["nodelay"])
    assert not verdict(runs["nodelay"], "buffering")["fired"]
    assert not verdict(runs["nodelay"], "serialisation")["fired"]
    headline = next(line for line in md.splitlines() if "concurrency buys" in line)
    assert "time to first token" in headline and "cannot be quoted" not in headline
    folder = results_dir(runs["nodelay"]["work"], DEFAULT_EXPERIMENT)
    requests = pd.read_parquet(folder / "requests.parquet")
    # one read per token: the text arrived as it was made
    assert (requests["most_read_chunks"] <= 2).all(), requests[
        ["chunks", "text_reads", "most_read_chunks"]]


def test_a_server_without_metrics_and_an_exporter_that_dies_leave_the_reps_whole(runs):
    """No /metrics on the server, an exporter dead from its seventh scrape, mid-cell: every rep
    completes, the dead scrapes are kept as missing with their reason, and the report says the
    server's batch per step and the energy per token are not assessable, never zero."""
    result = runs["nodelay"]
    md = report(result)
    folder = results_dir(result["work"], DEFAULT_EXPERIMENT)
    cells = pd.read_parquet(folder / "cells.parquet")
    assert len(cells) == 4 and cells["server_batch"].isna().all()
    assert cells["telemetry_note"].str.contains("no Prometheus endpoint at http://",
                                                regex=False).all(), cells["telemetry_note"]
    assert cells["telemetry_note"].str.contains("/metrics (HTTP 404)", regex=False).all()
    scraped = pd.read_parquet(folder / "server_metrics.parquet")
    assert set(scraped["source"]) == {result["exporter"]}
    dead = scraped[scraped["error"].notna()]
    assert len(dead) and (dead["error"] == "HTTP 503").all() and dead["metric"].isna().all()
    assert scraped["metric"].notna().sum() > 0  # it answered before it died
    # the cells the dead exporter left without an end to their window have no energy
    assert cells["energy_j"].isna().any()
    section = md.split("### The server's own evidence")[1].split("\n#")[0]
    assert "not assessable" in section and "HTTP 404" in section, section
