"""Every key the schema types refuses every wrong value in one line, never with a crash.

The bad values come from config/schema.yaml itself: for every key with a declared type (a
oneOf's or anyOf's from all its branches), one value of each JSON type it does not accept, and
each bound stepped over (minimum - 1, maximum + 1, an exclusive bound itself, a string one
longer than maxLength, a list one shorter than minItems). Each is put into a small valid config
and resolved: it must raise ConfigError with one line that names the key; any other exception is
the crash this guards against. A key added to the schema later is covered without a change here.
"""

from __future__ import annotations

import copy
import re

import pytest

from slotbench.workflow.config import ConfigError, load_schema, resolve

HEAD = "invalid configuration (nothing was sent to any server): config key `"
URL = "http://127.0.0.1:9"
EXTERNAL = {"name": "ext", "backend": "llamacpp", "url": URL}
MANAGED = {"name": "m", "backend": "llamacpp", "managed": True, "server": {"cpus": [0]}}
# Lists hold one element or more, so a key below a list item has an item to sit in (the last);
# no arm is 2, so a bad arm 2.0 is only that, not also a second 2.
BASE = {"arms": [1, 3, {"rate": 1.0}], "requests_per_cell": 4, "reps": 1, "runs": ["r1"],
        "num_predict": 8, "warmup_predict": 2, "analysis": {"bootstrap": 100},
        "client": {"cpus": [0]}, "targets": [EXTERNAL, MANAGED]}
MATRIX_BASE = {k: v for k, v in BASE.items() if k != "targets"} | {
    "matrix": [{"base": {"name": "x", "backend": "llamacpp", "url": URL},
                "vary": {"model": ["a", "b"]}}]}

# one value of each JSON type; YAML's true is a boolean, never a whole number
SAMPLES = {"integer": [4], "number": [2.5], "string": ["four"], "boolean": [True],
           "array": [[4]], "object": [{"a": 1}], "null": [None]}


def _collect(key: str, schema: dict, out: dict[str, list[dict]]) -> None:
    branches = schema.get("oneOf") or schema.get("anyOf") or [schema]
    if any("type" in b for b in branches):
        out[key] = branches
    for branch in branches:
        for name, sub in (branch.get("properties") or {}).items():
            _collect(f"{key}.{name}", sub, out)
        if isinstance(branch.get("items"), dict):
            _collect(f"{key}[]", branch["items"], out)
        if isinstance(branch.get("additionalProperties"), dict):
            _collect(f"{key}.*", branch["additionalProperties"], out)


def typed_keys(schema: dict) -> dict[str, list[dict]]:
    """Every key with a declared type (``targets[].server.cpus[]``: an item of a list, ``.*``:
    any key of a mapping), with the branches it may take. A backend's ``then`` under targets
    holds defaults only, so it adds no key."""
    out: dict[str, list[dict]] = {}
    for name, sub in schema["properties"].items():
        _collect(name, sub, out)
    return out


def _types(branches: list[dict]) -> set[str]:
    kinds = set()
    for branch in branches:
        kind = branch.get("type", [])
        kinds |= set(kind if isinstance(kind, list) else [kind])
    return kinds | ({"integer"} if "number" in kinds else set())


def _bounds(branch: dict) -> list:
    """Each of the branch's bounds stepped over by one."""
    out = []
    if "minimum" in branch:
        out.append(branch["minimum"] - 1)
    if "maximum" in branch:
        out.append(branch["maximum"] + 1)
    out += [branch[b] for b in ("exclusiveMinimum", "exclusiveMaximum") if b in branch]
    if "maxLength" in branch:
        out.append("a" * (branch["maxLength"] + 1))
    if branch.get("minLength", 0) > 0:
        out.append("a" * (branch["minLength"] - 1))
    if branch.get("minItems", 0) > 0:
        out.append([1] * (branch["minItems"] - 1))  # arms: [1]; one item: the empty list
    return out


def bad_values(branches: list[dict]) -> list:
    """Values of every JSON type the key does not take, and its bounds stepped over."""
    kinds = _types(branches)
    out = [v for kind, values in SAMPLES.items() if kind not in kinds for v in values]
    if "integer" in kinds and "number" not in kinds:
        out.append(2.0)  # a float, even a whole one, is not a count
    for branch in branches:
        out += _bounds(branch)
        if branch.get("type") == "string" and "enum" in branch:
            out.append("nonesuch")
    return out


def _put(node, parts: list[str], value):
    """``node`` with ``value`` at ``parts``, and the concrete key it went to (a list's last
    item for ``[]``, a mapping's first key, or a new one, for ``*``)."""
    if not parts:
        return value, ""
    head, rest = parts[0], parts[1:]
    if head == "[]":
        items = list(node) if isinstance(node, list) and node else [None]
        items[-1], tail = _put(items[-1], rest, value)
        return items, f"[{len(items) - 1}]{tail}"
    mapping = dict(node) if isinstance(node, dict) else {}
    if head == "*":
        head = next(iter(mapping), "1")
    mapping[head], tail = _put(mapping.get(head), rest, value)
    return mapping, f".{head}{tail}"


def place(key: str, value) -> tuple[dict, str]:
    """A valid config with ``value`` at ``key``, and the key as the message must name it."""
    base = MATRIX_BASE if key.startswith("matrix") else BASE
    cfg, concrete = _put(copy.deepcopy(base), re.findall(r"\[\]|[^.\[\]]+", key), value)
    return cfg, concrete.lstrip(".")


def _url(url: str) -> tuple[dict, str]:
    """The valid config with its external target's URL set to ``url``."""
    return BASE | {"targets": [EXTERNAL | {"url": url}, MANAGED]}, "targets[0].url"


# Mistakes users made, by name (each also arises from the schema below).
NAMED = {
    "requests_per_cell 2.0": place("requests_per_cell", 2.0),
    "requests_per_cell 'four'": place("requests_per_cell", "four"),
    "requests_per_cell [4]": place("requests_per_cell", [4]),
    "requests_per_cell true": place("requests_per_cell", True),
    "url with port 99999": _url("http://127.0.0.1:99999"),
    "url with port abc": _url("http://127.0.0.1:abc"),
    "url with a malformed IPv6 literal": _url("http://[::1"),
    "url without a host": _url("http://"),
    "num_predict 1e9, a float": place("num_predict", 1e9),
    "num_predict 1000000000": place("num_predict", 10**9),
    "num_predict '1e9', as YAML 1.1 reads it": place("num_predict", "1e9"),
    "temperature 1e6": place("temperature", 1e6),
    "metrics_url with port abc": (BASE | {"targets": [
        EXTERNAL | {"metrics_url": "http://127.0.0.1:abc/metrics"}, MANAGED]},
        "targets[0].metrics_url"),
    "an exporter without a host": (BASE | {"targets": [
        EXTERNAL | {"exporters": ["http://127.0.0.1:9400/metrics", "http://"]}, MANAGED]},
        "targets[0].exporters[1]"),
    "metrics_url on a managed target": place("targets[].metrics_url", "http://127.0.0.1:9/m"),
}
DERIVED = {f"{key} = {value!r}": (key, value)
           for key, branches in typed_keys(load_schema()).items()
           for value in bad_values(branches)}
CASES = NAMED | {name: place(*kv) for name, kv in DERIVED.items()}


def test_the_bases_are_valid():
    resolve(copy.deepcopy(BASE))
    resolve(copy.deepcopy(MATRIX_BASE))


def test_every_typed_key_of_the_schema_gets_bad_values():
    keys = typed_keys(load_schema())
    covered = {key for key, _ in DERIVED.values()}
    assert set(keys) == covered, set(keys) ^ covered
    for key in ["requests_per_cell", "arms[]", "runs", "client.processes", "checks.precision",
                "analysis.ci", "prompt.nonce_digits", "thermal.interval_s", "slo.goodput",
                "archive.name", "targets[].url", "targets[].server.ctx_size",
                "targets[].server.cpus[]", "targets[].ollama_env.*", "arms[].rate"]:
        assert key in keys, key


def test_every_property_of_the_schema_is_a_typed_key():
    """The walk misses no key: every property the schema names anywhere is typed and found
    (a key without a type, or one the walk cannot reach, would go unchecked)."""

    def names(node) -> set[str]:
        if isinstance(node, list):
            return set().union(*map(names, node)) if node else set()
        if not isinstance(node, dict):
            return set()
        own = set(node["properties"]) if isinstance(node.get("properties"), dict) else set()
        return own.union(*map(names, node.values()))

    schema = load_schema()
    found = {k.rsplit(".", 1)[-1].removesuffix("[]") for k in typed_keys(schema)}
    assert not names(schema) - found, names(schema) - found


# the mistakes users made in the fast tier; the whole sweep the schema derives in the slow one
# (hundreds of cases, each resolving a config)
@pytest.mark.parametrize("name", [*NAMED, *(pytest.param(n, marks=pytest.mark.slow)
                                            for n in DERIVED)])
def test_a_bad_value_is_one_line_naming_its_key(name):
    cfg, key = CASES[name]
    try:
        resolve(cfg)
    except ConfigError as err:
        message = str(err)
    else:
        pytest.fail(f"{name}: accepted")
    assert "\n" not in message, message
    assert message.startswith(HEAD + key), message
    assert "Traceback" not in message
    assert not re.search(r"\b[A-Za-z]*(Error|Exception)\b", message), message


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:abc", "http://[::1",
                                 "http://", "ftp://x", "http://a b"])
def test_the_endpoint_resources_refuse_a_bad_url_in_one_line(url):
    """Validation refuses these first; should one get past it, rules/common.smk still gets a
    ConfigError of one line to print, not a traceback from urllib."""
    from slotbench.workflow.resources import endpoint_resources

    with pytest.raises(ConfigError) as err:
        endpoint_resources({"name": "ext", "managed": False, "url": url}, [0])
    assert "\n" not in str(err.value) and "config key `url` of target 'ext'" in str(err.value)


def test_an_error_no_wording_fits_still_gets_its_own_message_in_one_line(monkeypatch):
    from slotbench.workflow import config

    def broken(error):
        raise KeyError("no wording")

    monkeypatch.setattr(config, "_phrase", broken)
    with pytest.raises(ConfigError) as err:
        resolve(BASE | {"num_predict": 0})
    assert str(err.value) == f"{HEAD}num_predict`: 0 is less than the minimum of 1"
