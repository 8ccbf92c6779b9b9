"""Experiments kept apart, on the real embedded server: a second experiment beside the session's
smoke run measures into its own folder and leaves the first one's files as they were; the
archive of one experiment holds that experiment alone; a results/ from before experiments had
their own folders gets a note and is left untouched."""

from __future__ import annotations

import shutil
from base64 import urlsafe_b64decode

import pytest

from e2e_helpers import (
    SMOKE, copy_repo, copy_work, file_states, jobs_run, llama_servers_under, results_dir,
    snakemake,
)
from slotbench.workflow import archive

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two(tmp_path_factory, smoke_template):
    """The session's smoke run, then the smoke config again as the experiment `other`."""
    work = copy_work(smoke_template.work, tmp_path_factory.mktemp("experiments") / "work")
    smoke = results_dir(work)
    before = file_states(sorted(p for p in smoke.rglob("*") if p.is_file()))
    proc = snakemake(work, *SMOKE, "--config", "experiment=other", cache=smoke_template.cache)
    return work, before, proc, smoke_template.cache


def test_a_second_experiment_measures_into_its_own_folder(two):
    work, _, proc, cache = two
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = jobs_run(proc)
    assert (ran.count("fingerprint"), ran.count("plan"), ran.count("rep")) == (1, 1, 3), ran
    other = results_dir(work, "other")
    for rel in ("report.md", "report.html", "config.resolved.yaml", "cells.parquet",
                "raw/embedded/run1/rep3.json", "raw/embedded/run1/rep3.json.sha256",
                "logs/server/embedded/run1.log"):
        assert (other / rel).is_file(), rel
    assert "experiment: other" in (other / "config.resolved.yaml").read_text()
    assert sorted(p.name for p in (work / "results").iterdir()) == [
        ".gitkeep", ".measuring", "other", "smoke"]  # nothing of either outside its folder
    assert "holds a result from before" not in proc.stderr
    assert llama_servers_under(str(cache)) == []


def test_the_first_experiment_is_untouched(two):
    work, before, _, _ = two
    smoke = results_dir(work)
    assert file_states(sorted(p for p in smoke.rglob("*") if p.is_file())) == before


def test_the_archive_of_one_experiment_holds_it_alone(two):
    work, before, _, cache = two
    proc = snakemake(work, "archive", *SMOKE, cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert set(jobs_run(proc)) <= {"archive", "resolved_config"}, jobs_run(proc)
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
    assert not (results_dir(work, "other") / "archive").exists()


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
