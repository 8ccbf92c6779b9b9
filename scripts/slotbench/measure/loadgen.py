"""The load generator: one client process's share of a cell, on one event loop.

A closed-loop arm of N streams is N coroutines on one event loop, each sending its next request
the moment its previous one is done, so every arm does the same work with exactly N in flight.
The loop is the instrument, so the cell keeps it free of surprises:

- request bodies are encoded before the cell starts;
- the garbage collector is frozen and off for the cell (a collection of a big heap is a pause of
  milliseconds in the middle of a stream);
- bodies are parsed after the cell's last request (backends/transport.py stamps arrivals);
- a timer every ``LAG_INTERVAL_S`` measures how late the loop ran it: a loop that is late on its
  own timer is late on every chunk too. With the loop's CPU time and the share of the cell's wall
  clock it was busy, that is the evidence the client self-check judges (checks/saturation.py).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from contextlib import contextmanager
from typing import Iterator

from slotbench.measure.backends import Backend, BackendError
from slotbench.measure.backends.transport import loop_name

# how often the event-loop lag is sampled during a cell
LAG_INTERVAL_S = 0.010
# How early an event-loop timer may fire (uvloop's have millisecond resolution): an arrival
# sleeps until this long before its moment, then yields turn by turn to it.
EARLY_WAKE_S = 0.0015
# A test hook: CPU seconds burnt per chunk received, to starve the client on purpose.
CHUNK_DELAY_ENV = "SLOTBENCH_CLIENT_CHUNK_DELAY_S"


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


async def _lag_probe(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        due = time.monotonic() + LAG_INTERVAL_S
        await asyncio.sleep(LAG_INTERVAL_S)
        samples.append(max(0.0, time.monotonic() - due))


def _starve_hook() -> None:
    """Burn CPU on every chunk received when CHUNK_DELAY_ENV asks for it (tests only)."""
    delay = float(os.environ.get(CHUNK_DELAY_ENV, "0") or 0)
    if delay <= 0:
        return
    from slotbench.measure.backends import transport

    if getattr(transport._Connection, "_starved", False):
        return
    original = transport._Connection.data_received

    def data_received(self, data: bytes) -> None:
        original(self, data)
        end = time.thread_time() + delay
        while time.thread_time() < end:
            pass

    transport._Connection.data_received = data_received
    transport._Connection._starved = True


class _Sender:
    """One cell's requests from this process, prepared: sent closed-loop (a fixed number of
    streams, each sending its next request when its last is done) or open (each request at its
    planned moment), and stopped at the first failure."""

    def __init__(self, backend: Backend, client, prepared: list, sessions=None):
        self.backend, self.client, self.prepared = backend, client, prepared
        self.results: list = [None] * len(prepared)
        self.next = 0
        self.failed: tuple[int, BackendError] | None = None
        self.sessions = sessions  # a conversation's: Sessions

    def load(self, t0: float, streams: int, arrivals: list[float] | None,
             max_in_flight: int | None) -> list:
        """The coroutines of the cell's load, starting at ``t0``."""
        if self.sessions is not None:
            return [self.converse() for _ in range(max(1, min(streams,
                                                              len(self.sessions.turns))))]
        if arrivals is None:
            return [self.stream() for _ in range(max(1, min(streams, len(self.prepared))))]
        cap = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        return [self.arrive(i, t0 + offset, cap) for i, offset in enumerate(arrivals)]

    async def one(self, i: int, cap: asyncio.Semaphore | None = None) -> bool:
        """Send request i (within ``cap`` if given); False once the cell has failed."""
        try:
            if cap is None:
                self.results[i] = await self.backend.send(self.client, self.prepared[i],
                                                          finish=False)
            else:
                async with cap:
                    self.results[i] = await self.backend.send(self.client, self.prepared[i],
                                                              finish=False)
        except BackendError as exc:
            if self.failed is None:
                self.failed = (i, exc)
                self.client.abort()
            return False
        return True

    async def stream(self) -> None:
        while self.failed is None and self.next < len(self.prepared):
            i = self.next
            self.next += 1
            if not await self.one(i):
                return

    async def converse(self) -> None:
        """Closed loop over conversations: each stream takes the next session and sends its
        turns one after the other, each turn's prompt the last one's with its live reply and
        the turn's own message appended, after the session's think time."""
        chat = self.sessions
        while self.failed is None and self.next < len(chat.turns):
            turns = chat.turns[self.next]
            self.next += 1
            history = ""
            for k, i in enumerate(turns):
                if k and chat.think_s > 0:
                    await asyncio.sleep(chat.think_s)
                prompt = history + chat.requests[i]["prompt"]
                self.prepared[i] = chat.prepare(chat.requests[i], prompt)
                if not await self.one(i):
                    return
                reply = self.backend.reply_text(self.results[i].answer)
                self.results[i].turn = {"session": chat.requests[i]["session"], "turn": k,
                                        "prompt": prompt, "reply": reply}
                history = prompt + reply + chat.separator

    async def arrive(self, i: int, at: float, cap: asyncio.Semaphore | None) -> None:
        # the loop's timers have millisecond resolution and may fire up to 1 ms early: sleep
        # until close, then yield turn by turn (other streams are read meanwhile) to the moment
        while (delay := at - time.monotonic()) > 0:
            await asyncio.sleep(delay - EARLY_WAKE_S if delay > 2 * EARLY_WAKE_S else 0)
        ready = time.monotonic()  # the moment the client got round to it: launch skew
        if self.failed is None and await self.one(i, cap):
            self.results[i].t_planned, self.results[i].t_ready = at, ready

    def finish(self) -> list:
        """The records, parsed; CellFailed names the first request that failed."""
        if self.failed is not None:
            raise CellFailed(*self.failed)
        for i, rec in enumerate(self.results):
            try:
                self.backend.finish(rec)
            except BackendError as exc:
                raise CellFailed(i, exc) from None
        return self.results


@contextmanager
def _collector_paused(measure: bool) -> Iterator[None]:
    """The garbage collector frozen and off for a measured cell."""
    if not measure:
        yield
        return
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


async def run_cell(backend: Backend, client, requests: list[dict], streams: int,
                   num_predict: int, temperature: float, start_at: float | None = None,
                   measure: bool = True, arrivals: list[float] | None = None,
                   max_in_flight: int | None = None, watch=None) -> tuple[list, dict]:
    """Send ``requests`` (dicts with prompt, seed, maybe allow_cache, and a workload's
    output_tokens, each request's own in place of ``num_predict``) with ``streams`` in
    flight from this loop; returns the RequestRecords (aligned with ``requests``, parsed) and
    this process's stats. On the first failure every other stream is ended and
    ``CellFailed`` names the request. ``start_at`` (time.monotonic()) is the start barrier the
    client processes of a cell share.

    With ``arrivals`` (seconds from the cell's start, one per request: plan.arrival_offsets)
    the load is open: each request goes out at its planned moment whether or not earlier ones
    are done (at most ``max_in_flight`` at once, if set), and its record keeps the planned
    moment (``t_planned``), from which its TTFT and latency count: time a request waited for
    the client or for a slot is waiting its user did (coordinated omission). ``t_ready`` is
    when the client got round to it (its launch skew is t_ready - t_planned); a request held
    by the cap waits after that, until its t_sent.

    ``watch`` (a progress line's, slotbench.measure.progress) is handed the list each
    request's record goes into when it is done, once, before the cell starts: the progress
    line reads it from a thread of its own, so the loop does nothing more for it."""
    _starve_hook()

    def prepare(r: dict, prompt: str):
        return backend.prepare(prompt, r.get("output_tokens") or num_predict, temperature,
                               r["seed"], bool(r.get("allow_cache")))

    sessions = Sessions.of(requests, prepare)
    sender = _Sender(backend, client, [prepare(r, r["prompt"]) for r in requests], sessions)
    if watch is not None:
        watch(sender.results)
    lags: list[float] = []
    stop = asyncio.Event()
    with _collector_paused(measure):
        if start_at is not None:
            await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        probe = asyncio.ensure_future(_lag_probe(lags, stop)) if measure else None
        t0, cpu0 = time.monotonic(), time.thread_time()
        await asyncio.gather(*sender.load(t0, streams, arrivals, max_in_flight))
        cpu, t1 = time.thread_time() - cpu0, time.monotonic()
        stop.set()
        if probe is not None:
            await probe
    results = sender.finish()
    lags.sort()
    wall = t1 - t0
    stats = {
        "pid": os.getpid(), "loop": loop_name(asyncio.get_running_loop()),
        "streams": streams, "requests": len(requests), "started": t0, "wall_s": wall,
        "cpu_s": cpu, "busy": cpu / wall if wall > 0 else None,
        "lag_p50_s": _quantile(lags, 0.5), "lag_p95_s": _quantile(lags, 0.95),
        "lag_p99_s": _quantile(lags, 0.99),
        "lag_max_s": lags[-1] if lags else None, "lag_samples": len(lags),
    }
    return results, stats


class Sessions:
    """A conversation workload's cell (requests with ``session`` and ``turn``): each session's
    request indices in turn order, its think time, and how a turn's body is made during the
    cell (its prompt is known only once the last turn's reply is in)."""

    separator = "\n\n"  # between a reply and the next turn's message

    def __init__(self, requests: list[dict], turns: list[list[int]], think_s: float, prepare):
        self.requests, self.turns, self.think_s, self.prepare = requests, turns, think_s, prepare

    @classmethod
    def of(cls, requests: list[dict], prepare) -> "Sessions | None":
        if not requests or "session" not in requests[0]:
            return None
        by_session: dict = {}
        for i, r in enumerate(requests):
            by_session.setdefault(r["session"], []).append((r["turn"], i))
        turns = [[i for _, i in sorted(v)] for _, v in sorted(by_session.items())]
        return cls(requests, turns, float(requests[0]["think_time_s"]), prepare)


class CellFailed(Exception):
    """A request of a cell failed: ``index`` in the list the process was given, ``error``."""

    def __init__(self, index: int, error: BaseException):
        super().__init__(str(error))
        self.index, self.error = index, error
