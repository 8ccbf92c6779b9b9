"""The llama.cpp client against a server that misbehaves (tests/doubles/fault_server.py): a
deadline for the whole request, streams ended at once when a rep stops, and every fault a
BackendError that says what the server did."""

from __future__ import annotations

import threading
import time

import pytest

from doubles.fault_server import FaultServer
from doubles.wait import wait_for
from slotbench.measure.backends import BackendError
from slotbench.measure.backends.llamacpp import LlamaCppBackend


@pytest.fixture
def server():
    with FaultServer(slots=8, measured_predict=8, trickle_s=0.5, hold_s=20) as srv:
        yield srv


def gen(backend: LlamaCppBackend, n: int = 8):
    return backend.generate("Request 123456. Say something.", n, 0.0, 1)


def test_a_healthy_stream_is_recorded_whole(server):
    rec = gen(LlamaCppBackend(server.url, timeout_s=5))
    assert rec.chunks == rec.output_tokens == 8
    assert rec.t_sent < rec.t_first <= rec.t_last <= rec.t_done
    assert rec.gen_s > 0 and "invalid" not in rec.server


@pytest.mark.parametrize("fault", ["trickle", "silence"])
def test_request_timeout_bounds_the_whole_request(server, fault):
    server.arm(fault)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"took longer than request_timeout_s \(1\.5 s\)"):
        gen(LlamaCppBackend(server.url, timeout_s=1.5))
    assert time.monotonic() - t0 < 4  # a trickle of one byte per 0.5 s would take minutes


@pytest.mark.parametrize("pace", ["slow tokens", "silence", "queued"])
def test_abort_ends_the_streams_in_flight_at_once(server, pace):
    """Streams being read, streams the server went silent on, and requests the server has
    queued (no headers yet: one slot, three requests) all end at once."""
    if pace == "silence":  # nothing arrives: a read blocks until the server's 20 s hold ends
        server.arm("silence")
    else:
        server.token_s = 0.5  # 8 tokens: 4 s per request
    if pace == "queued":
        server.stop()
        server = FaultServer(slots=1, token_s=0.5).start()
    backend = LlamaCppBackend(server.url, timeout_s=60)
    errors = []

    def one():
        try:
            gen(backend)
        except BackendError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    wait_for(lambda: server.in_flight >= min(3, server.slots)
             and server.hits.get("/completion", 0) >= 3, 10,
             "three requests at the server, as many in flight as it has slots", interval=0.02)
    t0 = time.monotonic()
    backend.abort()
    for t in threads:
        t.join(5)
    assert time.monotonic() - t0 < 1.5
    assert len(errors) == 3 and all("was abandoned after" in e for e in errors)
    with pytest.raises(BackendError, match="abandoned"):  # and none starts after
        gen(backend)
    if pace == "queued":
        server.stop()


@pytest.mark.parametrize("fault, message", [
    ("die", r"stream broke after 2 tokens"),
    ("malformed", r"not a llama-server stream event after 2 tokens"),
    ("error_event", r"server error mid-stream after 2 tokens: slot 0 failed: llama_decode "
                    r"returned -3"),
    ("http404", r"POST /completion: HTTP 404: File Not Found"),
    ("http500", r"POST /completion: HTTP 500: llama_decode failed: out of memory"),
    ("http503", r"POST /completion: HTTP 503: Loading model"),
])
def test_each_fault_is_a_backend_error_that_says_what_happened(server, fault, message):
    server.arm(fault)
    with pytest.raises(BackendError, match=message):
        gen(LlamaCppBackend(server.url, timeout_s=5))


def test_non_finite_server_numbers_are_dropped_and_named(server):
    server.arm("nan_timings")
    rec = gen(LlamaCppBackend(server.url, timeout_s=5))
    assert rec.gen_s is None and rec.server["prompt_ms"] is None
    assert rec.server["invalid"] == ["predicted_ms=nan", "prompt_ms=nan"]


def test_a_web_page_is_named_as_the_wrong_protocol(server):
    server.web_page = True
    backend = LlamaCppBackend(server.url, timeout_s=5)
    with pytest.raises(
        BackendError,
        match=r"answered an HTML page titled \"Welcome to nginx!\", not llama-server's JSON; "
        r"is the target's url a llama-server",
    ):
        backend.describe()
    with pytest.raises(BackendError, match=r"not llama-server's token list"):
        backend.count_tokens("hello")


def test_a_refused_connection_is_named(server):
    url = server.url
    server.stop()
    with pytest.raises(BackendError, match=r"POST /completion: cannot reach http://127\.0\.0\.1"):
        gen(LlamaCppBackend(url, timeout_s=5))


def test_a_web_page_where_the_stream_should_be_is_named(server):
    server.web_page = True
    with pytest.raises(
        BackendError,
        match=r"POST /completion: http://127\.0\.0\.1:\d+ answered a "
        r"web page \(text/html\), not a llamacpp stream",
    ):
        gen(LlamaCppBackend(server.url, timeout_s=5))


def test_a_server_that_closes_after_every_stream_costs_no_request(server, monkeypatch):
    """llama-server closes the connection right after each streamed response (while saying
    Keep-Alive); the next request, sent on that connection before the FIN arrives, is sent
    again on a fresh one instead of failing the rep."""
    from slotbench.measure.backends import transport

    server.close_after_stream = True
    server.token_s = 0.0

    def burst(backend) -> int:
        failed = 0
        for _ in range(40):
            try:
                gen(backend, n=1)
                backend.count_tokens("a few words")  # a plain request on the same pool
            except BackendError:
                failed += 1
        return failed

    assert burst(LlamaCppBackend(server.url, timeout_s=5)) == 0
    assert server.hits["/completion"] == 40
    monkeypatch.setattr(transport, "STALE_RETRIES", 0)  # without the retry, the race shows
    assert burst(LlamaCppBackend(server.url, timeout_s=5)) > 0
