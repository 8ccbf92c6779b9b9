"""A scripted Ollama server: Ollama's wire format with deterministic pacing, for tests and e2e runs.

It speaks what ``server/routes.go`` and ``api/types.go`` of Ollama define: ``POST /api/generate``
streams NDJSON (``application/x-ndjson``, chunked), one ``{"model","created_at","response",
"done":false}`` chunk per token, then a final chunk with ``done_reason`` and the metrics in integer
nanoseconds, each metric omitted when it is zero (Go's ``omitempty``). A request without a prompt
loads the model and answers one JSON object with ``done_reason: "load"``. Errors are
``{"error": …}``: as a non-200 body, or as a stream line under HTTP 200.

Slots: like Ollama's runner (a weighted semaphore of OLLAMA_NUM_PARALLEL), at most ``slots``
requests generate at once; the rest wait, and that wait shows up only in ``total_duration``
(total − load − prompt_eval − eval), as in real Ollama. Each token of each stream takes
``token_s * (1 + 0.25 * (active - 1))`` (each due that long after the previous one was due, so
a loaded host does not slow the scripted rate), so batching gains are visible but sublinear. Prompt
evaluation takes ``prompt_token_s`` per prompt token (tokens = whitespace-separated words).

Scripted behaviour:
- the prompt marker ``[stop:K]`` stops after K tokens with done_reason "stop" (else num_predict
  tokens, "length");
- ``stop_early_when_active = (A, F)``: while at least A requests generate at once, a request
  stops after F of its num_predict tokens with done_reason "stop" (an end-of-sequence token
  that comes early under load: what a ceiling, unlike a pinned length, lets through);
- ``prompt_cache = True``: a prompt seen before costs no prompt evaluation, so prompt_eval_count
  and prompt_eval_duration are omitted (a simplification: real Ollama re-evaluates ≥ 1 token);
- ``fail``: None, "busy" (503, Ollama's ErrMaxQueue text), "internal" (500), "error_mid_stream"
  (an error line after ``fail_after`` tokens), "truncate" (the body ends cleanly after
  ``fail_after`` tokens, without a done chunk), "disconnect" (the connection drops);
- a model other than ``model`` gets 404 ``model '<name>' not found``.

Run standalone (e.g. from Snakemake in a subprocess); it prints its URL and serves until killed:

    python tests/doubles/ollama_double.py --port 0 --slots 4 [--model gemma3:270m] [--token-ms 20]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import socket
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler

if __package__:
    from .served import Served
else:  # run by path (python tests/doubles/ollama_double.py): this folder is sys.path[0]
    from served import Served

STOP_MARKER = re.compile(r"\[stop:(\d+)\]")
BUSY = "server busy, please try again.  maximum pending requests exceeded"  # server/sched.go
RUNNER_DIED = "llama runner process has terminated: exit status 2"
MID_STREAM = "an error was encountered while running the model: unexpected EOF"
METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
           "eval_count", "eval_duration")


def go_time(t: datetime | None = None) -> str:
    """Go's RFC3339Nano in UTC: trailing zeros of the fraction trimmed."""
    t = t or datetime.now(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".") + "Z"


def keep_alive_seconds(value, default: float = 300.0) -> float:
    """Ollama's keep_alive: a Go duration string ("30m", "1h30m", "10s") or a number of seconds."""
    if value is None:
        return default
    if isinstance(value, (int, float)):
        return float(value)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}
    parts = re.findall(r"(-?[\d.]+)(ms|h|m|s)", value)
    return sum(float(n) * units[u] for n, u in parts) if parts else float(value)


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


class OllamaDouble(Served):
    """The server; ``with OllamaDouble(slots=4) as d: d.url``."""

    def __init__(self, slots: int = 1, model: str = "gemma3:270m", *, token_s: float = 0.02,
                 prompt_token_s: float = 0.001, load_s: float = 0.2, port: int = 0,
                 max_queue: int | None = None, version: str = "0.0.0-ollama-double"):
        self.slots = slots
        self.model = model
        self.token_s = token_s
        self.prompt_token_s = prompt_token_s
        self.load_s = load_s
        self.max_queue = max_queue
        self.version = version
        self.fail: str | None = None
        self.fail_after = 2
        self.prompt_cache = False
        self.stop_early_when_active: tuple[int, float] | None = None
        self.received: list[dict] = []  # {"method", "path", "body"} of every request, in order
        self.loads = 0  # how many times the model was (re)loaded
        self.loaded_ctx: int | None = None  # num_ctx of the loaded model; None when unloaded
        self.max_active = 0
        self._expires: datetime | None = None
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._slots = threading.Semaphore(slots)
        self._active = 0
        self._waiting = 0
        self._port = port
        digest = hashlib.sha256(model.encode()).hexdigest()
        self.details = {
            "parent_model": "", "format": "gguf", "family": "gemma3", "families": ["gemma3"],
            "parameter_size": "268.10M", "quantization_level": "Q4_K_M",
        }
        self.tag = {
            "name": model, "model": model, "modified_at": "2025-08-14T10:21:07.123456789Z",
            "size": 291554930, "digest": digest, "details": self.details,
        }

    # -- lifecycle ------------------------------------------------------------------------

    def handler(self) -> type:
        return _Handler

    def bodies(self, path: str = "/api/generate") -> list[dict]:
        return [r["body"] for r in self.received if r["path"] == path and r["method"] == "POST"]

    # -- model state ----------------------------------------------------------------------

    def knows(self, name: str) -> bool:
        def full(n: str) -> str:
            return n if ":" in n.rsplit("/", 1)[-1] else n + ":latest"

        return bool(name) and full(name) == full(self.model)

    def _load(self, num_ctx: int, keep_alive) -> None:
        """Like the scheduler: (re)load when unloaded or when num_ctx changes."""
        with self._load_lock:
            if self.loaded_ctx != num_ctx:
                time.sleep(self.load_s)
                self.loaded_ctx = num_ctx
                self.loads += 1
            seconds = keep_alive_seconds(keep_alive)
            forever = seconds < 0
            self._expires = datetime.now(timezone.utc) + timedelta(
                days=365 * 290 if forever else 0, seconds=0 if forever else seconds
            )

    def ps(self) -> dict:
        if self.loaded_ctx is None:
            return {"models": []}
        return {"models": [{
            "name": self.model, "model": self.model, "size": 548000000,
            "digest": self.tag["digest"], "details": self.details,
            "expires_at": go_time(self._expires), "size_vram": 0,  # CPU only
            "context_length": self.loaded_ctx,
        }]}

    def show(self) -> dict:
        return {
            "license": "Gemma Terms of Use",
            "parameters": 'stop "<end_of_turn>"\ntemperature 1\ntop_k 64\ntop_p 0.95',
            "template": "{{ .Prompt }}",
            "details": self.details,
            "model_info": {
                "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 1,
                "gemma3.block_count": 18, "gemma3.context_length": 32768,
                "gemma3.embedding_length": 640, "general.architecture": "gemma3",
                "general.file_type": 15, "general.parameter_count": 268098176,
                "general.quantization_version": 2, "tokenizer.ggml.model": "llama",
            },
            "capabilities": ["completion"],
            "modified_at": self.tag["modified_at"],
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as Go's net/http
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed ACK
    server_version = "ollama-double"
    double: OllamaDouble

    def setup(self):
        super().setup()
        # Go's net/http sets TCP_NODELAY; without it Nagle + delayed ACK add ~40 ms to small writes
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # noqa: A002 - quiet; tests read .received instead
        pass

    # -- plumbing -------------------------------------------------------------------------

    def _json(self, status: int, obj, content_type: str = "application/json; charset=utf-8"):
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _text(self, status: int, text: str, head: bool = False):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _record(self, body):
        with self.double._lock:
            self.double.received.append({"method": self.command, "path": self.path, "body": body})

    def do_HEAD(self):
        self._record(None)
        if self.path == "/":
            self._text(200, "Ollama is running", head=True)
        else:
            known = self.path in ("/api/version", "/api/tags")
            self._text(200 if known else 404, "", head=True)

    def do_GET(self):
        self._record(None)
        d = self.double
        if self.path == "/":
            self._text(200, "Ollama is running")
        elif self.path == "/api/version":
            self._json(200, {"version": d.version})
        elif self.path == "/api/tags":
            self._json(200, {"models": [d.tag]})
        elif self.path == "/api/ps":
            self._json(200, d.ps())
        else:
            self._text(404, "404 page not found")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError as exc:
            self._record(raw.decode(errors="replace"))
            self._json(400, {"error": str(exc)})
            return
        self._record(body)
        if body is None:
            self._json(400, {"error": "missing request body"})
        elif self.path == "/api/show":
            name = body.get("model") or body.get("name")
            if not self.double.knows(name):
                self._json(404, {"error": f"model '{name}' not found"})
            else:
                self._json(200, self.double.show())
        elif self.path == "/api/generate":
            self._generate(body)
        else:
            self._text(404, "404 page not found")

    # -- /api/generate --------------------------------------------------------------------

    def _generate(self, req: dict):
        d = self.double
        t0 = time.monotonic()
        name = req.get("model", "")
        if not d.knows(name):  # routes.go GenerateHandler
            self._json(404, {"error": f"model '{name}' not found"})
            return
        options = req.get("options") or {}
        num_ctx = int(options.get("num_ctx", 4096))
        prompt = req.get("prompt") or ""
        if not prompt:
            if req.get("keep_alive") in (0, "0", "0s"):
                d.loaded_ctx = None
                self._json(200, self._chunk(name, "", done=True, done_reason="unload"))
                return
            d._load(num_ctx, req.get("keep_alive"))
            self._json(200, self._chunk(name, "", done=True, done_reason="load"))
            return
        if d.fail == "internal":
            self._json(500, {"error": RUNNER_DIED})
            return
        with d._lock:
            if d.fail == "busy" or (d.max_queue is not None and d._waiting >= d.max_queue):
                busy = True
            else:
                busy = False
                d._waiting += 1
        if busy:
            self._json(503, {"error": BUSY})
            return
        d._load(num_ctx, req.get("keep_alive"))
        t_loaded = time.monotonic()
        d._slots.acquire()  # the runner's semaphore: queue wait lands in total_duration only
        with d._lock:
            d._waiting -= 1
            d._active += 1
            d.max_active = max(d.max_active, d._active)
        try:
            self._run(req, prompt, options, t0, t_loaded)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; free the slot
        finally:
            with d._lock:
                d._active -= 1
            d._slots.release()

    def _run(self, req: dict, prompt: str, options: dict, t0: float, t_loaded: float):
        d = self.double
        name = req["model"]
        stream = req.get("stream", True) is not False
        with d._lock:
            cached = d.prompt_cache and prompt in d._seen
            d._seen.add(prompt)
        n_prompt = 0 if cached else len(prompt.split())
        t_prompt = time.monotonic()
        time.sleep(n_prompt * d.prompt_token_s)
        t_eval = time.monotonic()
        limit = int(options.get("num_predict", 128))
        limit = 128 if limit < 0 else limit
        marker = STOP_MARKER.search(prompt)
        n_tokens = min(limit, int(marker.group(1))) if marker else limit
        done_reason = "stop" if marker and int(marker.group(1)) < limit else "length"
        with d._lock:
            crowded = d.stop_early_when_active and d._active >= d.stop_early_when_active[0]
        if crowded and not marker:
            n_tokens, done_reason = max(1, int(limit * d.stop_early_when_active[1])), "stop"
        if stream:
            self._start_stream()
        text = []
        # each token is due a gap after the previous one was due, not after it was written: an
        # overslept token leaves the next one less to wait, so a loaded host does not slow the
        # scripted rate (a plain sleep per token gave 94-96 of 100 tok/s here)
        due = time.monotonic()
        for i in range(n_tokens):
            if stream and i == d.fail_after and d.fail in ("error_mid_stream", "truncate",
                                                          "disconnect"):
                self._fail_stream(d.fail)
                return
            with d._lock:
                active = d._active
            due += d.token_s * (1 + 0.25 * (active - 1))
            time.sleep(max(0.0, due - time.monotonic()))
            piece = f" tok{i}"
            text.append(piece)
            if stream:
                self._write_line(self._chunk(name, piece))
        t_end = time.monotonic()
        metrics = {
            "total_duration": _ns(t_end - t0),
            "load_duration": _ns(t_loaded - t0),
            "prompt_eval_count": n_prompt,
            "prompt_eval_duration": _ns(t_eval - t_prompt) if n_prompt else 0,
            "eval_count": n_tokens,
            "eval_duration": _ns(t_end - t_eval) if n_tokens else 0,
        }
        final = self._chunk(name, "" if stream else "".join(text), done=True,
                            done_reason=done_reason, **metrics)
        if stream:
            self._write_line(final)
            self._end_stream()
        else:
            self._json(200, final)

    @staticmethod
    def _chunk(model: str, response: str, done: bool = False, **extra) -> dict:
        """Field order and omission as api.GenerateResponse marshals (omitempty metrics)."""
        out = {"model": model, "created_at": go_time(), "response": response, "done": done}
        if extra.get("done_reason"):
            out["done_reason"] = extra["done_reason"]
        for key in METRICS:
            if extra.get(key):
                out[key] = extra[key]
        return out

    def _start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_line(self, obj: dict):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _fail_stream(self, mode: str):
        if mode == "error_mid_stream":  # routes.go streamResponse after content: an error line
            self._write_line({"error": MID_STREAM})
            self._end_stream()
        elif mode == "truncate":  # the body ends, but no chunk said done: true
            self._end_stream()
        else:  # disconnect: the connection drops mid-body
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Scripted Ollama server on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--slots", type=int, default=1, help="parallel slots (OLLAMA_NUM_PARALLEL)")
    parser.add_argument("--model", default="gemma3:270m")
    parser.add_argument("--token-ms", type=float, default=20.0, help="per-token time, one stream")
    parser.add_argument("--prompt-token-ms", type=float, default=1.0)
    parser.add_argument("--load-ms", type=float, default=200.0)
    parser.add_argument("--max-queue", type=int, default=None, help="503 beyond this many waiting")
    args = parser.parse_args(argv)
    double = OllamaDouble(args.slots, args.model, token_s=args.token_ms / 1000,
                          prompt_token_s=args.prompt_token_ms / 1000, load_s=args.load_ms / 1000,
                          port=args.port, max_queue=args.max_queue)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    double.start()
    print(double.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        double.stop()


if __name__ == "__main__":
    main()
