"""Ollama: native ``POST /api/generate`` with a newline-delimited JSON stream.

Each line is one chunk ``{"model", "created_at", "response", "done": false}`` until the final
chunk (``done: true``), which carries ``done_reason`` and the metrics ``total_duration``,
``load_duration``, ``prompt_eval_count``, ``prompt_eval_duration``, ``eval_count`` and
``eval_duration`` (durations in integer nanoseconds). Ollama omits every metric that is zero, so
an absent field is recorded as None, never as an invented 0. Errors arrive as ``{"error": …}``:
as the body of a non-200 answer, or as a line of a stream that already answered 200.

The effective ``OLLAMA_NUM_PARALLEL`` is not visible over HTTP: for an external server the
target states its settings in ``ollama_env``; a managed server records the env it set.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import requests

from slotbench.measure.backends.base import (
    Backend,
    BackendError,
    RequestRecord,
    body_line,
    error_body,
    error_text,
    finite,
)
from slotbench.measure.backends.transport import lines

# final-chunk field → name in RequestRecord.server (durations keep Ollama's nanoseconds)
FINAL_FIELDS = {
    "eval_count": "eval_count",
    "eval_duration": "eval_duration_ns",
    "prompt_eval_count": "prompt_eval_count",
    "prompt_eval_duration": "prompt_eval_duration_ns",
    "load_duration": "load_duration_ns",
    "total_duration": "total_duration_ns",
}
PS_FIELDS = ("name", "model", "size", "size_vram", "context_length", "expires_at")
TAG_FIELDS = ("name", "digest", "size", "modified_at")


def _drop_none(d: dict) -> dict:
    """Unset settings are left to the server's defaults rather than sent as null."""
    return {k: (_drop_none(v) if isinstance(v, dict) else v) for k, v in d.items() if v is not None}


def _full_name(name: str) -> str:
    """``gemma3`` and ``gemma3:latest`` name the same model; compare them equal."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


class OllamaBackend(Backend):
    name = "ollama"
    path = "/api/generate"

    def __init__(self, base_url: str, target: dict | None = None,
                 timeout_s: float | None = None):
        super().__init__(base_url, target, timeout_s)
        self.num_ctx = self.target.get("num_ctx")
        self.keep_alive = self.target.get("keep_alive")

    # -- errors ---------------------------------------------------------------------------

    def _unreachable(self, what: str, exc: Exception) -> BackendError:
        if isinstance(exc, requests.Timeout):
            return BackendError(f"{what}: Ollama at {self.base_url} did not answer in time: {exc}")
        hint = (
            "the managed `ollama serve` is no longer answering"
            if self.target.get("managed")
            else "is Ollama running there (`ollama serve`), and is the target's url right?"
        )
        return BackendError(f"{what}: cannot reach Ollama at {self.base_url}; {hint} ({exc})")

    def _http_error(self, what: str, resp) -> BackendError:
        error = self._said_error(what, resp)
        error.body = error_body(resp)
        return error

    def _said_error(self, what: str, resp) -> BackendError:
        text = error_text(resp)
        if resp.status_code == 404 and "model" in text.lower() and "not found" in text:
            store = (
                " (the managed server reads your default model store: OLLAMA_MODELS, "
                "else ~/.ollama/models)"
                if self.target.get("managed")
                else ""
            )
            return BackendError(
                f"{what}: Ollama at {self.base_url} does not have model {self.model!r} "
                f"(HTTP 404: {text}); run `ollama pull {self.model}`{store} and rerun"
            )
        if resp.status_code == 503:
            return BackendError(
                f"{what}: Ollama at {self.base_url} is busy (HTTP 503: {text}): its queue of "
                "pending requests is full (OLLAMA_MAX_QUEUE) or the server is overloaded; "
                "raise OLLAMA_MAX_QUEUE or make sure nothing else is using this server"
            )
        hint = "; is this an Ollama server?" if resp.status_code == 404 else ""
        return BackendError(
            f"{what}: Ollama at {self.base_url} answered HTTP {resp.status_code}: {text}{hint}"
        )

    def _get(self, path: str) -> dict:
        try:
            resp = self.session.get(self.base_url + path, timeout=10)
        except requests.RequestException as exc:
            raise self._unreachable(f"GET {path}", exc) from exc
        if resp.status_code != 200:
            raise self._http_error(f"GET {path}", resp)
        return self._json(f"GET {path}", resp)

    def _post(self, path: str, body: dict, timeout: float) -> dict:
        try:
            resp = self.session.post(self.base_url + path, json=body, timeout=(10, timeout))
        except requests.RequestException as exc:
            raise self._unreachable(f"POST {path}", exc) from exc
        if resp.status_code != 200:
            raise self._http_error(f"POST {path}", resp)
        return self._json(f"POST {path}", resp)

    def _json(self, what: str, resp: requests.Response) -> dict:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise BackendError(
                f"{what}: {self.base_url} answered {body_line(resp.text, quote=True)}, not "
                "Ollama's JSON; is this an Ollama server?", body=resp.text
            )
        return body

    # -- requests -------------------------------------------------------------------------

    def tokenizer(self):
        return None  # Ollama has no tokenize endpoint; prompt_eval_count verifies equality

    def load(self) -> None:
        """Load the model with the measured requests' num_ctx, so no measured request reloads it."""
        body = _drop_none({"model": self.model, "stream": False, "keep_alive": self.keep_alive,
                           "options": {"num_ctx": self.num_ctx}})
        answer = self._post("/api/generate", body, self.timeout_s)
        if "error" in answer:
            raise BackendError(f"POST /api/generate (model load): Ollama said: {answer['error']}")

    def payload(self, prompt: str, num_predict: int, temperature: float, seed: int) -> dict:
        return _drop_none({
            "model": self.model,
            "prompt": prompt,
            "stream": True,
            "think": False,  # a thinking model would otherwise spend its budget out of sight
            "keep_alive": self.keep_alive,
            "options": {
                "num_predict": num_predict,
                "num_ctx": self.num_ctx,  # the same as the warm-up load: no reload
                "seed": seed,
                "temperature": temperature,
            },
        })

    def request(self, prompt: str, num_predict: int, temperature: float, seed: int,
                allow_cache: bool) -> tuple[str, dict, dict]:
        # Ollama has no per-request switch: it always reuses a cached prefix when it can.
        return self.base_url + self.path, self.payload(prompt, num_predict, temperature, seed), {}

    def unreachable(self, exc: Exception) -> BackendError:
        return self._unreachable("POST /api/generate", exc)

    def http_error(self, answer) -> BackendError:
        return self._http_error("POST /api/generate", answer)

    def event_text(self, event: dict) -> str:
        return str(event.get("response") or "")

    def parse(self, answer, rec: RequestRecord) -> None:
        self._apply_final(rec, self._read_stream(answer, rec))

    def _read_stream(self, answer, rec: RequestRecord) -> dict:
        first_any = None  # arrival of the first non-final chunk, if none carried text
        for now, line in lines(answer.reads):
            if not line.strip():
                continue
            try:
                chunk = json.loads(line)
            except ValueError:
                raise BackendError(
                    f"POST /api/generate: not an Ollama stream line after {rec.chunks} chunks: "
                    f"{line[:200]!r}"
                ) from None
            if not isinstance(chunk, dict):
                raise BackendError(
                    f"POST /api/generate: not an Ollama stream line after {rec.chunks} chunks: "
                    f"{line[:200]!r}"
                )
            if "error" in chunk:
                raise BackendError(
                    f"POST /api/generate: Ollama reported an error mid-stream after "
                    f"{rec.chunks} chunks: {chunk['error']}"
                )
            if chunk.get("done"):
                rec.t_first = rec.t_first if rec.t_first is not None else first_any
                return chunk
            rec.chunks += 1
            if first_any is None:
                first_any = now
            if chunk.get("response"):
                rec.text_arrived(now)
        if answer.error is not None:
            raise BackendError(
                f"POST /api/generate: stream from {self.base_url} broke after {rec.chunks} "
                f"chunks: {answer.error}"
            )
        raise BackendError(
            f"POST /api/generate: stream from {self.base_url} ended after {rec.chunks} chunks "
            "without a final chunk (done: true); the server may have crashed or been stopped"
        )

    @staticmethod
    def _apply_final(rec: RequestRecord, final: dict) -> None:
        rec.server |= {name: finite(final.get(key), key, rec) for key, name in FINAL_FIELDS.items()}
        rec.server["done_reason"] = final.get("done_reason")
        count = rec.server["eval_count"]
        rec.output_tokens = 0 if count is None and "eval_count" not in final else (
            None if count is None else int(count))  # omitted means zero tokens
        duration = rec.server["eval_duration_ns"]
        rec.gen_s = None if duration is None else duration / 1e9
        count = rec.server["prompt_eval_count"]
        rec.prompt_tokens = None if count is None else int(count)
        rec.done_reason = final.get("done_reason")

    # -- description ----------------------------------------------------------------------

    def slot_context(self) -> tuple[int, str] | None:
        ctx = self.target.get("num_ctx")
        return (int(ctx), "num_ctx, the context every request asks for") if ctx else None

    def describe(self) -> dict:
        version = self._get("/api/version").get("version")
        tags = self._get("/api/tags").get("models") or []
        wanted = _full_name(self.model or "")
        entry = next(
            (m for m in tags
             if wanted in (_full_name(m.get("name", "")), _full_name(m.get("model", "")))),
            None,
        )
        return {
            "version": version,
            "model_tag": None if entry is None else {k: entry.get(k) for k in TAG_FIELDS},
            "show": self._show(),
            "ps": self._ps(),
            "requested_num_ctx": self.num_ctx,
            "ollama_env": self._ollama_env(),
        }

    def _show(self) -> dict:
        try:
            show = self._post("/api/show", {"model": self.model}, 30)
        except BackendError as exc:
            return {"unavailable": str(exc)}
        info = show.get("model_info") or {}
        keep = {"general.architecture", "general.parameter_count"}
        return {
            "details": show.get("details") or {},
            "model_info": {k: v for k, v in info.items()
                           if k in keep or k.endswith(".context_length")},
        }

    def placement(self) -> list | dict:
        return self._ps()

    def _ps(self) -> list | dict:
        try:
            models = self._get("/api/ps").get("models") or []
        except BackendError as exc:
            return {"unavailable": str(exc)}
        return [{k: m.get(k) for k in PS_FIELDS} for m in models]

    def _ollama_env(self) -> dict:
        if self.target.get("managed") and "server" in self.target:
            # the same function that started it
            from slotbench.measure.servers.ollama import managed_env

            return managed_env(self.target["server"], urlsplit(self.base_url).netloc)
        return dict(self.target.get("ollama_env") or {})

    def model_facts(self, described: dict) -> dict:
        show = described.get("show") or {}
        details = show.get("details") or {}
        tag = described.get("model_tag") or {}
        return {
            "quantisation": details.get("quantization_level"),
            "digest": tag.get("digest"),
            "size_bytes": tag.get("size"),
            "parameter_size": details.get("parameter_size"),
            "family": details.get("family"),
        }
