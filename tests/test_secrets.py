"""End to end: an API key reaches the server and nothing else.

The test starts a real llama-server that requires a random API key, points the real pipeline
at it as an external openai target whose config names only the environment variable, and then
searches every file the pipeline wrote (results/, .snakemake/) and everything it printed for
the key. Nothing is mocked.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pandas as pd
import pytest
import yaml

from e2e_helpers import DEFAULT_EXPERIMENT, copy_repo, results_dir, snakemake
from slotbench.measure.servers.llamacpp import ManagedLlamaServer

pytestmark = pytest.mark.e2e

SERVER = {"parallel": 4, "ctx_size": 4096, "threads": 2, "startup_timeout_s": 120}
KEY_VAR = "SLOTBENCH_TEST_KEY"


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    key = "sbk-" + secrets.token_urlsafe(32)
    log = tmp_path_factory.mktemp("keyed-server") / "server.log"
    # the server gets the key from a variable of its own, set only while it starts; the
    # pipeline gets it only through SLOTBENCH_TEST_KEY in the environment of its run
    srv = ManagedLlamaServer(SERVER | {"api_key_env": "SLOTBENCH_SERVER_SIDE_KEY"}, log)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLOTBENCH_SERVER_SIDE_KEY", key)
        srv.start()
    try:
        yield srv, key
    finally:
        srv.stop()


def write_config(work: Path, url: str) -> Path:
    config = {
        "runs": 1,
        "reps": 2,
        "num_predict": 32,
        "warmup_predict": 4,
        "analysis": {"bootstrap": 200},
        "targets": [{
            "name": "viaopenai", "backend": "openai", "managed": False, "url": url,
            "model": "gemma-3-270m-q4_k_m", "api_key_env": KEY_VAR,
        }],
    }
    path = work / "secret-target.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


def test_pipeline_uses_the_key_and_writes_it_nowhere(tmp_path, keyed_server):
    srv, key = keyed_server
    work = copy_repo(tmp_path / "work")
    config = write_config(work, srv.url + "/v1")
    proc = snakemake(work, "--configfile", str(config.name), cache=tmp_path / "cache",
                     env={KEY_VAR: key})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]

    # the requests really went through the key-protected server
    requests = pd.read_parquet(results_dir(work, DEFAULT_EXPERIMENT) / "requests.parquet")
    assert set(requests["target"]) == {"viaopenai"} and len(requests) == 2 * 3 * 4
    assert (requests["timing_source"] == "server").all()
    assert (requests["output_tokens"] > 0).all() and requests["finish_reason"].notna().all()
    assert (results_dir(work, DEFAULT_EXPERIMENT) / "report.md").stat().st_size > 0

    # ... and the key is nowhere: not in results, logs, Snakemake's metadata, nor the output
    needle = key.encode()
    assert files_containing(work / "results", needle) == []
    assert files_containing(work / ".snakemake", needle) == []
    assert files_containing(work, needle) == []  # config, copies, anything else
    assert key not in out
    # the variable's name, on the other hand, is recorded (so a reader knows where keys go)
    folder = results_dir(work, DEFAULT_EXPERIMENT)
    fingerprint = (folder / "fingerprint/viaopenai/run1.json").read_text()
    assert KEY_VAR in fingerprint


def test_a_missing_key_fails_before_measuring_and_names_the_variable(tmp_path, keyed_server):
    srv, key = keyed_server
    work = copy_repo(tmp_path / "nokey")
    config = write_config(work, srv.url)
    proc = snakemake(work, "--configfile", str(config.name), cache=tmp_path / "cache",
                     env={KEY_VAR: ""}, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert KEY_VAR in out and "Traceback" not in out, out[-3000:]
    assert not (results_dir(work, DEFAULT_EXPERIMENT) / "raw").exists()
    assert key not in out


def test_a_wrong_key_is_rejected_clearly(tmp_path, keyed_server):
    srv, key = keyed_server
    wrong = "sbk-" + secrets.token_urlsafe(32)
    work = copy_repo(tmp_path / "wrongkey")
    config = write_config(work, srv.url)
    proc = snakemake(work, "--configfile", str(config.name), cache=tmp_path / "cache",
                     env={KEY_VAR: wrong}, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "API key rejected" in out and KEY_VAR in out, out[-3000:]
    assert wrong not in out and key not in out
    assert files_containing(work, wrong.encode()) == []
    assert not (results_dir(work, DEFAULT_EXPERIMENT) / "raw").exists()
