"""What answers at a URL: a server's backend and model, found by asking it, so that
`slotbench run --url URL` can measure a server it was given only the address of.

The backends are asked for in an order that tells them apart: Ollama and llama-server also
answer an OpenAI-style ``GET /v1/models``, so that path comes last.

- ``GET /api/version`` answered with ``{"version": ...}``: Ollama;
- ``GET /props`` answered with llama-server's properties (``total_slots``,
  ``default_generation_settings``, ``build_info`` or ``model_path``): llama-server;
- ``GET /v1/models`` answered with a model list (``{"data": [...]}``): an OpenAI-compatible
  server (vLLM, SGLang, LM Studio …).

Each backend's target takes the server's root URL (the OpenAI backend adds ``/v1`` itself), so a
URL given with a trailing ``/v1`` is written without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import requests

from slotbench.core import urls
from slotbench.measure.backends.openai import api_root
from slotbench.measure.backends.transport import make_session

# How long each question may take: a server that is there answers these at once.
DETECT_TIMEOUT_S = 3.0
# (backend, path asked, what answers it), in the order asked
PROBES = (
    ("ollama", "/api/version", "Ollama"),
    ("llamacpp", "/props", "llama-server"),
    ("openai", "/v1/models", "an OpenAI-compatible server"),
)
LLAMA_PROPS = ("total_slots", "default_generation_settings", "build_info", "model_path")
# where a backend lists its models, and how to read a model's name from an entry
MODEL_LISTS = {"ollama": ("/api/tags", "models", "name"), "openai": ("/v1/models", "data", "id")}


class DetectError(Exception):
    """Nothing answers at the URL, or not as a server slotbench knows; one line."""


@dataclass(frozen=True)
class Server:
    backend: str
    url: str  # the server's root, as the backend's target takes it
    how: str  # how it was found, e.g. "GET /props answered as llama-server"


def server_root(url: str) -> str:
    """The server's root URL from a URL given with or without a trailing / or /v1; a URL that
    is no server's address is refused (DetectError, one line)."""
    root = api_root(str(url).strip())
    try:
        urls.endpoint(root)
    except ValueError as exc:
        raise DetectError(f"--url {url!r} {exc}") from None
    return root


def _json(resp: requests.Response):
    try:
        return resp.json()
    except ValueError:
        return None


def _answers_as(backend: str, resp: requests.Response) -> bool:
    if resp.status_code != 200:
        return False
    body = _json(resp)
    if backend == "ollama":  # and not a llama-server that learnt this path too
        return (isinstance(body, dict) and isinstance(body.get("version"), str)
                and not resp.headers.get("Server", "").startswith("llama.cpp"))
    if backend == "llamacpp":
        return isinstance(body, dict) and any(key in body for key in LLAMA_PROPS)
    return isinstance(body, dict) and isinstance(body.get("data"), list)


def _unreachable(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.Timeout):
        return f"no answer in {DETECT_TIMEOUT_S:g} s"
    said = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    return said.group(1).strip().lower() if said else "cannot connect"


def detect(url: str, session: requests.Session | None = None) -> Server:
    """The backend of the server at ``url``, asked in the order of PROBES."""
    root = server_root(url)
    session = session or make_session()
    answers = []
    for backend, path, what in PROBES:
        try:
            resp = session.get(root + path, timeout=DETECT_TIMEOUT_S)
        except requests.RequestException as exc:
            # a server that is not there is not there for the next path either
            raise DetectError(f"nothing answers at {root} (tried GET {path}: {_unreachable(exc)});"
                              " is the server running, and is the URL right?") from None
        if _answers_as(backend, resp):
            return Server(backend, root, f"GET {path} answered as {what}")
        answers.append(f"GET {path}: HTTP {resp.status_code}"
                       + ("" if resp.status_code != 200 else ", not as " + what))
    raise DetectError(
        f"{root} answers, but not as Ollama, llama-server or an OpenAI-compatible server "
        f"({'; '.join(answers)}); give --backend if you know which it is")


def listed_models(backend: str, root: str, session: requests.Session | None = None) -> list[str]:
    """The models an Ollama (``GET /api/tags``) or OpenAI-compatible server
    (``GET /v1/models``) lists; a llama-server's is the one it reports, so none is listed."""
    if backend not in MODEL_LISTS:
        return []
    path, key, field = MODEL_LISTS[backend]
    session = session or make_session()
    try:
        resp = session.get(root + path, timeout=DETECT_TIMEOUT_S)
    except requests.RequestException as exc:
        raise DetectError(f"cannot list the models at {root} (GET {path}: "
                          f"{_unreachable(exc)}); give --model") from None
    body = _json(resp) if resp.status_code == 200 else None
    entries = body.get(key) if isinstance(body, dict) else None
    if not isinstance(entries, list):
        raise DetectError(f"cannot list the models at {root} (GET {path}: HTTP "
                          f"{resp.status_code}); give --model")
    return [e[field] for e in entries if isinstance(e, dict) and isinstance(e.get(field), str)]


def pick_model(backend: str, root: str, given: str | None,
               session: requests.Session | None = None) -> tuple[str | None, str | None]:
    """(model, why) for the target: the one given; none for a llama-server (it reports its
    own); else the one model the server lists, with the sentence that says so. More or fewer
    is a DetectError naming them."""
    if given or backend == "llamacpp":
        return given, None
    models = listed_models(backend, root, session)
    path = MODEL_LISTS[backend][0]
    if len(models) == 1:
        return models[0], f"model {models[0]}, the one model {root} lists (GET {path})"
    if not models:
        hint = " (ollama pull MODEL)" if backend == "ollama" else ""
        raise DetectError(f"{root} lists no model (GET {path}){hint}; give --model")
    raise DetectError(f"{root} lists {len(models)} models ({', '.join(models)}); "
                      "pick one with --model")


def target_for(backend: str, root: str, model: str | None, name: str) -> dict:
    """The config's target for an external server at ``root``."""
    return {"name": name, "backend": backend, "managed": False, "url": root,
            **({"model": model} if model else {})}
