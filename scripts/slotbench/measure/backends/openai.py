"""OpenAI-compatible servers: ``POST /v1/completions`` or ``/v1/chat/completions``, streamed.

The stream is server-sent events: ``data: {json}`` lines ending with ``data: [DONE]``. With
``stream_options.include_usage`` the server reports ``usage`` (prompt_tokens,
completion_tokens) in the last chunk: on llama-server's /v1/completions that is the chunk with
``finish_reason``, on chat an extra chunk with empty ``choices``. llama-server also attaches its
``timings`` (predicted_n, predicted_ms, prompt_n, prompt_ms, cache_n) there; other servers
(vLLM, SGLang, Ollama's /v1) do not, so their generation time is taken from token arrival on
this side and the record says ``timing_source: "client"``.

The API key comes from the environment variable named in the target's ``api_key_env``. It is
held in a wrapper that never prints, and every message this module raises is scrubbed of it.

llama-server (recognised by its ``Server: llama.cpp`` header) caches prompts by default on
/v1: a prompt it has seen before (a resumed rep, a rerun of the same plan, a benchmark repeated
on a long-running server) is served from its KV cache. Measured here: 155 of 160 prompt tokens
reused and 20-40% more aggregate tok/s at 4-way (benchmarks/RESULTS.md). Against llama-server
this backend therefore sends ``cache_prompt: false``, as the native backend does, so that no
measured request reuses KV computed for another; other servers get only standard fields (plus
``ignore_eos`` if set).
"""

from __future__ import annotations

import json
import os
import threading

import requests
import requests.auth

from slotbench.core.defaults import value
from slotbench.measure.backends.base import (
    Backend,
    BackendError,
    RequestRecord,
    error_body,
    error_message,
    error_text,
    finite,
)
from slotbench.measure.backends.transport import lines

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
TIMING_FIELDS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n")
# keys of a /v1/models entry's llama.cpp "meta" worth keeping as model facts
META_FACTS = {"ftype": "quantisation", "n_params": "n_params", "size": "size_bytes",
              "n_ctx_train": "n_ctx_train", "n_vocab": "n_vocab"}


class _Secret:
    """An API key that never shows itself in a repr, a log line or a traceback's locals."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str):
        self._value = value
        self.source = source

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"<API key from ${self.source}>"

    __str__ = __repr__

    def __reduce__(self):  # nothing that pickles a backend may carry the key along
        raise TypeError("an API key is not picklable")


class _BearerAuth(requests.auth.AuthBase):
    """Adds the key at send time. Passing auth explicitly also stops requests from replacing
    the header with ~/.netrc credentials."""

    def __init__(self, key: _Secret):
        self.key = key

    def __call__(self, request):
        request.headers["Authorization"] = f"Bearer {self.key.reveal()}"
        return request


def api_root(base_url: str) -> str:
    """The server root, whether the configured URL ends in /v1 or not."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _read_key(env_name: str | None) -> _Secret | None:
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if value is None:
        raise BackendError(
            f"api_key_env names the environment variable {env_name}, which is not set; "
            f"export {env_name}=<the server's API key> before running"
        )
    if not value.strip():
        raise BackendError(f"the environment variable {env_name} (api_key_env) is empty")
    return _Secret(value.strip(), env_name)


def _content(choice: dict) -> str:
    """Generated text in one streamed choice: completions' ``text`` or chat's ``delta``."""
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    # reasoning models stream their thinking first; those are generated tokens too
    return (delta.get("content") or "") + (
        delta.get("reasoning_content") or delta.get("reasoning") or ""
    )


class OpenAIBackend(Backend):
    name = "openai"
    path = ENDPOINTS["completions"]

    def __init__(self, base_url: str, target: dict | None = None,
                 timeout_s: float | None = None):
        super().__init__(base_url, target, timeout_s)
        self.root = api_root(self.base_url)
        self.endpoint = value(self.target, "targets[].endpoint", backend="openai")
        if self.endpoint not in ENDPOINTS:
            raise BackendError(
                f"endpoint {self.endpoint!r} is not one of {', '.join(ENDPOINTS)}"
            )
        self.path = ENDPOINTS[self.endpoint]
        self.ignore_eos = bool(self.target.get("ignore_eos"))  # unset: not sent
        self.api_key_env = self.target.get("api_key_env")
        self._key = _read_key(self.api_key_env)
        self._llama_server: bool | None = None  # learnt from the first response's headers
        self._probe_lock = threading.Lock()

    def __repr__(self) -> str:
        auth = f"key from ${self.api_key_env}" if self._key else "no key"
        return f"OpenAIBackend({self.root}{self.path}, model={self.model!r}, {auth})"

    # --- secrets ------------------------------------------------------------------------

    def _auth(self) -> _BearerAuth | None:
        return _BearerAuth(self._key) if self._key else None

    def _scrub(self, text: str) -> str:
        if self._key and self._key.reveal() in text:
            text = text.replace(self._key.reveal(), f"<${self.api_key_env}>")
        return text

    def _error(self, message: str) -> BackendError:
        return BackendError(self._scrub(message))

    def _http_error(self, method: str, path: str, resp) -> BackendError:
        error = self._said_error(method, path, resp)
        body = error_body(resp)
        error.body = body and self._scrub(body)  # an echoed key stays out of the log too
        return error

    def _said_error(self, method: str, path: str, resp) -> BackendError:
        code, said = resp.status_code, error_text(resp)
        if code in (401, 403):
            if self._key:
                hint = f"check the variable named in api_key_env ({self.api_key_env})"
            else:
                hint = ("the server wants a key: set api_key_env to the NAME of an environment "
                        "variable that holds it")
            return self._error(f"{method} {path}: API key rejected (HTTP {code}: {said}); {hint}")
        if code == 404 and method == "GET":
            return self._error(f"{method} {path}: HTTP 404: {said}; the server has no {path}")
        if code == 404:
            return self._error(
                f"{method} {path}: HTTP 404: {said}; the server does not know model "
                f"{self.model!r} or has no {path} (GET /v1/models lists the ids it serves; "
                "set the target's model and endpoint accordingly)"
            )
        return self._error(f"{method} {path}: HTTP {code}: {said}")

    # --- server facts -------------------------------------------------------------------

    def _note_server(self, resp: requests.Response) -> None:
        self._llama_server = resp.headers.get("Server", "").startswith("llama.cpp")

    @property
    def llama_server(self) -> bool:
        """Whether the server is llama-server; asked once (GET /v1/models, any status)."""
        with self._probe_lock:
            if self._llama_server is None:
                try:
                    with self.session.get(self.root + "/v1/models", auth=self._auth(),
                                          timeout=10) as resp:
                        self._note_server(resp)
                except requests.RequestException:
                    return False  # unreachable: the request that follows will say so
            return self._llama_server

    def _get(self, path: str) -> dict | list:
        try:
            resp = self.session.get(self.root + path, auth=self._auth(), timeout=10)
        except requests.RequestException as exc:
            raise self._error(f"GET {path}: cannot reach {self.root}: {exc}") from None
        self._note_server(resp)
        if resp.status_code != 200:
            raise self._http_error("GET", path, resp)
        try:
            return resp.json()
        except ValueError:
            raise self._error(f"GET {path}: the answer is not JSON") from None

    def _listed_models(self) -> list[dict]:
        data = self._get("/v1/models")
        entries = data.get("data") if isinstance(data, dict) else data
        return [m for m in entries or [] if isinstance(m, dict)]

    def describe(self) -> dict:
        """The served model ids (GET /v1/models) and how requests are sent; never the key."""
        info = {
            "api": "openai",
            "endpoint": self.path,
            "ignore_eos": self.ignore_eos,
            "auth": f"bearer key from ${self.api_key_env}" if self._key else "none",
        }
        try:
            models = self._listed_models()
        except BackendError as exc:
            if "API key rejected" in str(exc):
                raise  # the measured requests would fail the same way: say so now
            return info | {"llama_server": self.llama_server, "models": None,
                           "models_unavailable": str(exc)}
        entry = self._entry(models)
        info |= {"llama_server": self.llama_server, "models": [m.get("id") for m in models]}
        if self.llama_server:
            info["llama_server_fields"] = {"cache_prompt": False}
        if entry is not None:
            info["model_entry"] = {
                k: entry[k] for k in ("id", "owned_by") if k in entry
            } | ({"meta": entry["meta"]} if isinstance(entry.get("meta"), dict) else {})
        # belt and braces: nothing a server lists may carry the key into a raw file
        return json.loads(self._scrub(json.dumps(info)))

    def _entry(self, models: list[dict]) -> dict | None:
        for m in models:
            if m.get("id") == self.model:
                return m
        return models[0] if len(models) == 1 else None  # llama-server lists its one model

    def model_facts(self, described: dict) -> dict:
        entry = described.get("model_entry") or {}
        facts = {"served_id": entry["id"]} if "id" in entry else {}
        meta = entry.get("meta") or {}
        facts |= {name: meta[key] for key, name in META_FACTS.items() if key in meta}
        return facts

    # --- generation ---------------------------------------------------------------------

    def event_text(self, event: dict) -> str:
        choices = event.get("choices") or []
        return "".join(_content(c) for c in choices if isinstance(c, dict))

    def pin_outputs(self) -> bool:
        """Only where the target says its server honours ignore_eos (vLLM, SGLang, llama-server
        do; OpenAI's own API does not), so a bare OpenAI API's lengths stay ceilings."""
        return self.ignore_eos

    def payload(self, prompt: str, num_predict: int, temperature: float, seed: int) -> dict:
        body = {
            "max_tokens": num_predict,
            "temperature": temperature,
            "seed": seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model is not None:
            body["model"] = self.model
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if self.ignore_eos:
            body["ignore_eos"] = True  # llama-server and vLLM honour it; OpenAI proper does not
        if self.llama_server:
            body["cache_prompt"] = False  # no KV reuse across requests (module docstring)
        return body

    def request(self, prompt: str, num_predict: int, temperature: float, seed: int,
                allow_cache: bool) -> tuple[str, dict, dict]:
        body = self.payload(prompt, num_predict, temperature, seed)
        if "cache_prompt" in body:  # llama-server: its own switch (module docstring)
            body["cache_prompt"] = allow_cache
        headers = {"Accept": "text/event-stream"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key.reveal()}"
        return self.root + self.path, body, headers

    def unreachable(self, exc: Exception) -> BackendError:
        return self._error(f"POST {self.path}: cannot reach {self.root}: {exc}")

    def http_error(self, answer) -> BackendError:
        return self._http_error("POST", self.path, answer)

    def parse(self, answer, rec: RequestRecord) -> None:
        self._apply_final(rec, self._read_stream(answer, rec))

    def _read_stream(self, answer, rec: RequestRecord) -> dict:
        """Every event of the SSE stream; what the final chunks said."""
        state: dict = {"usage": None, "timings": None, "finish_reason": None, "t_last": None}
        for t, line in lines(answer.reads):
            if not line.startswith(b"data:"):
                continue  # blank separators, ": keep-alive" comments, "event:" names
            data = line[5:].strip()
            if data == b"[DONE]":
                return state
            try:
                event = json.loads(data)
            except ValueError:
                raise self._error(
                    f"POST {self.path}: unreadable stream line after {rec.chunks} chunks: "
                    f"{data[:200]!r}"
                ) from None
            if not isinstance(event, dict):
                continue
            if "error" in event or event.get("object") == "error":
                raise self._error(
                    f"POST {self.path}: server error mid-stream after {rec.chunks} "
                    f"chunks: {error_message(event)}"
                )
            self._take_chunk(event, rec, state, t)
        if answer.error is not None:
            raise self._error(
                f"POST {self.path}: stream broke after {rec.chunks} chunks: {answer.error}"
            )
        raise self._error(
            f"POST {self.path}: stream ended after {rec.chunks} chunks without data: [DONE]; "
            "the server closed the connection mid-generation"
        )

    def _take_chunk(self, event: dict, rec: RequestRecord, state: dict, now: float) -> None:
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if _content(choice):
                rec.text_arrived(now)
                state["t_last"] = now
                rec.chunks += 1
            if choice.get("finish_reason"):
                state["finish_reason"] = choice["finish_reason"]
        if isinstance(event.get("usage"), dict):
            state["usage"] = event["usage"]
        if isinstance(event.get("timings"), dict):
            state["timings"] = event["timings"]

    def _apply_final(self, rec: RequestRecord, state: dict) -> None:
        usage = {k: finite(v, f"usage.{k}", rec) for k, v in (state["usage"] or {}).items()}
        timings = {k: finite(v, k, rec) for k, v in (state["timings"] or {}).items()}
        completion = usage.get("completion_tokens", timings.get("predicted_n"))
        if completion is None and not rec.server.get("invalid"):
            raise self._error(
                f"POST {self.path}: the stream ended without usage; the server must support "
                "stream_options.include_usage (OpenAI, vLLM, SGLang and llama-server do)"
            )
        rec.output_tokens = None if completion is None else int(completion)
        prompt = usage.get("prompt_tokens")
        if prompt is None and timings.get("prompt_n") is not None:  # only uncached tokens
            prompt = timings["prompt_n"] + (timings.get("cache_n") or 0)
        rec.prompt_tokens = None if prompt is None else int(prompt)
        rec.done_reason = state["finish_reason"]
        rec.server |= {
            "finish_reason": state["finish_reason"],
            "usage_prompt_tokens": usage.get("prompt_tokens"),
            "usage_completion_tokens": usage.get("completion_tokens"),
            "ignore_eos": self.ignore_eos,
        } | {k: timings[k] for k in TIMING_FIELDS if k in timings}
        if "predicted_ms" in timings:
            ms = timings["predicted_ms"]
            rec.gen_s = None if ms is None else float(ms) / 1000.0
            rec.timing_source = "server"
            return
        # No server timings: the per-user rate is the n-1 intervals between the first and the
        # last token over the time they took; gen_s is scaled so that output_tokens / gen_s
        # is exactly that rate.
        rec.timing_source = "client"
        n, t_first, t_last = rec.output_tokens, rec.t_first, state["t_last"]
        if (n is not None and n > 1 and t_first is not None and t_last is not None
                and t_last > t_first):
            rec.gen_s = (t_last - t_first) * n / (n - 1)
        else:
            rec.gen_s = None  # one token (or one chunk) has no measurable generation rate
