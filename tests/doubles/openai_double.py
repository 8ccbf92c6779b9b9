"""A scripted OpenAI-compatible server, as vLLM's ``vllm serve`` answers (its FastAPI app):

- ``GET /v1/models``: ``{"object": "list", "data": [{"id", "object": "model", "created",
  "owned_by": "vllm", "root", "parent": null, "max_model_len"}]}``, one entry per served
  model (``models``; vLLM serves one, a router or LM Studio several);
- ``POST /v1/completions`` with ``stream: true``: ``text/event-stream``, one
  ``data: {"id", "object": "text_completion", "created", "model", "choices": [{"index": 0,
  "text", "logprobs": null, "finish_reason": null}]}`` event per token (``finish_reason``
  "length" on the last), with ``stream_options.include_usage`` a last event with empty
  ``choices`` and ``usage`` (``prompt_tokens``, ``completion_tokens``, ``total_tokens``), then
  ``data: [DONE]``; no llama.cpp ``timings``. A model it does not serve: HTTP 404 with
  OpenAI's error object;
- any other path: HTTP 404 ``{"detail": "Not Found"}`` (FastAPI's answer), so ``GET /props``
  and ``GET /api/version`` find no llama-server and no Ollama here.
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

from .served import Served


class OpenAIDouble(Served):
    """``with OpenAIDouble(models=["google/gemma-3-270m"]) as d: d.url``."""

    def __init__(self, models: list[str] | tuple[str, ...] = ("google/gemma-3-270m",),
                 token_s: float = 0.002):
        self.models = list(models)
        self.token_s = token_s
        self.paths: list[str] = []  # "GET /v1/models", … in the order asked

    def handler(self) -> type:
        return _Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    double: OpenAIDouble

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, status: int, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.double.paths.append(f"GET {self.path}")
        if self.path.split("?")[0] != "/v1/models":
            return self._json(404, {"detail": "Not Found"})
        created = int(time.time())
        self._json(200, {"object": "list", "data": [
            {"id": m, "object": "model", "created": created, "owned_by": "vllm", "root": m,
             "parent": None, "max_model_len": 32768} for m in self.double.models]})

    def do_POST(self) -> None:
        self.double.paths.append(f"POST {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.split("?")[0] != "/v1/completions":
            return self._json(404, {"detail": "Not Found"})
        if body.get("model") not in self.double.models:
            return self._json(404, {"object": "error", "type": "NotFoundError", "param": None,
                                    "message": f"The model `{body.get('model')}` does not exist.",
                                    "code": 404})
        self._stream(body)

    def _event(self, obj) -> None:
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, body: dict) -> None:
        n = int(body.get("max_tokens") or 16)
        prompt_tokens = len(str(body.get("prompt", "")).split())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        head = {"id": "cmpl-double", "object": "text_completion", "created": int(time.time()),
                "model": body["model"]}
        for i in range(n):
            time.sleep(self.double.token_s)
            self._event(head | {"choices": [{"index": 0, "text": f" tok{i}", "logprobs": None,
                                             "finish_reason": "length" if i == n - 1 else None,
                                             "stop_reason": None}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event(head | {"choices": [], "usage": {
                "prompt_tokens": prompt_tokens, "completion_tokens": n,
                "total_tokens": prompt_tokens + n}})
        self._event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
