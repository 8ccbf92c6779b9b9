"""The schema's defaults: filled into a config, and read by code that has none.

config/schema.yaml holds every default. ``config.resolve`` fills them in (:func:`fill`; a
target's backend and managed-server defaults with :func:`fill_target`, which derives the ones
that are null from the other keys by their ``x-default`` rule), so code that reads the resolved
config indexes it. Code handed settings made without the resolved config (a backend or server
built by a benchmark or a test, a report without a config) or a config older than a key asks
:func:`default` or :func:`value` for the schema's default rather than writing it a second time.
Only PyYAML is needed, so every rule's environment can read it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from slotbench.core.code import REPO

SCHEMA_PATH = REPO / "config" / "schema.yaml"


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    """The schema, a copy of its own for the caller: each text is parsed once a process (a
    parse took 0.1 s, and every config check reads the schema)."""
    return copy.deepcopy(_parsed(Path(path).read_bytes()))


@functools.lru_cache(maxsize=4)
def _parsed(text: bytes) -> dict:
    return yaml.safe_load(text.decode("utf-8"))


@functools.cache
def _schema() -> dict:
    return load_schema()


def _node(schema: dict, key: str) -> dict:
    """The schema of a dotted key; ``[]`` steps into a list's items (``arms[].arrival``)."""
    node = schema
    for part in key.replace("[]", ".[]").split("."):
        if part == "[]":
            node = node["items"]
            node = next((b for b in node.get("oneOf", []) if "properties" in b), node)
        else:
            node = node["properties"][part]
    return node


def default(key: str, backend: str | None = None, managed: bool | None = None) -> Any:
    """The schema's default of ``key`` (e.g. "analysis.bootstrap", "arms[].arrival"); a
    target's key whose default depends on its backend (e.g. "targets[].endpoint") with that
    ``backend``, for a target that is ``managed`` or not (None: as the schema's default).
    KeyError for a key the schema gives no default."""
    schema = _schema()
    if backend is not None and key.startswith("targets[]."):
        with contextlib.suppress(KeyError):
            return _node(backend_defaults(schema, backend, managed),
                         key.removeprefix("targets[]."))["default"]
    return _node(schema, key)["default"]


def value(settings: dict | None, key: str, backend: str | None = None) -> Any:
    """``settings``' value of the last part of ``key`` where they give it, else the schema's
    default of ``key`` (settings made without the resolved config, or before the key)."""
    leaf = key.rsplit(".", 1)[-1]
    if settings and leaf in settings:
        return settings[leaf]
    return default(key, backend, (settings or {}).get("managed"))


def fill(instance: Any, schema: dict) -> Any:
    """Return a copy of ``instance`` with schema defaults filled in, recursively."""
    if instance is None and "default" in schema:
        instance = copy.deepcopy(schema["default"])
    if isinstance(instance, dict) and "properties" in schema:
        out = dict(instance)
        for key, sub in schema["properties"].items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = fill(out[key], sub)
        return out
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [fill(item, schema["items"]) for item in instance]
    if isinstance(instance, dict) and "oneOf" in schema:  # e.g. an arm: a number or a mapping
        for branch in schema["oneOf"]:
            if branch.get("type") == "object" and "properties" in branch:
                return fill(instance, branch)
    return instance


# Every default sits in the schema; these read the ones that depend on a target's backend or
# are derived from other keys (see the schema's `allOf` under `targets` and its `x-default`s).
def target_schema(schema: dict) -> dict:
    return schema["properties"]["targets"]["items"]


def backend_defaults(schema: dict, backend: Any, managed: Any = None) -> dict:
    """The schema that adds ``backend``'s defaults to a target, ``managed`` or not (None: as
    the schema's default): the ``then`` of every ``if`` that names the backend, and names
    managed as ``managed`` or not at all, merged (the embedded model is a managed llamacpp
    target's default alone)."""
    if managed is None:
        managed = target_schema(schema)["properties"]["managed"]["default"]
    merged: dict = {}
    for branch in target_schema(schema).get("allOf", []):
        names = branch["if"]["properties"]
        if names["backend"].get("const") != backend:
            continue
        if "managed" in names and names["managed"].get("const") != bool(managed):
            continue
        merged = _merged(merged, branch["then"])
    return merged


def _merged(base: dict, extra: dict) -> dict:
    """``base`` with ``extra``'s keys added, mappings merged key by key all the way down."""
    out = dict(base)
    for key, sub in extra.items():
        both = isinstance(out.get(key), dict) and isinstance(sub, dict)
        out[key] = _merged(out[key], sub) if both else sub
    return out


def derived_default(schema: dict, key: str) -> dict:
    """The rule and constants of a managed server's default derived from other keys."""
    return target_schema(schema)["properties"]["server"]["properties"][key]["x-default"]


def fill_target(target: dict, arms: list, schema: dict) -> dict:
    """A target with its backend's defaults and, when managed, its server's: the schema's, the
    backend's, then those whose default is null, derived (see _derive)."""
    backend = backend_defaults(schema, target.get("backend"), target.get("managed"))
    given = target.get("server", {})
    out = fill({k: v for k, v in target.items() if k != "server"}, backend)
    if "server" in target:
        out["server"] = given
    if not (out.get("managed") and isinstance(given, dict)):
        return out
    server = fill(given, target_schema(schema)["properties"]["server"])
    server = fill(server, backend.get("properties", {}).get("server", {}))
    out["server"] = _derive(server, arms, schema)
    return out


def _derive(server: dict, arms: list, schema: dict) -> dict:
    """A managed server's keys whose default is null, derived by their schema's ``x-default``
    rule: parallel from the arms, threads from the server's CPUs, ctx_size from parallel. A key
    that cannot be derived (another key is wrong, and says so) is left out."""
    unset = {k for k, v in server.items() if v is None}
    if "parallel" in unset:
        server["parallel"] = max((a for a in arms if isinstance(a, int)), default=1)
    if "threads" in unset:
        cpus = server.get("cpus")
        server["threads"] = (max(1, len(cpus)) if isinstance(cpus, list)  # its share of cores
                             else derived_default(schema, "threads")["without_cpus"])
    if "ctx_size" in unset and isinstance(server["parallel"], int):
        ctx = derived_default(schema, "ctx_size")
        server["ctx_size"] = max(ctx["at_least"], ctx["per_slot"] * server["parallel"])
    return {k: v for k, v in server.items() if v is not None}
