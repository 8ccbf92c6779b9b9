"""llama.cpp ``llama-server``: native ``POST /completion`` with server-sent events.

Each ``data:`` event is one token (``stop: false``) until the final event (``stop: true``),
which carries ``timings`` (prompt_n, prompt_ms, predicted_n, predicted_ms, cache_n),
``stop_type`` (eos, limit, word, none) and ``tokens_evaluated``.
"""

from __future__ import annotations

import json

import requests

from .base import Backend, BackendError, RequestRecord, finish, make_session, stream_lines

# stop_type → the done_reason vocabulary shared with Ollama and OpenAI ("stop" or "length").
DONE_REASON = {"eos": "stop", "word": "stop", "limit": "length"}


def _error_text(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:300] or resp.reason
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        return str(err.get("message", err))
    return str(err)


class LlamaCppBackend(Backend):
    name = "llamacpp"

    def __init__(self, base_url: str, target: dict | None = None, timeout_s: float = 300):
        super().__init__(base_url, target, timeout_s)
        self.session = make_session()
        # pin every output to num_predict tokens (llama-server biases the EOG tokens to -inf)
        self.ignore_eos = bool(self.target.get("ignore_eos", False))

    def _get(self, path: str) -> dict | list:
        try:
            resp = self.session.get(self.base_url + path, timeout=10)
        except requests.RequestException as exc:
            raise BackendError(f"GET {path} failed: {exc}") from exc
        if resp.status_code != 200:
            raise BackendError(f"GET {path}: HTTP {resp.status_code}: {_error_text(resp)}")
        return resp.json()

    def tokenizer(self):
        return self.count_tokens

    def count_tokens(self, text: str) -> int:
        try:
            resp = self.session.post(
                self.base_url + "/tokenize", json={"content": text, "add_special": True}, timeout=10
            )
        except requests.RequestException as exc:
            raise BackendError(f"POST /tokenize failed: {exc}") from exc
        if resp.status_code != 200:
            raise BackendError(f"POST /tokenize: HTTP {resp.status_code}: {_error_text(resp)}")
        return len(resp.json()["tokens"])

    def describe(self) -> dict:
        props = self._get("/props")
        gen = props.get("default_generation_settings", {}) if isinstance(props, dict) else {}
        try:
            slots = self._get("/slots")
        except BackendError as exc:  # /slots can be disabled with --no-slots
            slots = {"unavailable": str(exc)}
        return {
            "props": {
                "build_info": props.get("build_info"),
                "model_path": props.get("model_path"),
                "model_ftype": props.get("model_ftype"),
                "total_slots": props.get("total_slots"),
                "n_ctx": gen.get("n_ctx"),
                "modalities": props.get("modalities"),
            },
            "slots": len(slots) if isinstance(slots, list) else slots,
            "ignore_eos": self.ignore_eos,
        }

    def model_facts(self, described: dict) -> dict:
        props = described.get("props", {})
        return {"quantisation": props.get("model_ftype"), "file": props.get("model_path")}

    def payload(self, prompt: str, num_predict: int, temperature: float, seed: int) -> dict:
        return {
            "prompt": prompt,
            "n_predict": num_predict,
            "temperature": temperature,
            "seed": seed,
            "stream": True,
            "cache_prompt": False,  # no measured request may reuse another's KV cache
        } | ({"ignore_eos": True} if self.ignore_eos else {})

    def generate(self, prompt: str, num_predict: int, temperature: float, seed: int,
                 allow_cache: bool = False) -> RequestRecord:  # fmt: skip
        body = self.payload(prompt, num_predict, temperature, seed)
        body["cache_prompt"] = allow_cache
        rec = RequestRecord(t_sent=self.now())
        try:
            resp = self.post_stream(self.session, rec, self.base_url + "/completion", json=body,
                                    timeout=(10, self.timeout_s))
        except requests.RequestException as exc:
            raise BackendError(f"POST /completion: cannot reach {self.base_url}: {exc}") from exc
        with resp:
            if resp.status_code != 200:
                raise BackendError(f"POST /completion: HTTP {resp.status_code}: {_error_text(resp)}")
            final = self._read_stream(resp, rec)
            rec.t_done = self.now()
            finish(resp)
        self._apply_final(rec, final)
        rec.server["ignore_eos"] = self.ignore_eos
        return rec

    def _read_stream(self, resp: requests.Response, rec: RequestRecord) -> dict:
        try:
            for line in stream_lines(resp):
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    raise BackendError(f"server error mid-stream: {event['error']}")
                if event.get("stop"):
                    return event
                if rec.t_first is None:
                    rec.t_first = self.now()
                rec.chunks += 1
        except requests.RequestException as exc:
            raise BackendError(f"stream broke after {rec.chunks} tokens: {exc}") from exc
        raise BackendError(f"stream ended after {rec.chunks} tokens without a final (stop) event")

    @staticmethod
    def _apply_final(rec: RequestRecord, final: dict) -> None:
        timings = final.get("timings") or {}
        if "predicted_n" not in timings:
            raise BackendError("final event carries no timings; is this a llama-server?")
        rec.output_tokens = int(timings["predicted_n"])
        rec.gen_s = float(timings["predicted_ms"]) / 1000.0
        rec.prompt_tokens = int(final.get("tokens_evaluated", timings.get("prompt_n", 0)))
        stop_type = final.get("stop_type", "none")
        rec.done_reason = DONE_REASON.get(stop_type, stop_type)
        rec.server = {
            "prompt_n": timings.get("prompt_n"),
            "prompt_ms": timings.get("prompt_ms"),
            "predicted_n": timings.get("predicted_n"),
            "predicted_ms": timings.get("predicted_ms"),
            "cache_n": timings.get("cache_n", 0),
            "stop_type": stop_type,
        }
