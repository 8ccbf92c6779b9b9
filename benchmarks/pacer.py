"""A deterministic pacing server: a fake LLM whose every timing is known.

Why: slotbench (and every peer benchmark tool) reports TTFT, inter-token gaps and tok/s measured
on the client side. To know how much of a reported number is the client's own error, the server
must be one whose true behaviour is recorded. This server emits one-word tokens (" tok", exactly
one token for any whitespace tokenizer) on a fixed schedule, speaks the three wire formats
slotbench measures (llama.cpp ``/completion``, Ollama ``/api/generate``, OpenAI ``/v1/…``), and
writes a *truth log*: for each request the moment (``time.monotonic()``, system-wide on Linux,
so comparable with a client process on the same machine) its body was fully read and the moment
each token's bytes were handed to the kernel (after ``write`` + ``drain`` returned).

The nominal schedule is not the truth: on 2 shared cores a 10 ms gap is sometimes written a few
ms late, so compare clients with the truth log, never with ``--ttft-ms``/``--gap-ms``. Every
duration the server reports on the wire (llama.cpp ``timings``, Ollama ``*_duration``) is taken
from the same truth-log timestamps.

Schedule, per request: body read → wait for a slot (``--slots``, unlimited by default) →
``--ttft-ms`` → first token → then one token every gap, where
``gap = gap_ms * (1 + alpha * (active - 1))`` and ``active`` is the number of requests holding a
slot at that step. Deadlines are absolute (no drift): token k is due at due(k-1) + gap.

Implementation: one asyncio event loop on raw streams (a hand-written HTTP/1.1 subset with
keep-alive and chunked responses) with TCP_NODELAY on every connection, so a token is one
segment on the wire, immediately.

    python benchmarks/pacer.py --port 0 --ttft-ms 50 --gap-ms 10 --tokens 32 \\
        --slots 4 --alpha 0.1 --truth-log truth.jsonl

prints the bound URL (``http://127.0.0.1:PORT``) as its first stdout line. Importable too:
``PacerThread(PacerConfig(...))`` runs it in a background thread (for tests), and
``start_subprocess([...])`` runs it in its own process (for measurements: no shared GIL).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

TOKEN = " tok"
NONCE = re.compile(r"\bRequest ([A-Za-z0-9_-]+)")
MAX_HEADER = 1 << 16
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           413: "Payload Too Large", 500: "Internal Server Error"}  # fmt: skip


@dataclasses.dataclass
class PacerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    ttft_ms: float = 50.0
    gap_ms: float = 10.0
    tokens: int | None = None  # fixed output count; None → the request's num_predict/max_tokens
    default_tokens: int = 16  # when the request names no count
    slots: int = 0  # 0 → unlimited (no queueing)
    alpha: float = 0.0  # gap grows by alpha per extra active sequence
    model: str = "pacer"
    truth_log: str | None = None
    nodelay: bool = True  # TCP_NODELAY on accepted sockets (--no-nodelay to study Nagle)
    n_ctx: int = 4096


def _count_words(text: str) -> int:
    return len(text.split())


def _prompt_text(api: str, body: dict) -> str:
    if api == "openai-chat":
        parts = []
        for m in body.get("messages") or []:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):  # content parts
                parts += [p.get("text", "") for p in c if isinstance(p, dict)]
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):  # OpenAI allows a list of prompts / token ids; use the first
        prompt = prompt[0] if prompt else ""
    return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))


def _requested_tokens(api: str, body: dict) -> int | None:
    if api == "llamacpp":
        n = body.get("n_predict", body.get("max_tokens"))
    elif api == "ollama":
        n = (body.get("options") or {}).get("num_predict")
    else:
        n = body.get("max_completion_tokens", body.get("max_tokens"))
    try:
        n = int(n)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _iso_now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (Transfer-Encoding: chunked)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Pacer:
    """The server; ``await serve()`` inside a loop, or use PacerThread / the CLI."""

    def __init__(self, config: PacerConfig):
        self.cfg = config
        self.counter = itertools.count(1)
        self.conn_ids = itertools.count(1)
        self.idle: set[asyncio.StreamWriter] = set()  # kept-alive connections between requests
        self.active = 0  # requests holding a slot (generating)
        self.in_flight = 0  # requests between body read and last write
        self.sem: asyncio.Semaphore | None = None
        self.server: asyncio.base_events.Server | None = None
        self._truth = open(config.truth_log, "a", buffering=1) if config.truth_log else None
        self.port: int | None = None
        self.started = time.time()

    # --- plumbing -------------------------------------------------------------------------

    async def start(self) -> str:
        if self.cfg.slots > 0:
            self.sem = asyncio.Semaphore(self.cfg.slots)
        self.server = await asyncio.start_server(
            self._connection, self.cfg.host, self.cfg.port, limit=MAX_HEADER, backlog=1024
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self.url

    @property
    def url(self) -> str:
        return f"http://{self.cfg.host}:{self.port}"

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self._truth is not None:
            self._truth.close()
            self._truth = None

    def _log(self, record: dict) -> None:
        if self._truth is not None:
            self._truth.write(json.dumps(record, separators=(",", ":")) + "\n")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if self.cfg.nodelay else 0)
        conn = next(self.conn_ids)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                self.idle.add(writer)
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self._send_json(writer, 413, {"error": "headers too large"}, False)
                    return
                finally:
                    self.idle.discard(writer)
                method, path, headers = self._parse_head(head)
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await self._read_body(reader, headers)
                t_body = time.monotonic()
                keep = headers.get("connection", "").lower() != "close"
                try:
                    keep = await self._dispatch(method, path, headers, body, t_body, writer,
                                                keep, conn, peer)  # fmt: skip
                except HTTPError as exc:
                    await self._send_json(writer, exc.status, {"error": str(exc)}, keep)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    def _parse_head(head: bytes):
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, _version = lines[0].split(" ", 2)
        except ValueError:
            raise ConnectionError(f"bad request line {lines[0]!r}") from None
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        return method.upper(), target.split("?", 1)[0], headers

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: dict) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass  # trailers
                    return b"".join(parts)
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
        n = int(headers.get("content-length", "0") or 0)
        return await reader.readexactly(n) if n else b""

    async def _send_json(self, writer, status: int, obj, keep: bool) -> None:
        data = _dumps(obj)
        writer.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Server: slotbench-pacer\r\nConnection: %s\r\n\r\n%s"
            % (status, REASONS.get(status, "Error").encode(), len(data),
               b"keep-alive" if keep else b"close", data)  # fmt: skip
        )
        await writer.drain()

    async def _dispatch(self, method, path, headers, body, t_body, writer, keep, conn, peer):
        path = path.rstrip("/") or "/"
        gen_routes = {"/completion": "llamacpp", "/completions": "llamacpp",
                      "/api/generate": "ollama", "/v1/completions": "openai-completions",
                      "/v1/chat/completions": "openai-chat"}  # fmt: skip
        if path in gen_routes:
            if method != "POST":
                raise HTTPError(405, f"{path} wants POST")
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                raise HTTPError(400, "body is not JSON") from None
            if not isinstance(req, dict):
                raise HTTPError(400, "body is not a JSON object")
            return await self._generate(gen_routes[path], req, headers, t_body, writer, keep,
                                        conn, peer)  # fmt: skip
        answer = self._info(method, path, body)
        if answer is None:
            raise HTTPError(404, f"no route {method} {path}")
        await self._send_json(writer, 200, answer, keep)
        return keep

    # --- the minimal answers that let backends fingerprint the server ----------------------

    def _info(self, method: str, path: str, body: bytes):
        m, slots = self.cfg.model, self.cfg.slots
        tag = f"{m}:latest" if ":" not in m else m
        details = {"format": "gguf", "family": "pacer", "parameter_size": "0",
                   "quantization_level": "none"}  # fmt: skip
        if method == "GET" and path == "/health":
            return {"status": "ok"}
        if method == "GET" and path == "/props":
            return {"default_generation_settings": {"n_ctx": self.cfg.n_ctx},
                    "total_slots": slots or 1, "model_path": f"{m}.gguf",
                    "model_ftype": "none", "build_info": "slotbench-pacer",
                    "modalities": {"vision": False, "audio": False}}  # fmt: skip
        if method == "GET" and path == "/slots":
            n = slots or 1
            return [{"id": i, "n_ctx": self.cfg.n_ctx, "is_processing": i < self.active}
                    for i in range(n)]  # fmt: skip
        if method == "POST" and path == "/tokenize":
            try:
                text = json.loads(body or b"{}").get("content", "")
            except (ValueError, AttributeError):
                raise HTTPError(400, "body is not a JSON object") from None
            return {"tokens": list(range(1, _count_words(str(text)) + 1))}
        if method == "GET" and path == "/v1/models":
            return {"object": "list", "data": [{"id": m, "object": "model",
                                                "created": int(self.started),
                                                "owned_by": "slotbench-pacer"}]}  # fmt: skip
        if method == "GET" and path == "/api/version":
            return {"version": "0.0.0-pacer"}
        if method == "GET" and path == "/api/tags":
            return {"models": [{"name": tag, "model": tag, "digest": "0" * 64, "size": 0,
                                "modified_at": _iso_now(), "details": details}]}  # fmt: skip
        if method == "POST" and path == "/api/show":
            return {"details": details, "model_info": {
                "general.architecture": "pacer", "general.parameter_count": 0,
                "pacer.context_length": self.cfg.n_ctx}}  # fmt: skip
        if method == "GET" and path == "/api/ps":
            return {"models": [{"name": tag, "model": tag, "size": 0, "size_vram": 0,
                                "context_length": self.cfg.n_ctx,
                                "expires_at": "2099-01-01T00:00:00Z"}]}  # fmt: skip
        return None

    # --- generation -------------------------------------------------------------------------

    def _gap_s(self) -> float:
        return self.cfg.gap_ms / 1000.0 * (1 + self.cfg.alpha * max(self.active - 1, 0))

    async def _generate(self, api, req, headers, t_body, writer, keep, conn, peer):
        prompt = _prompt_text(api, req)
        nonce = NONCE.search(prompt)
        seq = next(self.counter)
        rid = nonce.group(1) if nonce else f"#{seq}"
        asked = _requested_tokens(api, req)
        n = self.cfg.tokens or asked or self.cfg.default_tokens
        prompt_tokens = _count_words(prompt)
        stream = bool(req.get("stream", api == "ollama"))  # Ollama streams unless told not to
        if api == "ollama" and not prompt and not stream:
            # a model load (slotbench's warm-up): answer at once, no tokens
            await self._send_json(writer, 200, {"model": req.get("model", self.cfg.model),
                                                "created_at": _iso_now(), "response": "",
                                                "done": True, "done_reason": "load"}, keep)
            return keep
        want_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        fmt = _Formatter(api, req.get("model") or self.cfg.model, seq, prompt_tokens)
        truth = {"id": rid, "seq": seq, "nonce": nonce.group(1) if nonce else None,
                 "x_request_id": headers.get("x-request-id"), "api": api, "conn": conn,
                 "client_port": peer[1] if isinstance(peer, tuple) else None,
                 "stream": stream, "n_requested": asked, "n": n,
                 "prompt_tokens": prompt_tokens, "t_body": t_body}  # fmt: skip
        t_tok: list[float] = []
        self.in_flight += 1
        completed = False
        try:
            if stream:
                writer.write(fmt.head(keep))
                await writer.drain()
            if self.sem is not None:
                await self.sem.acquire()
            t_slot = time.monotonic()
            truth["t_slot"] = t_slot
            self.active += 1
            try:
                due = t_slot + self.cfg.ttft_ms / 1000.0
                token_bytes = fmt.token(False)
                loop = asyncio.get_running_loop()
                parts = []
                for k in range(n):
                    delay = due - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    last = k == n - 1
                    data = fmt.token(True) if (last and fmt.finish_in_last) else token_bytes
                    if stream:
                        writer.write(data)
                        await writer.drain()
                    else:
                        parts.append(TOKEN)
                    t_tok.append(time.monotonic())
                    due += self._gap_s()
            finally:
                self.active -= 1
                if self.sem is not None:
                    self.sem.release()
            timing = _true_timings(t_body, t_slot, t_tok)
            if stream:
                writer.write(fmt.tail(timing, want_usage))
                await writer.drain()
            else:
                await self._send_json(writer, 200, fmt.whole("".join(parts), timing), keep)
            truth["t_final"] = time.monotonic()
            completed = True
            return keep
        finally:
            self.in_flight -= 1
            truth["t_tok"] = t_tok
            truth["n_written"] = len(t_tok)
            truth["completed"] = completed
            self._log(truth)


def _true_timings(t_body: float, t_slot: float, t_tok: list[float]) -> dict:
    """Durations the server reports, from the truth-log timestamps (module docstring)."""
    first, last = t_tok[0], t_tok[-1]
    return {
        "n": len(t_tok),
        "queue_s": t_slot - t_body,
        "prompt_s": first - t_slot,  # "prefill": slot acquired → first token written
        "gen_s": last - first,  # first → last token written (n - 1 gaps)
        "total_s": last - t_body,
    }


class _Formatter:
    """Bytes of one request's stream in its wire format; token events are built once."""

    def __init__(self, api: str, model: str, seq: int, prompt_tokens: int):
        self.api, self.model, self.seq, self.prompt_tokens = api, model, seq, prompt_tokens
        self.created = int(time.time())
        self.created_at = _iso_now()
        self.id = f"cmpl-pacer-{seq}"
        # OpenAI streams carry finish_reason on the last token's chunk (as vLLM does)
        self.finish_in_last = api.startswith("openai")

    def head(self, keep: bool) -> bytes:
        ctype = b"application/x-ndjson" if self.api == "ollama" else b"text/event-stream"
        return (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
                b"Cache-Control: no-cache\r\nServer: slotbench-pacer\r\nConnection: %s\r\n\r\n"
                % (ctype, b"keep-alive" if keep else b"close"))  # fmt: skip

    def _sse(self, obj) -> bytes:
        return b"data: " + _dumps(obj) + b"\n\n"

    def token(self, last: bool) -> bytes:
        if self.api == "llamacpp":
            return _chunk(self._sse({"content": TOKEN, "tokens": [], "stop": False,
                                     "id_slot": 0, "index": 0}))  # fmt: skip
        if self.api == "ollama":
            return _chunk(_dumps({"model": self.model, "created_at": self.created_at,
                                  "response": TOKEN, "done": False}) + b"\n")  # fmt: skip
        fin = "length" if last else None
        if self.api == "openai-chat":
            choice = {"index": 0, "delta": {"role": "assistant", "content": TOKEN},
                      "logprobs": None, "finish_reason": fin}  # fmt: skip
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": TOKEN, "logprobs": None, "finish_reason": fin}
            obj = "text_completion"
        return _chunk(self._sse({"id": self.id, "object": obj, "created": self.created,
                                 "model": self.model, "choices": [choice]}))  # fmt: skip

    def _llama_final(self, timing: dict, content: str = "") -> dict:
        n, p = timing["n"], self.prompt_tokens
        pm, gm = timing["prompt_s"] * 1000.0, timing["gen_s"] * 1000.0
        return {"content": content, "stop": True, "model": self.model, "tokens_predicted": n,
                "tokens_evaluated": p, "stop_type": "limit", "stopping_word": "",
                "tokens_cached": p + n, "truncated": False,
                "timings": {"cache_n": 0, "prompt_n": p, "prompt_ms": pm,
                            "prompt_per_token_ms": pm / p if p else 0.0,
                            "prompt_per_second": p / (pm / 1000.0) if p and pm else 0.0,
                            "predicted_n": n, "predicted_ms": gm,
                            "predicted_per_token_ms": gm / n,
                            "predicted_per_second": (n - 1) / (gm / 1000.0) if gm else 0.0}}

    def _ollama_final(self, timing: dict, response: str = "") -> dict:
        out = {"model": self.model, "created_at": _iso_now(), "response": response,
               "done": True, "done_reason": "length",
               "total_duration": round(timing["total_s"] * 1e9),
               "prompt_eval_count": self.prompt_tokens,
               "prompt_eval_duration": round(timing["prompt_s"] * 1e9),
               "eval_count": timing["n"], "eval_duration": round(timing["gen_s"] * 1e9)}
        return {k: v for k, v in out.items() if v != 0}  # Ollama omits zero-valued metrics

    def _usage(self, n: int) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n,
                "total_tokens": self.prompt_tokens + n}

    def tail(self, timing: dict, want_usage: bool) -> bytes:
        if self.api == "llamacpp":
            return _chunk(self._sse(self._llama_final(timing))) + b"0\r\n\r\n"
        if self.api == "ollama":
            return _chunk(_dumps(self._ollama_final(timing)) + b"\n") + b"0\r\n\r\n"
        out = b""
        if want_usage:
            obj = "chat.completion.chunk" if self.api == "openai-chat" else "text_completion"
            out += self._sse({"id": self.id, "object": obj, "created": self.created,
                              "model": self.model, "choices": [],
                              "usage": self._usage(timing["n"])})  # fmt: skip
        return _chunk(out + b"data: [DONE]\n\n") + b"0\r\n\r\n"

    def whole(self, text: str, timing: dict) -> dict:
        """A non-streamed answer (stream: false)."""
        if self.api == "llamacpp":
            return self._llama_final(timing, text)
        if self.api == "ollama":
            return self._ollama_final(timing, text)
        if self.api == "openai-chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": "length"}  # fmt: skip
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [choice], "usage": self._usage(timing["n"])}


# --- running it ------------------------------------------------------------------------------


class PacerThread:
    """The pacer on its own event loop in a daemon thread (tests). ``with PacerThread(cfg) as
    url: ...``. It shares the GIL with the caller: measure with ``start_subprocess`` instead."""

    def __init__(self, config: PacerConfig):
        self.config = config
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pacer")
        self.pacer: Pacer | None = None

    def _run(self):
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self.pacer = Pacer(self.config)
        self.url = self._loop.run_until_complete(self.pacer.start())
        self._ready.set()
        self._loop.run_forever()
        self.pacer.close()
        tasks = asyncio.all_tasks(self._loop)  # connections still open: end them quietly
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    def start(self) -> str:
        self._thread.start()
        self._ready.wait(10)
        return self.url

    def stop(self):
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def start_subprocess(args: list[str], python: str = sys.executable) -> tuple[subprocess.Popen, str]:
    """Run the CLI in a child process; returns (process, URL). Stop it with terminate()."""
    proc = subprocess.Popen([python, str(Path(__file__).resolve()), *args],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError(f"pacer did not start (first line {url!r})")
    return proc, url


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Prints the bound URL on its first stdout line.")  # fmt: skip
    ap.add_argument("--host", default="127.0.0.1", help="loopback only (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    ap.add_argument("--ttft-ms", type=float, default=50.0,
                    help="slot acquired → first token (default 50)")
    ap.add_argument("--gap-ms", type=float, default=10.0,
                    help="base inter-token gap (default 10)")
    ap.add_argument("--tokens", type=int, default=None,
                    help="fixed output tokens per request; default: the request's "
                         "n_predict/num_predict/max_tokens")  # fmt: skip
    ap.add_argument("--default-tokens", type=int, default=16,
                    help="output tokens when the request names none (default 16)")
    ap.add_argument("--slots", type=int, default=0,
                    help="parallel slots; requests beyond queue (default 0: unlimited)")
    ap.add_argument("--alpha", type=float, default=0.0,
                    help="gap = gap_ms * (1 + alpha*(active-1)) (default 0)")
    ap.add_argument("--model", default="pacer", help="model id served (default pacer)")
    ap.add_argument("--truth-log", help="append one JSON line per generation request here")
    ap.add_argument("--no-nodelay", action="store_true",
                    help="leave Nagle's algorithm on (to study its effect)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    cfg = PacerConfig(host=a.host, port=a.port, ttft_ms=a.ttft_ms, gap_ms=a.gap_ms,
                      tokens=a.tokens, default_tokens=a.default_tokens, slots=a.slots,
                      alpha=a.alpha, model=a.model, truth_log=a.truth_log,
                      nodelay=not a.no_nodelay)  # fmt: skip

    async def run():
        pacer = Pacer(cfg)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(await pacer.start(), flush=True)
        try:
            await stop.wait()
        finally:
            # only stop listening: the truth file stays open (line-buffered) so that requests
            # still streaming, cancelled by asyncio.run, are logged with completed: false
            pacer.server.close()
            # kept-alive connections waiting for a next request end now, quietly (cancelled
            # by asyncio.run instead, each would print a CancelledError traceback)
            for writer in list(pacer.idle):
                writer.transport.abort()
            await asyncio.sleep(0.05)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
