"""Experiments kept apart, on the real embedded server: two more experiments beside the session's
smoke run, measured by two Snakemakes at once, each into its own folder, one at a time on the
one server, leaving the first one's files as they were; `slotbench archive smoke` archives that
experiment alone; a results/ from before experiments had their own folders gets a note and is
left untouched."""

from __future__ import annotations

import json
import shutil
from base64 import urlsafe_b64decode
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from e2e_helpers import (
    SMOKE, copy_repo, copy_work, file_states, jobs_run, llama_servers_under, results_dir,
    slotbench, snakemake,
)
from slotbench.workflow import archive

pytestmark = pytest.mark.e2e


OTHERS = ("other", "third")


@pytest.fixture(scope="module")
def two(tmp_path_factory, smoke_template):
    """The session's smoke run, then the smoke config again, with half its output length (the
    reps wait for each other, so each of the six costs twice), as the experiments `other` and
    `third`, by two Snakemakes started together in the same checkout."""
    work = copy_work(smoke_template.work, tmp_path_factory.mktemp("experiments") / "work")
    smoke = results_dir(work)
    before = file_states(sorted(p for p in smoke.rglob("*") if p.is_file()))
    (work / "short.yaml").write_text(yaml.safe_dump({"num_predict": 16}))
    with ThreadPoolExecutor(len(OTHERS)) as pool:
        procs = dict(zip(OTHERS, pool.map(
            lambda name: snakemake(work, *SMOKE, "short.yaml", "--config", f"experiment={name}",
                                   cache=smoke_template.cache), OTHERS)))
    return work, before, procs, smoke_template.cache


def test_two_more_experiments_at_once_measure_each_into_its_own_folder(two):
    work, _, procs, cache = two
    for name, proc in procs.items():
        assert proc.returncode == 0, name + proc.stdout[-3000:] + proc.stderr[-3000:]
        ran = jobs_run(proc)
        assert (ran.count("fingerprint"), ran.count("plan"), ran.count("rep")) == (1, 1, 3), ran
        folder = results_dir(work, name)
        for rel in ("report.md", "report.html", "config.resolved.yaml", "cells.parquet",
                    "raw/embedded/run1/rep3.json", "raw/embedded/run1/rep3.json.sha256",
                    "logs/server/embedded/run1.log"):
            assert (folder / rel).is_file(), (name, rel)
        assert f"experiment: {name}" in (folder / "config.resolved.yaml").read_text()
        assert "holds a result from before" not in proc.stderr
    assert sorted(p.name for p in (work / "results").iterdir()) == sorted([
        ".gitkeep", ".measuring", *OTHERS, "smoke"])  # nothing of any outside its folder
    assert llama_servers_under(str(cache)) == []


def test_two_experiments_on_one_server_never_measured_at_the_same_time(two):
    """Each rep measured while the other Snakemake's jobs waited: the reps' measuring spans
    (their raw files' own clock) never overlap, and a job that had to wait said whom for."""
    work, _, procs, _ = two
    spans = sorted((raw["started_unix"], raw["finished_unix"], name)
                   for name in OTHERS
                   for raw in map(json.loads, map(lambda p: p.read_text(), sorted(
                       (results_dir(work, name) / "raw").rglob("rep*.json")))))
    assert len(spans) == 3 * len(OTHERS)
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        assert end <= start, f"a rep of {a} and one of {b} measured at once: {spans}"
    waited = [line for proc in procs.values() for line in proc.stderr.splitlines()
              if line.startswith("slotbench: waiting to measure target embedded: experiment ")]
    assert waited, "neither Snakemake's jobs waited for the other's"
    assert all("is measuring on the same server (results/.measuring/cpu" in w for w in waited)


def test_the_first_experiment_is_untouched(two):
    work, before, _, _ = two
    smoke = results_dir(work)
    assert file_states(sorted(p for p in smoke.rglob("*") if p.is_file())) == before


def test_the_archive_of_one_experiment_holds_it_alone(two):
    work, before, _, cache = two
    proc = slotbench(work, "archive", "smoke", cache=cache)  # no config file needed
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not {"fingerprint", "plan", "rep"} & set(jobs_run(proc)), "a request was sent"
    tarball = results_dir(work) / "archive/smoke.tar.gz"
    prefix, data = archive.verify(tarball)
    assert prefix == "smoke"
    results = [rel for rel in data if rel.startswith("results/")]
    assert results and all(rel.startswith("results/smoke/") for rel in results), results
    assert "results/smoke/raw/embedded/run1/rep1.json" in data
    records = [rel for rel in data if rel.startswith(archive.METADATA_DIR)]
    named = [urlsafe_b64decode("".join(p.removeprefix("@") for p in rel.split("/")[2:])).decode()
             for rel in records]
    assert named and all(path.startswith("results/smoke/") for path in named), named
    assert not any((results_dir(work, name) / "archive").exists() for name in OTHERS)


def test_a_result_from_before_experiments_is_named_and_left_as_it_is(tmp_path):
    """A dry run in a checkout whose results/ holds a result the old way: one note with the
    command that keeps it as an experiment, nothing moved, and the run plans its own folder."""
    work = copy_repo(tmp_path / "repo", git=False)
    old = work / "results"
    (old / "raw/embedded/run1").mkdir(parents=True)
    (old / "raw/embedded/run1/rep1.json").write_text("{}\n")
    (old / "report.md").write_text("# report\n")
    shutil.copy(work / "config/config.yaml", old / "config.resolved.yaml")
    before = file_states(sorted(p for p in old.rglob("*") if p.is_file()))
    proc = snakemake(work, *SMOKE, "-n", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if "holds a result from before" in line]
    assert notes == [
        "slotbench: note: results/ holds a result from before experiments had their own folders "
        "(results/<experiment>/); it is left untouched. To keep it as the experiment article: "
        "mkdir results/article && mv results/raw results/config.resolved.yaml results/report.md "
        "results/article/"], proc.stderr[-3000:]
    assert file_states(sorted(p for p in old.rglob("*") if p.is_file())) == before
    assert "results/smoke/raw/embedded/run1/rep1.json" in proc.stdout + proc.stderr
