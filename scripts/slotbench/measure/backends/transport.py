"""How every backend talks HTTP: streamed generations on an asyncio event loop, the control
plane (fingerprint, /props, /tokenize …) through ``requests``.

A streamed generation is the instrument, so its path does as little as it can per chunk: the
protocol stamps ``time.monotonic()`` the moment bytes arrive (``data_received``), a C parser
(httptools) takes off the HTTP framing, and the body is kept as (arrival time, bytes) pairs.
Nothing is parsed as JSON while a stream runs: the backend parses every event strictly once the
stream is over (``Backend.parse``), so a parse never delays another stream's stamp. The only
per-chunk look is a substring test for an error event, so a server that reports an error
mid-stream ends the request at once (``Backend.error_event``).

Kept from the threaded client it replaces: connections reused across requests (``Pool``), each
request written in one segment and stamped as sent at that write, the whole-request deadline
(``request_timeout_s`` from the write, however slowly the server trickles), a request the server
closed without a byte of answer sent again on a fresh connection (``STALE_RETRIES``), and an
abort that ends every stream in flight at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

import httptools
import requests
import requests.adapters

# llama-server (cpp-httplib) closes the connection right after every streamed response, though
# it answers "Keep-Alive: timeout=5, max=100". A request sent on that connection before its FIN
# arrives meets a closed socket (measured: 1 in 2 of 8-token requests in a row). The server
# never saw that request, so it is sent again on a fresh connection, with its t_sent taken
# anew; a server that closes every new connection without answering still fails after these.
STALE_RETRIES = 2
# A connection not made in this long is an unreachable server.
CONNECT_TIMEOUT_S = 10
# Connections the control plane's session keeps per host.
POOL_SIZE = 64
# How often a caller waiting for the loop looks up (and so sees a Ctrl-C).
WAIT_STEP_S = 0.05
# An error event's marks: only a chunk holding one of these is looked at before the stream ends.
ERROR_MARKS = (b'"error"', b"error:")

monotonic = time.monotonic


class StreamError(Exception):
    """The connection failed: refused, reset, closed mid-answer, or cut by a deadline."""


class Stale(StreamError):
    """The server closed a kept-alive connection without a byte of answer."""


class Answer:
    """A streamed response: status, headers, and the body as it arrived.

    ``reads`` holds (arrival time, bytes) per piece of body the parser handed over (chunked
    framing removed); ``error`` is the failure that ended the body early, if one did.
    Shaped like ``requests.Response`` where backends read an error body (status_code, reason,
    text, json()).
    """

    __slots__ = ("status_code", "reason", "headers", "reads", "t_sent", "t_headers", "t_done",
                 "error", "complete", "cut_reason", "error_event")

    def __init__(self):
        self.status_code = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.reads: list[tuple[float, bytes]] = []
        self.t_sent = self.t_headers = self.t_done = None
        self.error: BaseException | None = None
        self.complete = False
        self.cut_reason: str | None = None  # "deadline" or "abort" when this side ended it
        self.error_event = False  # the body holds an error event (seen as it arrived)

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.reads)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        import json

        return json.loads(self.body)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, one request at a time; httptools calls the on_* methods."""

    def __init__(self, pool: "Pool"):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = None
        self.answer: Answer | None = None
        self.waiter: asyncio.Future | None = None
        self.watch = None  # backend's error look, for chunks holding an ERROR_MARK
        self.t = 0.0
        self.closed = False
        self.got_bytes = False
        self.headers_done = False
        self.framed = False  # the body has a length or chunks (else it ends at EOF)
        self.keep = False

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        self.t = monotonic()  # before anything else: the arrival, not the parse
        if self.parser is None:  # bytes nobody asked for (a server talking out of turn)
            self.closed = True
            self.transport.abort()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(StreamError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(StreamError(f"not an HTTP answer ({exc}): {data[:120]!r}"))

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.waiter is None or self.waiter.done():
            return
        if self.headers_done and not self.framed:  # a close-delimited body ends here
            self._complete()
        elif not self.got_bytes and self.answer.cut_reason is None:
            self._fail(Stale(f"the server closed the connection without answering ({exc})"
                             if exc else "the server closed the connection without answering"))
        else:
            self._fail(StreamError(str(exc) if exc else "the server closed the connection"))

    # -- httptools callbacks ---------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.answer.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_status(self, status: bytes) -> None:
        self.answer.reason = status.decode("latin-1", errors="replace")

    def on_headers_complete(self) -> None:
        answer = self.answer
        answer.status_code = self.parser.get_status_code()
        answer.t_headers = self.t
        self.headers_done = True
        self.framed = ("content-length" in answer.headers
                       or "chunked" in answer.headers.get("transfer-encoding", "").lower())
        self.keep = self.parser.should_keep_alive() and self.framed

    def on_body(self, body: bytes) -> None:
        self.answer.reads.append((self.t, body))
        if self.watch is not None and (ERROR_MARKS[0] in body or ERROR_MARKS[1] in body):
            if self.watch(body):  # an error event: the answer is over, whatever follows
                self.answer.error_event = True
                self.keep = False
                self._complete()

    def on_message_complete(self) -> None:
        self._complete()

    # -- the request -----------------------------------------------------------------------

    def _complete(self) -> None:
        answer = self.answer
        if self.waiter is None or self.waiter.done():
            return
        answer.t_done = self.t
        answer.complete = True
        self.waiter.set_result(answer)

    def _fail(self, exc: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.answer.error = exc
            self.waiter.set_result(self.answer)
        self.keep = False
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    def cut(self, reason: str) -> None:
        """End the request now (its deadline, or the rep stopping): the socket is dropped."""
        if self.answer is not None and self.waiter is not None and not self.waiter.done():
            self.answer.cut_reason = reason
            self._fail(StreamError(f"cut ({reason})"))

    async def exchange(self, data: bytes, answer: Answer, watch) -> Answer:
        self.answer, self.watch = answer, watch
        self.parser = httptools.HttpResponseParser(self)
        self.got_bytes = self.headers_done = self.framed = self.keep = False
        self.waiter = asyncio.get_running_loop().create_future()
        answer.t_sent = monotonic()
        self.transport.write(data)  # head and body together: one segment
        return await self.waiter


class Pool:
    """Kept-alive connections to one origin, one request on each at a time."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.authority = parts.netloc.rsplit("@", 1)[-1]
        self.idle: list[_Connection] = []
        self.busy: set[_Connection] = set()
        self._ssl = ssl.create_default_context() if self.tls else None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: _Connection(self), self.host, self.port, ssl=self._ssl),
            CONNECT_TIMEOUT_S)
        return conn

    async def acquire(self, fresh: bool = False) -> _Connection:
        while self.idle and not fresh:
            conn = self.idle.pop()
            if not conn.closed:
                self.busy.add(conn)
                return conn
        conn = await self._connect()
        self.busy.add(conn)
        return conn

    def release(self, conn: _Connection) -> None:
        self.busy.discard(conn)
        conn.parser = conn.answer = conn.waiter = conn.watch = None
        if conn.keep and not conn.closed:
            self.idle.append(conn)
        elif not conn.closed:
            conn.closed = True
            conn.transport.close()

    def forget(self, conn: _Connection) -> None:
        if conn in self.idle:
            self.idle.remove(conn)

    def close(self) -> None:
        for conn in list(self.idle) + list(self.busy):
            if conn.transport is not None and not conn.closed:
                conn.closed = True
                conn.transport.abort()
        self.idle.clear()
        self.busy.clear()


class Client:
    """Streamed POSTs on the running event loop, with a deadline each and a shared abort."""

    def __init__(self):
        self.pools: dict[str, Pool] = {}
        self.live: set[_Connection] = set()
        self.aborted = False

    def _pool(self, url: str) -> Pool:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        pool = self.pools.get(origin)
        if pool is None:
            pool = self.pools[origin] = Pool(url)
        return pool

    async def post(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float,
                   watch=None) -> Answer:
        """POST ``body`` and read the streamed answer within ``timeout_s`` of the write.

        Raises StreamError when the server cannot be reached; otherwise returns the Answer,
        whose ``error`` says why its body ended early (``cut_reason`` when this side cut it).
        """
        pool = self._pool(url)
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"POST {path} HTTP/1.1", f"Host: {pool.authority}",
                f"Content-Length: {len(body)}", "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        loop = asyncio.get_running_loop()
        answer = Answer()
        for attempt in range(STALE_RETRIES + 1):
            if self.aborted:
                answer.cut_reason = "abort"
                answer.error = StreamError("cut (abort)")
                return answer
            answer = Answer()
            try:
                conn = await pool.acquire(fresh=attempt > 0)
            except asyncio.TimeoutError:
                raise StreamError(f"no connection within {CONNECT_TIMEOUT_S} s") from None
            except OSError as exc:
                raise StreamError(str(exc) or type(exc).__name__) from None
            self.live.add(conn)
            timer = loop.call_later(timeout_s, conn.cut, "deadline")
            try:
                await conn.exchange(data, answer, watch)
            finally:
                timer.cancel()
                self.live.discard(conn)
                pool.release(conn)
            if not isinstance(answer.error, Stale) or attempt == STALE_RETRIES:
                return answer
        return answer

    def abort(self) -> None:
        """End every request in flight, and any about to start (call on the loop's thread)."""
        self.aborted = True
        for conn in list(self.live):
            conn.cut("abort")

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()


def lines(reads: list[tuple[float, bytes]]):
    """(arrival time, line) for each line of a body read as ``reads``, without line endings;
    a line is stamped with the arrival of the read that completed it."""
    pending = b""
    t = None
    for t, data in reads:
        if pending:
            data = pending + data
        parts = data.split(b"\n")
        pending = parts.pop()
        for line in parts:
            yield t, (line[:-1] if line.endswith(b"\r") else line)
    if pending:
        yield t, pending


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (a third of asyncio's cost per chunk, measured
    in benchmarks/RESULTS.md), else asyncio's; SLOTBENCH_LOOP=asyncio picks asyncio's."""
    if os.environ.get("SLOTBENCH_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


class LoopThread:
    """An event loop on a daemon thread, with a Client, for callers that are not coroutines:
    ``run(coro)`` waits for it from any thread; ``call(fn)`` runs fn on the loop's thread."""

    def __init__(self):
        self.loop = new_loop()
        self.client: Client | None = None
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self.loop)
            self.client = Client()
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, name="slotbench-client-loop", daemon=True)
        self.thread.start()
        ready.wait()

    def run(self, coro):
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            # waited for in short steps: a wait without a timeout is a lock the main thread
            # blocks on, and a Ctrl-C delivered meanwhile is seen only when the coroutine ends
            while not concurrent.futures.wait([future], timeout=WAIT_STEP_S)[0]:
                pass
            return future.result()
        except BaseException:  # an interrupt while waiting: the coroutine must not go on
            future.cancel()
            raise

    def call(self, fn, *args) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)


def make_session() -> requests.Session:
    """The control plane's session (fingerprint, /props, /tokenize, model load): connections
    kept for reuse."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
