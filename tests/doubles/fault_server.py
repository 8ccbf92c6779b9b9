"""A scripted llama.cpp ``llama-server`` that misbehaves on purpose, for the fault-injection tests.

It speaks the subset of llama-server's HTTP API that slotbench uses, as llama.cpp's
``tools/server`` defines it:

- ``GET /props``: ``build_info``, ``model_ftype``, ``total_slots`` (the slots, llama-server's
  ``--parallel``), ``modalities``, ``default_generation_settings.n_ctx`` and what the build
  (``build``) reports of its model, ``model_path`` (the ``-m`` argument, ``model_path``) and
  ``model_alias`` (the ``-a`` argument, ``alias``; None: not given), as llama.cpp's builds
  differ: ``"recent"`` reports the alias, or the model file's name without one;
  ``"mid-2025"`` the alias, or ``""``; ``"2024"`` (the default) no ``model_alias``;
  ``"oldest"`` neither key;
- ``GET /v1/models``: ``{"object": "list", "data": [{"id", "object": "model", "created",
  "owned_by": "llamacpp", "meta"}]}``, its one model's id the model's name: a recent build's
  ``model_alias``, an older one's alias or else the model path (``v1_models = False``:
  HTTP 404, a server without that path);
- ``GET /slots``: one object per slot (``id``, ``n_ctx``, ``is_processing``), or, with
  ``slots_endpoint = False`` (llama-server's ``--no-slots``), HTTP 501 with its error body;
- ``POST /tokenize`` ``{"content", "add_special"}`` → ``{"tokens": [...]}`` (one token per
  whitespace-separated word, plus BOS when ``add_special``);
- ``POST /completion`` with ``stream: true``: ``text/event-stream``, chunked; one
  ``data: {"content", "stop": false, ...}`` event per token, then a final ``data:`` event with
  ``stop: true``, ``stop_type`` ("limit" at ``n_predict``), ``tokens_evaluated`` and ``timings``
  (``prompt_n``, ``prompt_ms``, ``predicted_n``, ``predicted_ms``, ``cache_n`` and the per-token
  and per-second rates). An error before streaming is an HTTP status with
  ``{"error": {"code", "message", "type"}}``; an error while streaming is an ``error: {...}``
  event (llama-server's ``server_sent_event(sink, "error", ...)``).

At most ``slots`` requests generate at once (llama-server's slots); the rest wait. Each token
takes ``token_s * (1 + alpha * (generating - 1))``: the slots share the machine, as a real
server's do; with ``drift_per_s``, every token is that much slower per second of the server's
clock (``clock_start``), a machine that drifts on purpose; with ``noise``, each request's
tokens take a factor drawn uniformly from 1 ± noise as long (a seeded draw), a noisy machine. Every ``/completion`` body is recorded, with the most requests that were
generating at one time (``max_in_flight``), so a test can check that nothing was lost, sent
twice, or sent at all.

Faults (``arm(fault, skip=K)``: the first K measured requests are served normally, every later
one gets the fault; warm-up requests, with ``n_predict`` below ``measured_predict``, never do):

========================  =====================================================================
``die``                   the connection drops after two tokens (no final event, no last chunk)
``silence``               headers, then nothing for ``hold_s``
``trickle``               the stream's bytes, one every ``trickle_s``
``malformed``             an event that is not JSON, after two tokens
``error_event``           two tokens, then an ``error:`` event (a slot failed)
``http404`` / ``http500`` / ``http503``   that status with llama-server's error body
``http501_html``          HTTP 501 with a proxy's multi-line HTML error page (``ERROR_PAGE``,
                          titled "501 Not Implemented"), as a server in front of llama-server
                          answers a path it does not forward
``counts``                the stream has the tokens, the final event reports 100 times as many
``negative_timings``      ``predicted_ms`` < 0
``zero_timings``          ``predicted_ms`` = 0
``nan_timings``           ``predicted_ms`` and ``prompt_ms`` are ``NaN`` (bare, as Python writes it)
========================  =====================================================================

``buffering`` holds the tokens on their way, as something between a server and its client
can: ``"nagle"`` leaves Nagle's algorithm on (no ``TCP_NODELAY``), so on a reused connection
each small write waits for the client's delayed ACK and the tokens arrive in bursts; ``"end"``
holds the whole response and sends it when the generation is over (a buffering proxy). The
server still generates each token on time, and its ``timings`` say so.

``tokenize_fault`` (one of the HTTP faults above, e.g. ``"http501_html"``) makes every
``POST /tokenize`` answer with it: the plan's first request, and each rep's, fails there.

``close_after_stream = True`` closes the connection 20 ms after every streamed response, as
llama-server does (while its headers still say ``Keep-Alive``). ``web_page = True`` turns the
whole server into a web site: every path answers an HTML page with
HTTP 200 (the wrong protocol). ``stop()`` closes the socket: connections are refused.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

from .served import Served

FAULTS = ("die", "silence", "trickle", "malformed", "error_event", "http404", "http500",
          "http503", "http501_html", "counts", "negative_timings", "zero_timings", "nan_timings")
HTTP_FAULTS = {
    "http404": (404, "File Not Found", "not_found_error"),
    "http500": (500, "llama_decode failed: out of memory", "server_error"),
    "http503": (503, "Loading model", "unavailable_error"),
}
ERROR_PAGE_TITLE = "501 Not Implemented"
ERROR_PAGE = f"""<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">
<html><head>
<title>{ERROR_PAGE_TITLE}</title>
<style>
  body {{ font-family: sans-serif; margin: 2em; }}
</style>
</head><body>
<h1>Not Implemented</h1>
<p>POST to /tokenize not supported.<br />
</p>
<hr>
<address>Apache/2.4.62 (Debian) Server at 127.0.0.1 Port 80</address>
</body></html>
""".encode()
HTML_FAULTS = {"http501_html": (501, ERROR_PAGE)}
MODEL_PATH = "/models/fault-double-Q4_K_M.gguf"
BUILDS = ("recent", "mid-2025", "2024", "oldest")  # what /props says of the model: see above
WEB_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>"
            b"<body><h1>Welcome to nginx!</h1></body></html>\n")


class FaultServer(Served):
    def __init__(self, slots: int = 4, token_s: float = 0.002, measured_predict: int = 8,
                 hold_s: float = 30.0, trickle_s: float = 1.0, alpha: float = 0.0,
                 drift_per_s: float = 0.0, clock_start: float | None = None,
                 build: str = "2024", model_path: str = MODEL_PATH, alias: str | None = None):
        assert build in BUILDS, build
        self.slots = slots
        self.build = build
        self.model_path = model_path
        self.alias = alias
        self.v1_models = True
        self.slots_endpoint = True
        self.token_s = token_s
        self.alpha = alpha
        self.drift_per_s = drift_per_s
        self.noise = 0.0  # each request's tokens take 1 ± noise (uniform) times as long
        self.rng = random.Random(0)
        self.clock_start = time.monotonic() if clock_start is None else clock_start
        self.measured_predict = measured_predict
        self.hold_s = hold_s
        self.trickle_s = trickle_s
        self.web_page = False
        self.close_after_stream = False
        self.buffering: str | None = None  # None, "nagle" or "end"
        self.fault: str | None = None
        self.tokenize_fault: str | None = None  # an HTTP fault every /tokenize answers with
        self.skip = 0
        self.lock = threading.Lock()
        self.bodies: list[dict] = []  # every /completion body, in arrival order
        self.hits: dict[str, int] = {}  # path → requests
        self.in_flight = 0
        self.max_in_flight = 0
        self._measured = 0
        self._slots = threading.BoundedSemaphore(slots)
        self._stopping = threading.Event()

    # --- life cycle -------------------------------------------------------------------------

    def handler(self) -> type:
        return _Handler

    def start(self) -> "FaultServer":
        self._stopping.clear()
        return super().start()

    def stop(self) -> None:
        """Close the listening socket: from now on connections are refused."""
        self._stopping.set()
        super().stop()

    def token_delay(self, busy: int) -> float:
        """One token's time with ``busy`` requests generating, ``drift_per_s`` slower for every
        second since ``clock_start`` (a machine that drifts on purpose; several servers given
        one clock_start drift alike)."""
        drift = 1 + self.drift_per_s * max(0.0, time.monotonic() - self.clock_start)
        return self.token_s * (1 + self.alpha * max(0, busy - 1)) * drift

    # --- scripting ----------------------------------------------------------------------------

    def arm(self, fault: str | None, skip: int = 0) -> None:
        """From now on, measured requests after the first ``skip`` get ``fault`` (None: none)."""
        assert fault is None or fault in FAULTS, fault
        with self.lock:
            self.fault, self.skip, self._measured = fault, skip, 0

    def reset_counts(self) -> None:
        with self.lock:
            self.bodies.clear()
            self.hits.clear()
            self.max_in_flight = 0

    def requests_received(self) -> int:
        with self.lock:
            return sum(self.hits.values())

    def _fault_for(self, body: dict) -> str | None:
        with self.lock:
            self.bodies.append(body)
            if int(body.get("n_predict", -1)) < self.measured_predict or self.fault is None:
                return None
            self._measured += 1
            return self.fault if self._measured > self.skip else None


def _model_name(d: FaultServer) -> str:
    """The name a recent build gives its model: the alias, else the model file's name."""
    return d.alias or d.model_path.rsplit("/", 1)[-1]


def _props(d: FaultServer) -> dict:
    props = {
        "default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1}},
        "total_slots": d.slots,
        "model_ftype": "Q4_K - Medium",
        "build_info": "b0-fault-double",
        "modalities": {"vision": False, "audio": False},
    }
    if d.build == "recent":
        props["model_alias"] = _model_name(d)
    elif d.build == "mid-2025":
        props["model_alias"] = d.alias or ""
    if d.build != "oldest":
        props["model_path"] = d.model_path
    return props


def _models(d: FaultServer) -> dict:
    name = _model_name(d) if d.build == "recent" else d.alias or d.model_path
    return {"object": "list", "data": [{
        "id": name, "object": "model", "created": 0, "owned_by": "llamacpp",
        "meta": {"vocab_type": 1, "n_vocab": 262144, "n_ctx_train": 32768, "n_embd": 640,
                 "n_params": 268098176, "size": 253114624},
    }]}


def _tokens(text: str, add_special: bool) -> list[int]:
    words = text.split()
    return ([2] if add_special else []) + [100 + (hash(w) % 30000) for w in words]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as llama-server (cpp-httplib)
    double: FaultServer
    _held: list[bytes] | None = None  # the response so far, when buffering == "end"

    @property
    def disable_nagle_algorithm(self) -> bool:
        """TCP_NODELAY (socketserver sets it when this is true): headers and body are separate
        writes, so without it they wait for the client's 40 ms delayed ACK."""
        return self.double.buffering != "nagle"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _count(self) -> None:
        with self.double.lock:
            path = self.path.split("?")[0]
            self.double.hits[path] = self.double.hits.get(path, 0) + 1

    # --- plain responses ------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json; charset=utf-8")

    def _error(self, status: int, message: str, kind: str) -> None:
        self._json(status, {"error": {"code": status, "message": message, "type": kind}})

    def _http_fault(self, fault: str) -> None:
        """An HTTP fault's answer: llama-server's JSON error, or a proxy's HTML page."""
        if fault in HTML_FAULTS:
            return self._send(*HTML_FAULTS[fault], "text/html; charset=iso-8859-1")
        self._error(*HTTP_FAULTS[fault])

    def _body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(400, "invalid JSON in request body", "invalid_request_error")
            return None
        return body if isinstance(body, dict) else {}

    def do_GET(self) -> None:
        self._count()
        d = self.double
        if d.web_page:
            return self._send(200, WEB_PAGE, "text/html")
        path = self.path.split("?")[0]
        if path == "/health":
            return self._json(200, {"status": "ok"})
        if path == "/props":
            return self._json(200, _props(d))
        if path == "/v1/models" and d.v1_models:
            return self._json(200, _models(d))
        if path == "/slots" and not d.slots_endpoint:
            return self._error(501, "This server does not support slots endpoint. Start it "
                               "with `--slots`", "not_supported_error")
        if path == "/slots":
            with d.lock:
                busy = d.in_flight
            return self._json(200, [{"id": i, "n_ctx": 4096, "is_processing": i < busy}
                                    for i in range(d.slots)])
        self._error(404, "File Not Found", "not_found_error")

    def do_POST(self) -> None:
        self._count()
        d = self.double
        if d.web_page:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            return self._send(200, WEB_PAGE, "text/html")
        path = self.path.split("?")[0]
        body = self._body()
        if body is None:
            return
        if path == "/tokenize" and d.tokenize_fault:
            return self._http_fault(d.tokenize_fault)
        if path == "/tokenize":
            return self._json(
                200,
                {
                    "tokens": _tokens(
                        str(body.get("content", "")), bool(body.get("add_special", False))
                    )
                },
            )
        if path != "/completion":
            return self._error(404, "File Not Found", "not_found_error")
        fault = d._fault_for(body)
        if fault in HTTP_FAULTS or fault in HTML_FAULTS:
            return self._http_fault(fault)
        with d._slots:
            with d.lock:
                d.in_flight += 1
                d.max_in_flight = max(d.max_in_flight, d.in_flight)
            try:
                self._stream(body, fault)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (its deadline): fine
            finally:
                with d.lock:
                    d.in_flight -= 1

    # --- the stream -----------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        framed = f"{len(data):x}\r\n".encode() + data + b"\r\n"
        if self._held is not None:
            self._held.append(framed)
            return
        self.wfile.write(framed)
        self.wfile.flush()

    def _event(self, obj, field: str = "data") -> None:
        self._chunk(f"{field}: ".encode() + json.dumps(obj).encode() + b"\n\n")

    def _stream(self, body: dict, fault: str | None) -> None:
        d = self.double
        t0 = time.monotonic()
        prompt_n = len(_tokens(str(body.get("prompt", "")), True))
        n = max(1, int(body.get("n_predict", 16)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Keep-Alive", "timeout=5, max=100")
        self.end_headers()
        self.wfile.flush()
        if fault == "silence":
            d._stopping.wait(d.hold_s)
            return
        if fault == "trickle":
            payload = self._events_bytes(n, prompt_n, t0)
            for i in range(len(payload)):
                if d._stopping.wait(d.trickle_s):
                    return
                self._chunk(payload[i : i + 1])
            self.wfile.write(b"0\r\n\r\n")
            return
        t_first = None
        self._held = [] if d.buffering == "end" else None
        with d.lock:  # this request's pace: 1 ± noise, a noisy machine on purpose
            pace = 1 + d.noise * (2 * d.rng.random() - 1)
        for k in range(n):
            with d.lock:
                busy = d.in_flight
            time.sleep(d.token_delay(busy) * pace)
            if k == 2 and fault == "die":
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if k == 2 and fault == "malformed":
                self._chunk(b'data: {"content": " tok", "stop": fal\n\n')
                break
            if k == 2 and fault == "error_event":
                self._event({"code": 500, "message": "slot 0 failed: llama_decode returned -3",
                             "type": "server_error"}, field="error")
                break
            t_first = t_first or time.monotonic()
            self._event({"index": 0, "content": " tok", "tokens": [], "stop": False,
                         "id_slot": -1, "tokens_predicted": k + 1,
                         "tokens_evaluated": prompt_n})
        else:
            self._event(self._final(n, prompt_n, t0, t_first, fault))
        if self._held is not None:
            self.wfile.write(b"".join(self._held))
            self._held = None
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if d.close_after_stream:
            # the FIN leaves a moment after the last chunk, as over a real network: a request
            # sent on this connection meanwhile is met by the close, never answered
            self.wfile.flush()
            time.sleep(0.02)
            self.close_connection = True

    @staticmethod
    def _final(n: int, prompt_n: int, t0: float, t_first: float | None,
               fault: str | None) -> dict:
        now = time.monotonic()
        prompt_ms = ((t_first or now) - t0) * 1000
        predicted_ms = (now - (t_first or now)) * 1000 + 1e-3
        predicted_n = n
        if fault == "counts":
            predicted_n = 100 * n
        elif fault == "negative_timings":
            predicted_ms = -predicted_ms
        elif fault == "zero_timings":
            predicted_ms = 0.0
        elif fault == "nan_timings":
            predicted_ms = prompt_ms = float("nan")
        per_token = predicted_ms / predicted_n if predicted_n else 0.0
        return {
            "index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": True,
            "model": "fault-double", "tokens_predicted": predicted_n,
            "tokens_evaluated": prompt_n, "stop_type": "limit", "stopping_word": "",
            "tokens_cached": 0,
            "timings": {
                "cache_n": 0, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / prompt_n,
                "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms else 0.0,
                "predicted_n": predicted_n, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": per_token,
                "predicted_per_second": 1000 / per_token if per_token else 0.0,
            },
        }

    def _events_bytes(self, n: int, prompt_n: int, t0: float) -> bytes:
        events = [{"index": 0, "content": " tok", "stop": False} for _ in range(n)]
        out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        return (
            out + b"data: " + json.dumps(self._final(n, prompt_n, t0, t0, None)).encode() + b"\n\n"
        )
