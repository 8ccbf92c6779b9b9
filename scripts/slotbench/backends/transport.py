"""The HTTP transport every backend streams through: connections reused across requests, a
request written in one segment and stamped as sent at that moment, stream lines read as soon as
they arrive (benchmarks/PEERS-NOTES.md measured what each of these costs in TTFT)."""

from __future__ import annotations

import http.client
import socket
import threading

import requests
import requests.adapters
import urllib3.connectionpool
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import DecodeError, ProtocolError, ReadTimeoutError, SSLError

# Connections a backend's session keeps per host. With requests' default (10) and more than
# 10 requests in flight, connections beyond the 10th were closed after use, so later requests
# paid a fresh TCP connect inside their measured TTFT (benchmarks/PEERS-NOTES.md).
POOL_SIZE = 512
READ_SIZE = 1 << 16
# llama-server (cpp-httplib) closes the connection right after every streamed response, though
# it answers "Keep-Alive: timeout=5, max=100". A request sent on that connection before its FIN
# arrives meets a closed socket: "Remote end closed connection without response" (measured: 1
# in 2 of 8-token requests in a row). The server never saw that request, so it is sent again, on
# a fresh connection, with its t_sent taken anew; a server that closes every new connection
# without answering still fails after these retries.
STALE_RETRIES = 2


# per thread: what to call just before a request's first byte is written (post_stream)
_send_clock = threading.local()


class _OneWrite:
    """Connection mixin: the header block and the body go out in one write, and the moment
    of that write is the request's t_sent.

    urllib3 writes the header block and then the body: two segments, and on the server two
    wake-ups before the body is read (measured 0.3-0.5 ms on 2 shared cores). Holding the
    header block until the body is there makes the request one segment.
    """

    _hold = False
    _held = None

    def request(self, method, url, body=None, headers=None, **kwargs):
        self._hold, self._held = bool(body), None
        try:
            super().request(method, url, body=body, headers=headers, **kwargs)
            if self._held is not None:  # no body was written after all: the headers alone
                self._write(self._held)
        finally:
            self._hold, self._held = False, None

    def send(self, data):
        if self._hold and self._held is None:
            self._held = data  # the header block; the body follows at once
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        self._write(data)

    def _write(self, data):
        stamp = getattr(_send_clock, "stamp", None)
        if stamp is not None:
            _send_clock.stamp = None
            stamp(self)
        super().send(data)


class _Connection(_OneWrite, HTTPConnection):
    pass


class _TLSConnection(_OneWrite, HTTPSConnection):
    pass


# named as urllib3's own pools: their names appear in connection errors, which stay as before
class HTTPConnectionPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _Connection


class HTTPSConnectionPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


class _Adapter(requests.adapters.HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": HTTPConnectionPool,
                                                  "https": HTTPSConnectionPool}


class _Session(requests.Session):
    def send(self, request, **kwargs):
        """Send, and send again (at most STALE_RETRIES times, on a fresh connection, with the
        request's t_sent stamped anew) when the server closed the connection without a byte of
        answer."""
        stamp = getattr(_send_clock, "stamp", None)
        given_up = getattr(_send_clock, "given_up", None) or (lambda: False)
        for attempt in range(STALE_RETRIES + 1):
            _send_clock.stamp = stamp
            try:
                return super().send(request, **kwargs)
            except requests.ConnectionError as exc:
                if attempt == STALE_RETRIES or given_up() or not _closed_before_answering(exc):
                    raise
        raise AssertionError("unreachable")


def make_session() -> requests.Session:
    """A session whose pool keeps a connection per concurrent request for reuse, whose
    connections write a request in one segment and stamp its t_sent then (_OneWrite), and which
    sends again a request met by a connection the server had closed (STALE_RETRIES)."""
    session = _Session()
    adapter = _Adapter(pool_connections=4, pool_maxsize=POOL_SIZE)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def stream_lines(resp: requests.Response):
    """The lines of a streamed body (without line endings), each as soon as it has arrived.

    ``resp.iter_lines()`` goes through ``iter_content(512)``: a fixed-size read that, on a
    body that is not chunked (close-delimited streams), waits for 512 bytes or the end, so
    tokens arrive late and in bursts; and, chunked or not, it costs several generator layers
    per token. ``raw.read1`` returns whatever has arrived (chunked decoding and
    content-encoding included). urllib3's errors are raised as the requests exceptions
    ``iter_lines`` raises, so callers' ``except requests.RequestException`` still holds.
    """
    raw = resp.raw
    pending = b""
    while True:
        try:
            data = raw.read1(READ_SIZE, decode_content=True)
        except ProtocolError as exc:
            raise requests.exceptions.ChunkedEncodingError(exc) from exc
        except DecodeError as exc:
            raise requests.exceptions.ContentDecodingError(exc) from exc
        except ReadTimeoutError as exc:
            raise requests.exceptions.ConnectionError(exc) from exc
        except SSLError as exc:
            raise requests.exceptions.SSLError(exc) from exc
        if not data:
            break
        if pending:
            data = pending + data
        lines = data.split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending


def cut(conn=None, resp: requests.Response | None = None) -> None:
    """End a request from another thread, whether it still waits for the response's headers
    (``conn``, the connection it was written on) or is reading the stream (``resp``): the
    thread blocked on it gets an end of stream at once. The socket is shut down rather than
    the response closed, because closing waits for the lock that the blocked read holds (seen:
    a Ctrl-C that waited out every stream in flight)."""
    if conn is None and resp is not None:
        conn = getattr(resp.raw, "_connection", None) or getattr(resp.raw, "connection", None)
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
            return
        except OSError:
            pass
    if resp is not None:
        resp.raw.close()


def finish(resp: requests.Response) -> None:
    """Read what is left of a response whose final event has been seen (the end of the
    chunked body), so the connection goes back to the pool instead of being closed: a closed
    one makes the next request pay a TCP connect inside its TTFT. Errors here are ignored:
    everything measured has already arrived."""
    try:
        resp.raw.drain_conn()
    except Exception:  # noqa: BLE001 - see docstring
        pass


def post_stream(session: requests.Session, rec, url: str, now, deadline=None,
                **kwargs) -> requests.Response:  # fmt: skip
    """``session.post(url, stream=True, **kwargs)``, with ``rec.t_sent`` the moment the
    request's bytes are written (make_session's connections), or, through any other
    connection, the moment it is prepared (body encoded, proxies and auth resolved): the
    client's own set-up work is not the server's latency and must not count in TTFT.

    ``deadline`` (base.Deadline) is told the connection as the request is written, so it can
    cut the request while it still waits for the headers; once it has expired the request
    is not sent again. Raises what ``session.post`` raises."""
    timeout = kwargs.pop("timeout", None)
    prepared = session.prepare_request(requests.Request("POST", url, **kwargs))
    # proxies/verify from the environment, resolved once per session and origin: the
    # lookup scans os.environ and no_proxy on every call (~0.15 ms here)
    origin = prepared.url.split("/", 3)[:3]
    cache = session.__dict__.setdefault("_slotbench_env_settings", {})
    key = "/".join(origin)
    if key not in cache:
        cache[key] = session.merge_environment_settings(prepared.url, {}, True, None, None)
    settings = cache[key]
    rec.t_sent = now()

    def stamp(conn) -> None:
        rec.t_sent = now()
        if deadline is not None:
            deadline.sending(conn)

    _send_clock.stamp = stamp
    _send_clock.given_up = (lambda: deadline.expired) if deadline is not None else None
    try:
        return session.send(prepared, timeout=timeout, allow_redirects=True, **settings)
    finally:
        _send_clock.stamp = _send_clock.given_up = None


def _closed_before_answering(exc: BaseException) -> bool:
    """Whether the server closed the connection without a byte of response: a kept-alive
    connection it had already closed (see STALE_RETRIES), not an answer."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
            return True
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
    return False
