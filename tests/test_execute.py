"""Rep execution: N in flight per arm, same work everywhere, failures name their place."""

import asyncio
import time

import pytest

from slotbench.measure.backends import Backend, BackendError, RequestRecord
from slotbench.measure.execute import RepError, run_rep, warm_up_requests
from slotbench.measure.plan import make_rep_plan, run_plan
from slotbench.measure.rawfiles import write_json_atomic
from slotbench.tables.consolidate import consolidate

SETTINGS = {"arms": [1, 2, 4], "requests_per_cell": 4, "num_predict": 5, "temperature": 0.0,
            "warmup_predict": 2, "request_timeout_s": 5, "cooldown_s": 0,
            "thermal_interval_s": 1.0}


class CountingBackend(Backend):
    """Records how many requests are in flight; every request 'generates' num_predict tokens."""

    def __init__(self, fail_on=None, body=None):
        super().__init__("http://127.0.0.1:9")
        self.body = body  # the failed request's whole answer
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
                raise BackendError("connection refused", body=self.body)
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
    """A Connection's face: ``reps_before`` as the run's server would say it."""

    def __init__(self, backend, reps_before: int = 0):
        self.backend = backend
        self.server = None
        self.target = {"name": "t", "backend": "fake", "managed": False}
        self._reps_before = reps_before
        self.reps_measured = 0

    def describe(self):
        return {"backend": "fake", "managed": False}

    def reps_before(self):
        return self._reps_before

    def rep_measured(self):
        self.reps_measured += 1


def plan():
    p = run_plan("t", "run1", [1, 2, 4], 4, 1, "Request {nonce}. Go.", 6, nonces=True,
                 control_arm=False)
    return p | {"reps": [make_rep_plan(p, rep, client_processes=1) for rep in (1, 2)]}


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


def test_a_failing_request_carries_the_servers_whole_answer_for_the_log():
    p = plan()
    with pytest.raises(RepError) as err:
        run_rep(FakeConnection(CountingBackend(fail_on=6, body="<html>the page</html>")), p,
                p["reps"][0], SETTINGS, {})
    assert err.value.body == "<html>the page</html>"


def test_a_failing_warm_up_is_named_too():
    p = plan()
    with pytest.raises(RepError, match="rep 1, warm-up, request"):
        run_rep(FakeConnection(CountingBackend(fail_on=1)), p, p["reps"][0], SETTINGS, {})


@pytest.mark.slow  # client processes: seconds
def test_a_server_that_measured_a_rep_is_warmed_up_with_one_request_per_client_process():
    p = plan()
    rep = p["reps"][0]
    fresh, reused = FakeConnection(CountingBackend()), FakeConnection(CountingBackend(), 3)
    first = run_rep(fresh, p, rep, SETTINGS, {})
    later = run_rep(reused, p, rep, SETTINGS, {})
    measured = 3 * 4
    assert len(rep["warmup"]) == 4  # one request per stream of the widest arm
    assert fresh.backend.calls == measured + 4 and reused.backend.calls == measured + 1
    assert {k: first["warmup"][k] for k in ("requests", "server_reps_before")} == {
        "requests": 4, "server_reps_before": 0}
    assert {k: later["warmup"][k] for k in ("requests", "server_reps_before")} == {
        "requests": 1, "server_reps_before": 3}
    assert fresh.reps_measured == reused.reps_measured == 1
    # a failed rep tells the server nothing
    failing = FakeConnection(CountingBackend(fail_on=3), 1)
    with pytest.raises(RepError):
        run_rep(failing, p, rep, SETTINGS, {})
    assert failing.reps_measured == 0


def test_the_lighter_warm_up_keeps_one_request_for_each_client_process():
    p = plan()
    rep = make_rep_plan(p, 1, client_processes=2)
    assert len(rep["warmup_shares"]) == 2
    warm, shares = warm_up_requests(rep, 1)
    assert [s["process"] for s in shares] == [0, 1] and all(s["streams"] == 1 for s in shares)
    assert [w["request"] for w in warm] == sorted(i for s in shares for i in s["requests"])
    assert len(warm) == 2 and all(w in rep["warmup"] for w in warm)
    assert warm_up_requests(rep, 0) == (rep["warmup"], rep["warmup_shares"])
