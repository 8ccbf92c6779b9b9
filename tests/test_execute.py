"""Rep execution: N in flight per arm, same work everywhere, failures name their place."""

import asyncio
import time

import pytest

from slotbench.backends import Backend, BackendError, RequestRecord
from slotbench.consolidate import consolidate
from slotbench.execute import RepError, run_rep
from slotbench.plan import make_rep_plan, run_plan
from slotbench.rawfiles import write_json_atomic

SETTINGS = {"arms": [1, 2, 4], "requests_per_cell": 4, "num_predict": 5, "temperature": 0.0,
            "warmup_predict": 2, "request_timeout_s": 5}


class CountingBackend(Backend):
    """Records how many requests are in flight; every request 'generates' num_predict tokens."""

    def __init__(self, fail_on=None):
        super().__init__("http://127.0.0.1:9")
        self.in_flight = 0
        self.peaks = []
        self.calls = 0
        self.fail_on = fail_on

    def prepare(self, prompt, num_predict, temperature, seed, allow_cache=False):
        return num_predict

    async def send(self, client, num_predict, finish=True):
        rec = RequestRecord(t_sent=time.monotonic())
        self.calls += 1  # one event loop: no lock needed
        call = self.calls
        self.in_flight += 1
        self.peaks.append(self.in_flight)
        try:
            if call == self.fail_on:
                raise BackendError("connection refused")
            await asyncio.sleep(0.03)
            rec.t_first = time.monotonic()
            await asyncio.sleep(0.02)
            rec.output_tokens, rec.gen_s, rec.prompt_tokens = num_predict, 0.02, 10
            rec.done_reason = "length"
            rec.t_done = time.monotonic()
            return rec
        finally:
            self.in_flight -= 1

    def finish(self, rec):
        return rec


class FakeConnection:
    def __init__(self, backend):
        self.backend = backend
        self.server = None
        self.target = {"name": "t", "backend": "fake", "managed": False}

    def describe(self):
        return {"backend": "fake", "managed": False}


def plan():
    p = run_plan("t", "run1", [1, 2, 4], 4, 1, "Request {nonce}. Go.", 6)
    return p | {"reps": [make_rep_plan(p, rep) for rep in (1, 2)]}


def test_each_arm_keeps_exactly_its_concurrency_in_flight():
    p = plan()
    rep = p["reps"][0]
    peaks = {}
    for cell in rep["cells"]:
        backend = CountingBackend()
        one_cell = dict(rep, cells=[cell], warmup=rep["warmup"][:1])
        run_rep(FakeConnection(backend), p, one_cell, SETTINGS, {"commit": "x", "dirty": False})
        peaks[cell["arm"]] = max(backend.peaks[1:])  # the first call is the warm-up
        assert backend.calls == 1 + 4
    assert peaks == {1: 1, 2: 2, 4: 4}


def test_raw_record_has_every_request_in_rep_time(tmp_path):
    p = plan()
    raw = run_rep(FakeConnection(CountingBackend()), p, p["reps"][1], SETTINGS,
                  {"commit": "abc", "dirty": True})
    assert raw["order"] == p["reps"][1]["order"]
    assert [c["arm"] for c in raw["cells"]] == raw["order"]
    for cell in raw["cells"]:
        assert len(cell["requests"]) == 4
        for r in cell["requests"]:
            assert 0 <= r["t_sent_s"] < r["t_first_s"] < r["t_done_s"]
    path = tmp_path / "rep2.json"
    write_json_atomic(path, raw)
    requests, cells = consolidate([str(path)])
    assert len(requests) == 12 and len(cells) == 3
    assert (cells["tokens_out"] == 20).all()
    assert cells["code_commit"].eq("abc").all()


def test_a_failing_request_names_target_run_rep_arm_and_request():
    p = plan()
    rep = p["reps"][0]
    # warm-up takes calls 1-4; fail the 2nd request of the first measured cell
    with pytest.raises(RepError) as err:
        run_rep(FakeConnection(CountingBackend(fail_on=6)), p, rep, SETTINGS, {})
    msg = str(err.value)
    first = rep["cells"][0]
    assert f"target t, run run1, rep 1, arm {first['arm']} (position 0), request" in msg
    assert "connection refused" in msg and "resumes" in msg


def test_a_failing_warm_up_is_named_too():
    p = plan()
    with pytest.raises(RepError, match="rep 1, warm-up, request"):
        run_rep(FakeConnection(CountingBackend(fail_on=1)), p, p["reps"][0], SETTINGS, {})
