"""benchmarks/pacer.py speaks every backend's wire format and its truth log is the truth.

Fast (a few seconds) and standard library only on the server side; the backends are
slotbench's own, so this also checks the streaming client against a known schedule.
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from pacer import PacerConfig, PacerThread  # noqa: E402

from slotbench.backends import make_backend  # noqa: E402

FORMATS = {
    "llamacpp": {"backend": "llamacpp"},
    "ollama": {"backend": "ollama"},
    "openai": {"backend": "openai", "endpoint": "completions"},
    "openai-chat": {"backend": "openai", "endpoint": "chat"},
}


@pytest.fixture
def pacer(tmp_path):
    log = tmp_path / "truth.jsonl"
    with PacerThread(PacerConfig(ttft_ms=20, gap_ms=4, slots=2, truth_log=str(log))) as url:
        yield url, log


def truth(log: Path, wait_for: str | None = None) -> dict:
    """The truth log by request id; the pacer writes a request's line just after its last
    bytes, so the client can be a moment ahead of it."""
    deadline = time.monotonic() + 2
    while True:
        found = {r["id"]: r for r in map(json.loads, log.read_text().splitlines())}
        if wait_for is None or wait_for in found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_streams_the_requested_tokens_and_logs_them(pacer, fmt):
    url, log = pacer
    backend = make_backend({"name": "p", "managed": False, "url": url, "model": "pacer",
                            **FORMATS[fmt]}, url, 10)  # fmt: skip
    backend.describe()  # the fingerprint endpoints answer
    rec = backend.generate("Request 004711 tell me a story", 6, 0.0, 1)
    assert (rec.output_tokens, rec.chunks, rec.prompt_tokens) == (6, 6, 6)
    assert rec.done_reason == "length"
    row = truth(log, "004711")["004711"]
    assert row["completed"] and row["n_written"] == 6
    assert row["t_tok"][0] - row["t_slot"] >= 0.020  # never early
    # the client saw every write after it happened, and in time order; the pacer stamps a token
    # when its write has drained, which a loaded machine can let the client see first
    assert rec.t_sent <= row["t_body"] <= row["t_tok"][0] <= rec.t_first + 0.002
    assert rec.t_first <= rec.t_last <= rec.t_done
    if rec.timing_source == "server":  # llama.cpp and Ollama report the truth-log durations
        assert rec.gen_s == pytest.approx(row["t_tok"][-1] - row["t_tok"][0], abs=1e-6)


def test_slots_queue_requests_beyond_them(pacer):
    url, log = pacer
    backend = make_backend({"name": "p", "backend": "llamacpp", "managed": False, "url": url},
                           url, 10)  # fmt: skip
    with ThreadPoolExecutor(4) as pool:
        recs = list(pool.map(lambda i: backend.generate(f"Request 9{i:05d} x", 4, 0.0, 1),
                             range(4)))  # fmt: skip
    rows = truth(log)
    assert len(rows) == 4 and all(r.output_tokens == 4 for r in recs)
    waits = sorted(r["t_slot"] - r["t_body"] for r in rows.values())
    assert waits[1] < 0.01 < waits[2]  # two slots: the third and fourth request waited
