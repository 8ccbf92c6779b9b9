"""What every backend returns for one streamed request, how it fails, and the one way every
backend streams: post, check the status, read within the request's deadline, finish."""

from __future__ import annotations

import heapq
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

import requests

from .transport import cut, finish, post_stream


class BackendError(RuntimeError):
    """A request failed at the server or on the wire; the message says what the server said."""


@dataclass
class RequestRecord:
    """One streamed generation. Times are monotonic seconds (time.monotonic())."""

    t_sent: float
    t_first: float | None = None
    t_last: float | None = None  # arrival of the last chunk that carried generated text
    t_done: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    gen_s: float | None = None
    done_reason: str | None = None
    server: dict = field(default_factory=dict)
    chunks: int = 0
    # "server" when gen_s/output_tokens come from the server's own timings, "client" when they
    # were derived from token arrival times on this side (e.g. an OpenAI server without timings)
    timing_source: str = "server"

    def to_raw(self, origin: float) -> dict:
        """Times relative to ``origin`` (the rep's start), as stored in raw files."""
        out = asdict(self)
        for key in ("t_sent", "t_first", "t_last", "t_done"):
            value = out.pop(key)
            out[f"{key}_s"] = None if value is None else value - origin
        return out


class Backend:
    """Interface: subclasses speak one server's protocol."""

    name = "base"

    def __init__(self, base_url: str, target: dict | None = None, timeout_s: float = 300):
        self.base_url = base_url.rstrip("/")
        self.target = target or {}
        self.model = self.target.get("model")
        self.timeout_s = timeout_s
        self.live: set[Deadline] = set()  # the streams being read right now (abort)
        self.aborted = False

    def generate(self, prompt: str, num_predict: int, temperature: float, seed: int,
                 allow_cache: bool = False) -> RequestRecord:  # fmt: skip
        """One streamed generation. ``allow_cache`` lets the server reuse a cached prompt prefix
        (only the control arm and a nonce-less plan ask for it; measured requests never do)."""
        raise NotImplementedError

    def tokenizer(self):
        """A callable text → token count, or None when the server cannot tokenize.

        Without one the plan cannot equalise prompt lengths up front; the checks still verify
        equality from the server-reported prompt token counts.
        """
        return None

    def load(self) -> None:
        """Bring the model into memory with the measured requests' load-time options.

        Called before the warm-up generations; a no-op where the server has nothing to load.
        """

    def describe(self) -> dict:
        """Server facts for the fingerprint and for every raw rep file (version, slots, …)."""
        raise NotImplementedError

    def model_facts(self, described: dict) -> dict:
        """Model facts (quantisation, digest, size …) from what describe() returned."""
        return {}

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def abort(self) -> None:
        """End every stream being read now and any about to start, from any thread: each of
        their generate() calls raises a BackendError at once. For a rep that stops (a failed
        request, an interrupt), so it does not wait for the others to finish or time out."""
        self.aborted = True
        for deadline in list(self.live):
            deadline.expire(aborted=True)

    def stream(self, rec: RequestRecord, url: str, read, unreachable, http_error, **kwargs):
        """POST ``url`` as a stream, check its status and ``read(resp, rec)`` its body within
        the request's deadline (``request_timeout_s`` from the moment it was sent, however
        slowly the server trickles), then leave the connection for the next request.

        unreachable(exc) and http_error(resp) make the backend's own errors; read's result is
        returned; rec.t_done is the moment the final event arrived.
        """
        # the whole request, headers included, within request_timeout_s from its sending
        with Deadline(self.timeout_s, self.live) as deadline:
            if self.aborted:
                deadline.expire(aborted=True)
            try:
                resp = post_stream(self.session, rec, url, self.now, deadline,
                                   timeout=(10, self.timeout_s), **kwargs)  # fmt: skip
            except requests.RequestException as exc:
                raise self._cut_short(deadline, url, rec) or unreachable(exc) from None
            with resp:
                deadline.reading(resp)
                if resp.status_code != 200:
                    raise http_error(resp)
                kind = resp.headers.get("Content-Type", "")
                if kind.startswith("text/html"):  # a web site, not an inference server
                    raise BackendError(
                        f"POST {urlsplit(url).path}: {self.base_url} answered a web page "
                        f"({kind}), not a {self.name} stream; are the target's url and backend "
                        "right?"
                    )
                try:
                    result = read(resp, rec)
                except Exception:
                    short = self._cut_short(deadline, url, rec)
                    if short is not None:
                        raise short from None
                    raise
                rec.t_done = self.now()
                finish(resp)
        return result

    def _cut_short(self, deadline: "Deadline", url: str, rec: RequestRecord):
        """The error for a request its deadline or an abort ended, or None if neither did."""
        path = urlsplit(url).path
        if deadline.aborted:
            return BackendError(f"POST {path} was abandoned after {rec.chunks} chunks: the rep "
                                "stopped")  # fmt: skip
        if deadline.expired:
            return BackendError(
                f"POST {path} took longer than request_timeout_s ({self.timeout_s:g} s) after "
                f"{rec.chunks} chunks; the server is too slow or stalled (raise "
                "request_timeout_s if it is only slow)"
            )
        return None


class _Watcher:
    """One daemon thread that expires every Deadline when its time comes: a thread per
    request (threading.Timer) cost its start, ~0.5 ms, between a worker becoming free and its
    next request going out (send lag)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.heap: list[tuple[float, int, "Deadline"]] = []
        self.seq = 0
        self.thread: threading.Thread | None = None

    def add(self, deadline: "Deadline", due: float) -> None:
        with self.cond:
            self.seq += 1
            heapq.heappush(self.heap, (due, self.seq, deadline))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="slotbench-deadlines",
                                               daemon=True)  # fmt: skip
                self.thread.start()
            elif self.heap[0][2] is deadline:
                self.cond.notify()  # an earlier deadline than the one being waited for

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    self.cond.wait(None if not self.heap else self.heap[0][0] - time.monotonic())
                _, _, deadline = heapq.heappop(self.heap)
            if not deadline.done:
                deadline.expire()


_WATCHER = _Watcher()


class Deadline:
    """Cuts a request when its time is up, so a read blocked on a server that queues, trickles
    or stalls returns (with an error) instead of holding the request forever; while it runs it
    is in ``live`` (Backend.abort). It follows the request: the connection it is written on
    (``sending``), then the response being read (``reading``)."""

    def __init__(self, seconds: float, live: set | None = None):
        self.conn = self.resp = None
        self.expired = self.aborted = self.done = False
        self.live = live if live is not None else set()
        self.lock = threading.Lock()
        self.seconds = max(0.0, seconds)

    def sending(self, conn) -> None:
        with self.lock:
            self.conn = conn
        if self.expired:  # expired before the bytes went out: do not wait for an answer
            cut(conn)

    def reading(self, resp: requests.Response) -> None:
        with self.lock:
            self.resp = resp
        if self.expired:
            cut(self.conn, resp)

    def expire(self, aborted: bool = False) -> None:
        self.aborted = self.aborted or aborted
        with self.lock:
            if self.done:  # the request is over; its connection may serve the next one
                return
            self.expired = True
            conn, resp = self.conn, self.resp
        try:
            cut(conn, resp)
        except Exception:  # noqa: BLE001 - cutting is all we can do; the read will fail
            pass

    def __enter__(self) -> "Deadline":
        self.live.add(self)
        _WATCHER.add(self, time.monotonic() + self.seconds)
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.done = True
        self.live.discard(self)


def finite(value, field_name: str, rec: RequestRecord):
    """A server's number as sent, or None when it is not a finite number (NaN, infinity, text),
    noted in rec.server["invalid"] so the cross-check names it and raw files stay valid JSON."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if math.isfinite(number):
        return value
    note = f"{field_name}={value!r}"
    if note not in rec.server.setdefault("invalid", []):
        rec.server["invalid"].append(note)
    return None
