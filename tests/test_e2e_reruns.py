"""Reruns you can trust, on the real embedded server: adding reps measures only the new ones; a
change to analysis code reruns the analysis and what follows, never a rep; a change to
measurement code re-measures nothing; one rep cannot assess the rotation, so its headline is
only provisional."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from e2e_helpers import SMOKE, copy_repo, copy_work, file_states, jobs_run, results_dir, snakemake

pytestmark = pytest.mark.e2e

MEASURING = {"rep", "plan", "fingerprint"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def run(work, cache, reps: int):
    (work / "reps.yaml").write_text(yaml.safe_dump({"reps": reps}))
    proc = snakemake(work, *SMOKE, "reps.yaml", cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def three_reps(tmp_path_factory, smoke_template):
    """A copy of the session's smoke run (3 reps), with its rep count in reps.yaml."""
    work = copy_work(smoke_template.work, tmp_path_factory.mktemp("reruns") / "work")
    (work / "reps.yaml").write_text(yaml.safe_dump({"reps": 3}))
    return work


def raw_files(work):
    return sorted((results_dir(work) / "raw").rglob("rep*.json*"))


def test_adding_a_rep_measures_only_that_rep(three_reps, cache):
    work = three_reps
    before = file_states(raw_files(work))
    assert len(before) == 6  # three raw files and their .sha256
    proc = run(work, cache, 4)
    ran = jobs_run(proc)
    assert ran.count("rep") == 1 and "plan" not in ran and "fingerprint" not in ran, ran
    assert "results/smoke/raw/embedded/run1/rep4.json" in proc.stdout + proc.stderr
    after = file_states(raw_files(work))
    assert {k: after[k] for k in before} == before, "reps 1 to 3 must stay byte-identical"
    assert len(after) == 8
    cells = pd.read_parquet(results_dir(work) / "cells.parquet")
    assert sorted(cells["rep"].unique()) == [1, 2, 3, 4]
    md = (results_dir(work) / "report.md").read_text()
    assert "| serial-1 | 4 |" in md and "| parallel-4 | 4 |" in md
    # rep 4 continues the cyclic rotation: reps 1-3 were a Latin square, rep 4 repeats rep 1
    orders = cells.sort_values("position").groupby("rep")["arm"].apply(tuple)
    assert orders[4] == orders[1] and orders.nunique() == 3, orders
    assert cells.groupby("arm")["position"].nunique().eq(3).all()


def test_an_analysis_code_change_reruns_the_analysis_and_what_follows(three_reps, cache):
    work = three_reps
    raws = file_states(raw_files(work))
    with open(work / "scripts/slotbench/analysis/analyse.py", "a") as fh:
        fh.write("\n# an edit: the analysis must rerun\n")
    proc = snakemake(work, *SMOKE, "reps.yaml", cache=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = set(jobs_run(proc))
    assert {"analyse", "checks", "figures", "report"} <= ran, ran
    assert not ran & MEASURING, ran
    assert file_states(raw_files(work)) == raws


def test_a_measurement_code_change_re_measures_nothing(three_reps, cache):
    work = three_reps
    raws = file_states(raw_files(work))
    with open(work / "scripts/slotbench/measure/execute.py", "a") as fh:
        fh.write("\n# an edit: measurement code, the raw files stay\n")
    proc = snakemake(work, *SMOKE, "reps.yaml", cache=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not set(jobs_run(proc)) & MEASURING, jobs_run(proc)
    assert file_states(raw_files(work)) == raws


def test_one_rep_cannot_assess_the_rotation_and_its_headline_is_provisional(tmp_path, cache):
    work = copy_repo(tmp_path / "one")
    run(work, cache, 1)
    (rotation,) = json.loads((results_dir(work) / "checks/rotation_bias.json").read_text())
    assert rotation["verdict"] == "not assessable" and not rotation["assessable"]
    assert "never at position" in rotation["sentence"]
    decision = json.loads((results_dir(work) / "checks/headline.json").read_text())["embedded"]
    assert decision["status"] == "provisional"
    md = (results_dir(work) / "report.md").read_text()
    assert "| Rotation bias | not assessable |" in md
    head = md[md.index("## Target: embedded") : md.index("**Per-arm results**")]
    # the headline is shown, but only after it is marked provisional, and says why
    assert "> ⚠ **Provisional: Rotation bias is not assessable" in head
    assert head.index("Provisional:") < head.index("Four-way concurrency")

