"""End to end: the real pipeline, on the real embedded llama-server, with config/smoke.yaml.

These tests send real requests to a real llama-server running Gemma 3 270M; nothing is mocked.
They build on the session's one smoke run (conftest.smoke_template): the module probes reruns
on a copy of it, and the fault tests add a rep to copies of their own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from doubles.wait import wait_for
from e2e_helpers import (
    SMOKE, copy_repo, copy_work, file_states, fill, interruptible, jobs_run, llama_servers_under,
    results_dir, small_filesystem, snakemake, wait_for_no_processes,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("slotbench-cache")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, smoke_template, cache):
    """A copy of the session's smoke run, which this module's rerun tests may change.

    A copy's raw files have new change times, which a finished run cannot tell from an edit
    with the modification time restored: its first run re-reads them (their recorded hashes
    verify) and re-renders, and measures nothing."""
    work = copy_work(smoke_template.work, tmp_path_factory.mktemp("smoke") / "work")
    settle = snakemake(work, *SMOKE, cache=cache)
    assert settle.returncode == 0, settle.stderr[-3000:]
    assert not set(jobs_run(settle)) & {"rep", "plan", "fingerprint"}, jobs_run(settle)
    return work, smoke_template, smoke_template.elapsed_s


def test_smoke_run_produces_every_output_quickly(smoke):
    work, template, elapsed = smoke
    for rel in ["report.md", "report.html", "cells.parquet", "requests.parquet",
                "checks/headline.json", "analysis/summary.csv", "fingerprint/embedded/run1.json",
                "raw/embedded/run1/rep1.json", "raw/embedded/run1/rep2.json"]:
        assert (results_dir(work) / rel).stat().st_size > 0, rel
    assert elapsed < 180, f"smoke run took {elapsed:.0f} s, the budget is 3 minutes"
    assert llama_servers_under(str(template.cache)) == [], "a managed llama-server outlived it"


def test_smoke_numbers_are_sane(smoke):
    work, _, _ = smoke
    cells = pd.read_parquet(results_dir(work) / "cells.parquet")
    requests = pd.read_parquet(results_dir(work) / "requests.parquet")
    assert len(cells) == 3 * 3 and len(requests) == 3 * 3 * 4
    assert (cells["agg_tps"] > 0).all() and (cells["user_tps"] > 0).all()
    assert (requests["output_tokens"] > 0).all() and (requests["output_tokens"] <= 32).all()
    # every prompt has the same token length, by the server's own count (docs/method.md#nonces)
    assert requests["prompt_tokens"].nunique() == 1
    assert (requests["cache_n"] == 0).all(), "a measured request reused cached prompt tokens"
    # the integrity detectors stay quiet on a clean run
    assert pd.read_csv(results_dir(work) / "checks/cache_hits.csv").empty
    assert pd.read_csv(results_dir(work) / "checks/prompts.csv").empty
    # nothing else ran on the machine: the host check could look and stays quiet (its other
    # half, a burner during one rep, is tests/test_e2e_host.py)
    (host,) = json.loads((results_dir(work) / "checks/host.json").read_text())
    assert host["assessable"] and not host["fired"], host["summary"]
    by_arm = cells.groupby("arm")[["agg_tps", "ttft_s"]].median()
    assert by_arm.loc[4, "agg_tps"] > by_arm.loc[1, "agg_tps"], by_arm
    assert by_arm.loc[4, "ttft_s"] > by_arm.loc[1, "ttft_s"], by_arm
    # the rotation put every arm in every position in the three reps: a Latin square
    assert cells.groupby("arm")["position"].nunique().eq(3).all()


def test_the_servers_own_metrics_say_how_many_sequences_it_decoded_per_step(smoke):
    """The embedded server, with no telemetry setting, is scraped through its real /metrics:
    one sequence per decode step at serial-1, more than 1.5 at parallel-4 (the report says so
    per arm), and its generated-token counter over each cell equals what the client received:
    the warm-up before it is never counted in a cell."""
    work, _, _ = smoke
    folder = results_dir(work)
    summary = pd.read_csv(folder / "analysis/summary.csv").set_index("arm")
    assert summary.loc[1, "server_batch"] == pytest.approx(1.0, abs=0.05), summary
    assert summary.loc[4, "server_batch"] > 1.5, summary
    cells = pd.read_parquet(folder / "cells.parquet")
    assert (cells["server_batch_metric"] == "llamacpp:n_busy_slots_per_decode").all()
    assert (cells["server_output_tokens"] == cells["tokens_out"]).all(), cells[
        ["arm", "position", "server_output_tokens", "tokens_out"]]
    requests = pd.read_parquet(folder / "requests.parquet")
    assert requests["id_slot"].notna().all() and requests["id_slot"].nunique() > 1
    scraped = pd.read_parquet(folder / "server_metrics.parquet")
    assert set(scraped["phase"]) == {"before", "during", "after"}  # never the warm-up
    assert scraped["position"].notna().all() and scraped["error"].isna().all()
    md = (folder / "report.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| parallel-4 | ") and "[" in x
                and "no usd_per_hour" in x)
    assert float(line.split("|")[2].split()[0]) > 1.5, line
    (numbers,) = json.loads((folder / "checks/server_numbers.json").read_text())
    assert "equalled the client's count" in numbers["summary"], numbers["summary"]


def test_report_shows_headline_verdict_deviance_and_fingerprint(smoke):
    work, _, _ = smoke
    md = (results_dir(work) / "report.md").read_text()
    html = (results_dir(work) / "report.html").read_text()
    for needle in ["parallel-4", "serial-1", "otation", "eviance", "11434.0.0",
                   "Measurement integrity", "Prompt length", "Prefix cache", "Control arm",
                   "Thermal state", "Drift", "Client self-check", "Enough reps?",
                   "Traps and detectors", "Cells and raw files"]:
        assert needle in md, needle
        assert needle in html, needle
    decision = json.loads((results_dir(work) / "checks/headline.json").read_text())
    assert decision["embedded"]["status"] in {"allowed", "provisional", "refused"}
    for trap in ("rotation_bias", "deviance", "prompts", "cache", "thermal", "client"):
        records = json.loads((results_dir(work) / f"checks/{trap}.json").read_text())
        assert [r["target"] for r in records] == ["embedded"], trap
        assert {"assessable", "fired", "verdict", "sentence", "cells"} <= set(records[0]), trap
    raw_hash = pd.read_parquet(results_dir(work) / "cells.parquet")["raw_sha256"].iloc[0]
    assert raw_hash[:16] in md and raw_hash in html  # Markdown names a hash by 16 digits


def test_explain_traces_the_headline_speedup_to_raw_requests(smoke):
    """`python -m slotbench explain` prints the requests behind the 4-way speedup: the
    parallel-4 requests and the serial-1 requests of the same reps, and checks the raw files."""
    work, _, _ = smoke
    proc = subprocess.run(
        [sys.executable, "-m", "slotbench", "explain", "headline/embedded/arm4/speedup"],
        cwd=work, capture_output=True, text=True, timeout=120,
        env=os.environ | {"PYTHONPATH": str(work / "scripts")},
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    lines = out[out.index("\nrequests (") + 1 :].splitlines()
    header = lines[1].split()
    rows = [line.split() for line in lines[2:] if line.startswith("  ") and line.strip()]
    arms = pd.Series([row[header.index("arm")] for row in rows]).value_counts().to_dict()
    assert arms == {"4": 12, "1": 12}, arms  # 3 reps x 4 requests of parallel-4 and serial-1
    assert "requests (24: 12 of parallel-4, 12 of serial-1)" in out
    cells = pd.read_parquet(results_dir(work) / "cells.parquet")
    for raw_file, digest in cells[["raw_file", "raw_sha256"]].drop_duplicates().itertuples(
        index=False
    ):
        assert f"OK        {digest}  {raw_file}" in out
    assert (results_dir(work) / "provenance.json").stat().st_size > 0


def test_second_run_does_nothing(smoke, cache):
    work, _, _ = smoke
    proc = snakemake(work, *SMOKE, cache=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert jobs_run(proc) == [], jobs_run(proc)
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_a_fresh_checkout_re_renders_at_most(smoke, cache):
    """New mtimes on every code and config file (as a re-checkout gives) may re-render the
    cheap rules, whose code is their input, but never redo a rep."""
    work, _, _ = smoke
    for path in [work / "Snakefile", *work.glob("rules/*"), *work.glob("scripts/**/*.py"),
                 *work.glob("config/*")]:
        path.touch()
    proc = snakemake(work, *SMOKE, "--dry-run", cache=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = set(jobs_run(proc))
    cheap = {"consolidate_block", "consolidate", "analyse", "checks", "figures", "report", "all"}
    assert planned <= cheap, planned
    assert not planned & {"rep", "plan", "fingerprint"}


def test_threshold_change_reruns_only_checks_and_report(smoke, cache):
    work, _, _ = smoke
    settle = snakemake(work, *SMOKE, cache=cache)  # whatever earlier tests left stale
    assert settle.returncode == 0, settle.stderr[-3000:]
    raws = sorted((results_dir(work) / "raw").rglob("*.json"))
    before = file_states(raws)
    report_before = (results_dir(work) / "report.md").read_text()
    override = work / "threshold.yaml"
    override.write_text(yaml.safe_dump({"checks": {"precision": 0.0001}}))
    proc = snakemake(work, *SMOKE, str(override), cache=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = set(jobs_run(proc))
    assert ran <= {"checks", "analyse", "report", "resolved_config", "all"}, ran
    assert {"checks", "report"} <= ran, ran
    assert file_states(raws) == before, "a raw rep file was touched"
    assert not ran & {"rep", "plan", "fingerprint"}, "a request was sent"
    report_after = (results_dir(work) / "report.md").read_text()
    assert report_after != report_before
    assert "| Too few reps (interval width) | yes | 0.01% (checks.precision) |" in report_after


def test_bad_config_fails_before_any_request(tmp_path, cache):
    work = copy_repo(tmp_path / "bad")
    bad = work / "bad.yaml"
    bad.write_text(yaml.safe_dump({"reps": 0, "arms": [2, 4]}))
    proc = snakemake(work, *SMOKE, str(bad), cache=cache)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "`reps`" in out and "`arms`" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]
    assert not (results_dir(work) / "raw").exists()


def test_killing_the_server_fails_the_rep_and_the_next_run_resumes(tmp_path, cache,
                                                                    smoke_template):
    """Two reps more on a finished smoke run; the server is killed while the first of them
    measures (its first cell done)."""
    work = copy_work(smoke_template.work, tmp_path / "kill")
    config = work / "kill.yaml"
    config.write_text(yaml.safe_dump({"reps": 5}))
    args = [*SMOKE, str(config)]
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args]
    env = {**os.environ, "SLOTBENCH_CACHE": str(cache)}
    raw_dir = results_dir(work) / "raw/embedded/run1"
    log_dir = results_dir(work) / "logs/rep/embedded/run1"

    def victim() -> str | None:
        """A new rep that is measuring (its first cell done): Snakemake may start either."""
        done = {p.stem for p in raw_dir.glob("rep*.json")}
        for log in log_dir.glob("rep*.log"):
            rep = log.name.removesuffix(".log")
            if rep.endswith(".server") or rep in done:
                continue
            if "position 0" in log.read_text():
                return rep
        return None

    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    try:
        rep = wait_for(victim, 240, "a new rep to be measuring")
        pids = wait_for(lambda: llama_servers_under(str(cache)), 10, f"the {rep} server")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    number = rep.removeprefix("rep")
    assert f"target embedded, run run1, rep {number}, arm" in out, out[-3000:]
    assert "request" in out
    assert not (raw_dir / f"{rep}.json").exists()
    assert not list(raw_dir.glob(".*tmp")), "a partial raw file"
    assert llama_servers_under(str(cache)) == []
    completed = sorted(raw_dir.glob("rep*.json"))
    kept = file_states(completed)

    again = snakemake(work, *args, cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert file_states(completed) == kept, "a completed rep was redone"
    # the failed rep and the one never started (if it was not), nothing else
    assert jobs_run(again).count("rep") == 5 - len(completed)
    assert len(list(raw_dir.glob("rep*.json"))) == 5


@pytest.mark.parametrize("how", ["ctrl-c", "sigint to snakemake", "kill -9 snakemake"])
def test_an_interrupt_stops_the_managed_server_and_keeps_what_was_measured(
    tmp_path, cache, smoke_template, how
):
    """On the real server: Ctrl-C (SIGINT to the process group), SIGINT to Snakemake alone or
    kill -9 of Snakemake while a fourth rep, added to a finished smoke run, measures. That rep
    is discarded with one line (or, SIGINT to Snakemake alone, may be let finish whole), the
    run's llama-server stops, the third rep stays byte-identical, and the next plain run
    measures what is missing."""
    work = copy_work(smoke_template.work, tmp_path / "interrupt")
    (work / "four.yaml").write_text(yaml.safe_dump({"reps": 4}))
    args = [*SMOKE, "four.yaml"]
    env = {**os.environ, "SLOTBENCH_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    folder = results_dir(work)
    raw_dir, log = folder / "raw/embedded/run1", folder / "logs/rep/embedded/run1"
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, preexec_fn=interruptible)
    def measuring_fourth():
        return (log / "rep4.log").exists() and "position 0" in (log / "rep4.log").read_text()

    first, second = 3, 4
    try:
        wait_for(measuring_fourth, 300, "the fourth rep to be measuring")
        assert llama_servers_under(str(cache))
        kept = file_states([raw_dir / f"rep{first}.json", raw_dir / f"rep{first}.json.sha256"])
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        elif how == "sigint to snakemake":
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_for(lambda: llama_servers_under(str(cache)) == [], 15, "the managed server to stop")
    assert "Traceback" not in out
    assert file_states([raw_dir / f"rep{first}.json", raw_dir / f"rep{first}.json.sha256"]) == kept
    finished = how == "sigint to snakemake" and (raw_dir / f"rep{second}.json").exists()
    if not finished:  # Snakemake alone may let the rep finish, whole
        said = (log / f"rep{second}.log").read_text() if how != "ctrl-c" else out
        discarded = "INTERRUPTED" in said and f"rep {second} of embedded/run1 was discarded" in said
        # with Snakemake killed, or the interrupt reaching the whole process group, the server
        # may stop before the rep job handles its own signal: the rep then fails on its next
        # request, by name, unrecorded
        failed = (how in ("kill -9 snakemake", "ctrl-c")
                  and f"ERROR: target embedded, run run1, rep {second}" in said
                  and "This rep was not recorded" in said)
        assert discarded or failed, said[-2000:]
        assert not (raw_dir / f"rep{second}.json").exists()

    again = snakemake(work, *args, cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert jobs_run(again).count("rep") == (0 if finished else 1)
    assert file_states([raw_dir / f"rep{first}.json", raw_dir / f"rep{first}.json.sha256"]) == kept
    assert (raw_dir / f"rep{second}.json").exists() and llama_servers_under(str(cache)) == []
    assert wait_for_no_processes(str(work)) == []  # nor the server's supervisor


def test_a_disk_that_fills_mid_rep_keeps_the_rep_and_stops_the_server(tmp_path, cache,
                                                                        smoke_template):
    """On the real server: the raw directory's disk fills while a fourth rep measures. The rep
    fails by name with the measured rep kept elsewhere, the run's server stops, and the next
    plain run puts the rep in place without measuring it again."""
    work = copy_work(smoke_template.work, tmp_path / "full")
    (work / "four.yaml").write_text(yaml.safe_dump({"reps": 4}))
    args = [*SMOKE, "four.yaml"]
    env = {**os.environ, "SLOTBENCH_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    folder = results_dir(work)
    raw_dir, log = folder / "raw/embedded/run1", folder / "logs/rep/embedded/run1"
    with small_filesystem(raw_dir) as disk:
        if disk is None:
            pytest.skip("cannot mount a small file system here")
        proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", *args],
                                cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        try:
            wait_for(lambda: (log / "rep4.log").exists()
                      and "position 0" in (log / "rep4.log").read_text(), 300,
                      "the fourth rep to be measuring")
            filler = fill(disk)
            out, _ = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode != 0
        assert "Traceback" not in out
        assert re.search(r"ERROR: target embedded, run run1, rep 4: the raw file "
                         r"results/smoke/raw/embedded/run1/rep4\.json could not be written "
                         r"\(No space left on device\); the measured rep was kept in ", out), (
            out[-3000:])
        assert llama_servers_under(str(cache)) == []
        assert wait_for_no_processes(str(work)) == []
        filler.unlink()
        again = snakemake(work, *args, cache=cache)
        assert again.returncode == 0, again.stderr[-3000:]
        assert jobs_run(again).count("rep") == 1
        assert "nothing was measured again" in again.stdout + again.stderr
        assert (raw_dir / "rep4.json").exists() and llama_servers_under(str(cache)) == []
        assert wait_for_no_processes(str(work)) == []
