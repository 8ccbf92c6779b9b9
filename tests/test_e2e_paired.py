"""The paired design end to end, on scripted servers whose speed drifts on purpose.

Three scripted llama-servers (tests/doubles/fault_server.py) share one clock and slow down
together by one percent every second, a machine drifting by about a fifth over the run: ``a``
and ``same`` generate alike, ``slow`` takes 10% longer per token. The real pipeline measures
them as a paired design (10 pairs, ABBA) and the test reads what it concluded:

- paired, ``same`` against ``a`` is "no detectable change" on every row;
- paired, the 10% slower server is "B slower" on every absolute rate, and its within-rep ratios
  move by less than 5%;
- the same server's first and second halves, compared unpaired as two results measured at
  different times, are never "B slower": the absolute rates are "confounded with time"; so are
  the two identical servers' halves, whose URLs differ, each row naming the time between them;
- every pair was measured in its planned order, and the report shows the section.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from doubles.fault_server import FaultServer
from e2e_helpers import DEFAULT_EXPERIMENT, copy_repo, jobs_run, results_dir
from slotbench.analysis import compare
from slotbench.measure.plan import pair_order

pytestmark = pytest.mark.slow  # the real pipeline (Snakemake) against scripted servers

PAIRS = 10
CONFIG = """\
design: paired
matrix:
  - base: {{name: drift, backend: llamacpp}}
    vary:
      url: {{a: "{a}", same: "{same}", slow: "{slow}"}}
arms: [1, 2]
requests_per_cell: 4
reps: {pairs}
runs: 1
num_predict: 16
warmup_predict: 2
analysis:
  bootstrap: 400
"""
TARGETS = ["drift-a", "drift-same", "drift-slow"]
ABSOLUTE_ROWS = {(1, "agg_tps"), (1, "user_tps"), (2, "agg_tps"), (2, "user_tps")}


def snakemake(work):
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "paired.yaml"],
        cwd=work, capture_output=True, text=True, timeout=900,
        env=os.environ | {"PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    start = time.monotonic()
    servers = [FaultServer(token_s=token_s, measured_predict=8, drift_per_s=0.01,
                           clock_start=start).start() for token_s in (0.005, 0.005, 0.0055)]
    try:
        work = copy_repo(tmp_path_factory.mktemp("paired") / "work")
        (work / "paired.yaml").write_text(CONFIG.format(
            a=servers[0].url, same=servers[1].url, slow=servers[2].url, pairs=PAIRS))
        proc = snakemake(work)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        folder = results_dir(work, DEFAULT_EXPERIMENT)
        yield work, json.loads((folder / "analysis/paired.json").read_text())
    finally:
        for server in servers:
            server.stop()


def rows_of(result, target):
    return {(r["arm"], r["metric"]): r for r in result["comparisons"][target]["rows"]}


def test_every_pair_was_measured_back_to_back_in_its_planned_abba_order(run):
    work, result = run
    assert result["baseline"] == "drift-a" and result["targets"] == TARGETS
    assert result["order"] == {"pairs_in_order": PAIRS, "pairs_out_of_order": []}
    # and the sides of one pair are adjacent in time: no side of another pair in between
    cells = pd.read_parquet(results_dir(work, DEFAULT_EXPERIMENT) / "cells.parquet")
    starts = cells.groupby(["target", "rep"])["t_start_unix"].min().sort_values()
    measured = [(rep, target) for target, rep in starts.index]
    folder = results_dir(work, DEFAULT_EXPERIMENT)
    seed = yaml.safe_load((folder / "config.resolved.yaml").read_text())["seed"]
    planned = [(pair, t) for pair in range(1, PAIRS + 1)
               for t in pair_order(TARGETS, seed, "run1", pair)]
    assert [p for p, _ in measured] == [p for p, _ in planned]
    assert measured == planned
    # the machine drifted, and the drift line measured it
    assert result["drift"]["drift-a"]["change"] < -0.15, result["drift"]["drift-a"]


def test_paired_a_against_an_identical_server_is_no_detectable_change_on_every_row(run):
    _, result = run
    verdicts = {k: r["verdict"] for k, r in rows_of(result, "drift-same").items()}
    assert set(verdicts.values()) == {compare.NO_CHANGE}, verdicts


def test_paired_a_ten_percent_slower_server_is_found_slower_and_its_ratios_unchanged(run):
    _, result = run
    rows = rows_of(result, "drift-slow")
    for key in ABSOLUTE_ROWS:
        assert rows[key]["verdict"] == compare.SLOWER, (key, rows[key])
        assert 0.8 < rows[key]["ratio"] < 0.97 and rows[key]["ratio_hi"] < 1, rows[key]
        assert rows[key]["pairs"] == PAIRS
    for key, row in rows.items():  # within each rep, the ratios barely moved
        if key not in ABSOLUTE_ROWS:
            # a 10% slower token makes the fixed costs a smaller share of a request, so a ratio
            # may really move by a percent or two, and ten quiet pairs can detect that (two
            # fresh clones found 2-way speedup 1.98 against 2.00, and TTFT ratio 1.04 against
            # 1.01, "B faster"): what must hold is that the move is small
            assert abs(row["ratio"] - 1) < 0.05, (key, row)


def test_unpaired_halves_measured_at_different_times_are_never_called_slower(run):
    work, _ = run
    ratios = pd.read_parquet(results_dir(work, DEFAULT_EXPERIMENT) / "analysis/ratios.parquet")
    twins = ratios[ratios["target"].isin(["drift-a", "drift-same"])].assign(target="drift")
    half = PAIRS // 2
    fingerprint = {"drift": {"config.measurement.num_predict": 16}}
    early = compare.Side("early", twins[twins["rep"] <= half], {}, fingerprint)
    late = compare.Side("late", twins[twins["rep"] > half], {}, fingerprint)
    result = compare.compare(early, late, n_boot=400)
    rec = result["targets"]["drift"]
    assert rec["drift"]["confounded"], rec["drift"]
    verdicts = {(r["arm"], r["metric"]): r["verdict"] for r in rec["rows"]}
    assert compare.SLOWER not in verdicts.values(), verdicts
    assert {verdicts[k] for k in ABSOLUTE_ROWS} == {compare.CONFOUNDED}, verdicts


def test_identical_servers_on_two_urls_measured_at_different_times_carry_the_time_in_every_row(
        run, tmp_path):
    """Two results of the two identical servers, ``a``'s first half against ``same``'s second
    half, compared unpaired: their fingerprints differ in the URL, and the machine drifted in
    between. No absolute rate says "B slower" or "B faster" without the time between the
    measurements and the serial arm's move in its own row, the URL one possible explanation
    beside time."""
    from slotbench.measure.fingerprint import current_fields
    from slotbench.report import compare as compare_doc

    work, _ = run
    folder = results_dir(work, DEFAULT_EXPERIMENT)
    ratios = pd.read_parquet(folder / "analysis/ratios.parquet")
    half = PAIRS // 2

    def side(name, target, reps):
        fp = json.loads((folder / f"fingerprint/{target}/run1.json").read_text())
        cells = ratios[(ratios["target"] == target) & ratios["rep"].isin(reps)]
        return compare.Side(name, cells.assign(target="drift"), {},
                            {"drift": current_fields(fp)})

    a = side("A", "drift-a", range(1, half + 1))
    b = side("B", "drift-same", range(half + 1, PAIRS + 1))
    result = compare.compare(a, b, n_boot=400)
    rec = result["targets"]["drift"]
    urls = rec["differences"]["config.target.url"]
    assert urls[0] != urls[1], rec["differences"]
    assert rec["time_gap_s"] > 5, rec["time_gap_s"]
    absolute = [r for r in rec["rows"] if r["metric"] in compare.ABSOLUTE]
    assert len(absolute) == len(ABSOLUTE_ROWS)
    for row in absolute:
        assert row["time_gap_s"] == rec["time_gap_s"] and row["serial_move"] is not None, row
        assert "config.target.url" in row["may_explain"], row
        assert row["verdict"] not in (compare.SLOWER, compare.FASTER), row
    md, *_ = compare_doc.write(result, (a, b), tmp_path)
    lines = [line for line in md.read_text().splitlines()
             if line.startswith("| serial-") or line.startswith("| parallel-")]
    rates = [line for line in lines if "aggregate tok/s" in line or "per-user tok/s" in line]
    assert len(rates) == len(ABSOLUTE_ROWS)
    assert all(" after A" in line and "config.target.url" in line for line in rates), rates
    assert not any("| B slower" in line or "| B faster" in line for line in rates), rates


def test_the_report_has_the_paired_section_and_its_figure(run):
    work, _ = run
    report = (results_dir(work, DEFAULT_EXPERIMENT) / "report.md").read_text()
    assert "## Paired comparison" in report
    assert "drift-slow (B) against drift-a (A), paired" in report
    assert f"{PAIRS} of {PAIRS} pairs were measured in their planned order" in report
    assert (results_dir(work, DEFAULT_EXPERIMENT) / "figures/paired.png").stat().st_size > 10_000
    provenance = json.loads((results_dir(work, DEFAULT_EXPERIMENT) / "provenance.json").read_text())
    assert "paired" in json.dumps(provenance)


def test_a_lost_side_is_measured_again_alone_and_its_pair_is_named_out_of_order(run):
    """Resume works per side: the next plain run measures the missing side only, and the
    comparison says its pair was not measured back to back. (Last: it changes the results.)"""
    work, _ = run
    folder = results_dir(work, DEFAULT_EXPERIMENT)
    raw = folder / "raw/drift-slow/run1/rep3.json"
    kept = {p: p.read_bytes() for p in (folder / "raw").rglob("rep*.json") if p != raw}
    raw.unlink()
    raw.with_name("rep3.json.sha256").unlink()
    proc = snakemake(work)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert [j for j in jobs_run(proc) if j == "rep"] == ["rep"], jobs_run(proc)
    assert raw.is_file()
    assert {p: p.read_bytes() for p in kept} == kept  # every other side as it was
    result = json.loads((folder / "analysis/paired.json").read_text())
    assert result["order"] == {"pairs_in_order": PAIRS - 1, "pairs_out_of_order": ["run1/pair3"]}
    report = (folder / "report.md").read_text()
    assert "(not: run1/pair3, measured again or resumed)" in report


def test_a_paired_archive_re_renders_offline_with_its_paired_comparison(run, tmp_path):
    """The archive of a paired run re-renders with no server, the paired comparison included
    (its rule is one a re-render may run), to the same numbers."""
    work, _ = run
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "archive", "--configfile",
         "paired.yaml"], cwd=work, capture_output=True, text=True, timeout=600,
        env=os.environ | {"PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    out = tmp_path / "render"
    render = subprocess.run(
        [sys.executable, "-m", "slotbench", "archive-render",
         str(results_dir(work, DEFAULT_EXPERIMENT) / "archive/article.tar.gz"), "--out",
         str(out)],
        capture_output=True, text=True, timeout=600,
        env=os.environ | {"PYTHONPATH": str(work / "scripts")})
    text = render.stdout + render.stderr
    assert render.returncode == 0, text[-4000:]
    assert "localrule paired:" in text, text[-4000:]
    assert re.search(r"re-render: all \d+ tables are byte-identical to the archive", text), text
    again = json.loads((results_dir(out, DEFAULT_EXPERIMENT) / "analysis/paired.json").read_text())
    folder = results_dir(work, DEFAULT_EXPERIMENT)
    assert again == json.loads((folder / "analysis/paired.json").read_text())
