"""Resolve and validate the configuration before anything is sent to a server.

The JSON schema (config/schema.yaml) carries every default, so the resolved config that the
rules see is complete and the fingerprint can record it whole. Errors name the key and say why.
"""

from __future__ import annotations

import copy
import datetime
import math
import os
import string
from typing import Any

import jsonschema

from slotbench.core import urls
from slotbench.core.cells import arm_id, arm_order
from slotbench.core.code import REPO
from slotbench.core.experiments import LAYOUT

# the schema's defaults, read and filled in (config.default(key) reads one)
from slotbench.core.defaults import (  # noqa: F401
    SCHEMA_PATH,
    backend_defaults,
    default,
    derived_default,
    fill,
    fill_target,
    load_schema,
)
from slotbench.measure.plan import auto_processes
from slotbench.measure.workload import is_article
from slotbench.measure.workload import pruned as pruned_workload
from slotbench.workflow import matrix, stopping, workloads

REPO_CONFIG = REPO / "config" / "config.yaml"


class ConfigError(ValueError):
    """A configuration problem, phrased for the person who wrote the config."""


def _strict_types() -> jsonschema.TypeChecker:
    """JSON Schema's types, stricter where YAML is loose: 2.0 is not an integer, and NaN and
    infinities are not numbers (they compare false with every bound, so no minimum stops them)."""
    base = jsonschema.Draft202012Validator.TYPE_CHECKER

    def integer(checker, value):
        return isinstance(value, int) and not isinstance(value, bool)

    def number(checker, value):
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))

    return base.redefine_many({"integer": integer, "number": number})


VALIDATOR = jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                         type_checker=_strict_types())


def _nulls(value: Any, path: str = "") -> list[str]:
    """Keys given with no value (``reps:`` or ``targets:`` alone in a YAML file)."""
    if isinstance(value, dict):
        found = []
        for key, sub in value.items():
            where = f"{path}.{key}" if path else str(key)
            found += [where] if sub is None else _nulls(sub, where)
        return found
    if isinstance(value, list):
        return [p for i, sub in enumerate(value) for p in _nulls(sub, f"{path}[{i}]")]
    return []


def template_problems(template: str) -> list[str]:
    """A prompt template must hold {nonce}, and nothing else in braces (literal braces doubled)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        return [f"config key `prompt.template`: {exc}; write a literal brace as {{{{ or }}}}"]
    other = sorted({f for f in fields if f != "nonce"})
    problems = []
    if other:
        problems.append(
            "config key `prompt.template`: only {nonce} may stand in braces, not "
            + ", ".join("{" + f + "}" for f in other) + "; write a literal brace as {{ or }}"
        )
    if "nonce" not in fields:
        problems.append(
            "config key `prompt.template`: it has no {nonce} field (a doubled {{nonce}} is the "
            "literal text, so every prompt would be the same); every request needs its own nonce"
        )
    return problems


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = []
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else (f".{part}" if parts else part))
    return "".join(parts) or "(top level)"


TYPE_WORDS = {"integer": "a whole number", "number": "a finite number", "boolean": "true or false",
              "string": "text", "array": "a list", "object": "a mapping of keys"}


def _wanted(schema) -> str:
    """What a schema (or a oneOf branch) accepts, in words: its types, its constant or choices."""
    if not isinstance(schema, dict):
        return "another value"
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(map(repr, schema["enum"]))
    kinds = schema.get("type", [])
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return " or ".join(TYPE_WORDS.get(k, str(k)) for k in kinds) or "another value"


def _describe(error: jsonschema.ValidationError) -> str:
    """One line for a schema error, whatever the schema raised: the error's own message, on one
    line, where no phrasing of ours fits (or ours fails), so bad input never becomes a crash."""
    try:
        line = _phrase(error)
    except Exception:  # noqa: BLE001 - an unforeseen error still gets its line, never a traceback
        line = f"config key `{_key_path(error)}`: {error.message}"
    return " ".join(line.splitlines())


def _phrase(error: jsonschema.ValidationError) -> str:
    key = _key_path(error)
    hint = error.schema.get("description") if isinstance(error.schema, dict) else None
    if key == "(top level)":
        hint = None  # the schema's own description: not about the key at fault
    hint = " ".join(str(hint).split()) if hint else None
    if error.validator in ("oneOf", "anyOf") and error.context:
        # Of the alternatives, the ones that fit the value's type say what is wrong with it;
        # a branch's own type, constant or choices only say the value is not that branch.
        relevant = [e for e in error.context if not (
            e.validator in ("type", "const", "enum") and len(e.relative_schema_path) == 2)]
        if relevant:
            return "; ".join(_describe(e) for e in relevant) + (f" ({hint})" if hint else "")
        if key.startswith("arms["):  # an arm: neither a concurrency nor a rate arm's mapping
            return (f"config key `{key}`: {error.instance!r} is not a whole number (a "
                    "concurrency level) or a mapping such as {rate: 0.5} (a rate arm)")
        msg = f"{error.instance!r} is not " + " or ".join(map(_wanted, error.validator_value))
    elif error.validator == "type":
        msg = f"{error.instance!r} is not {_wanted(error.schema)}"
    elif error.validator == "exclusiveMinimum":
        msg = f"{error.instance!r} must be greater than {error.validator_value!r}"
    elif error.validator == "exclusiveMaximum":
        msg = f"{error.instance!r} must be less than {error.validator_value!r}"
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(str(k) for k in error.instance if k not in allowed)
        where = "" if key == "(top level)" else f"{key}."
        return (f"config key {', '.join(f'`{where}{k}`' for k in unknown)} is not a slotbench "
                f"key; allowed {'at the top level' if not where else 'under `' + key + '`'}: "
                f"{', '.join(allowed)}")
    elif error.validator == "contains" and key == "arms":
        msg = "arms must include 1: the serial arm is the control every speedup is measured against"
    elif error.validator == "uniqueItems" and isinstance(error.instance, list):
        dups = [v for i, v in enumerate(error.instance) if v in error.instance[:i]]
        msg = f"{dups[0]!r} is listed twice; every item must be unique"
    else:
        msg = error.message
    return f"config key `{key}`: {msg}" + (f" ({hint})" if hint else "")


def _schema_problems(instance: Any, schema: dict) -> list[str]:
    """Every schema error, one line each. A value of the wrong type gets that line alone: its
    other errors (a bound or choice it misses as well) follow from it and would only repeat it."""
    errors = sorted(VALIDATOR(schema).iter_errors(instance),
                    key=lambda e: list(map(str, e.absolute_path)))
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    return [_describe(e) for e in errors
            if e.validator == "type" or tuple(e.absolute_path) not in mistyped]


# Keys a backend does not understand: a clear error beats a silently ignored setting.
BACKEND_ONLY = {
    "num_ctx": {"ollama"}, "keep_alive": {"ollama"}, "ollama_env": {"ollama"},
    "ignore_eos": {"llamacpp", "openai"}, "api_key_env": {"openai"}, "endpoint": {"openai"},
}
SERVER_ONLY = {"threads": {"llamacpp"}, "swa_full": {"llamacpp"}, "flash_attention": {"ollama"},
               "kv_cache_type": {"ollama"}, "keep_alive": {"ollama"}}
MANAGEABLE = {"llamacpp", "ollama"}


def invalid(problems: list[str]) -> str:
    """One line for one problem; a list when there are more."""
    head = "invalid configuration (nothing was sent to any server):"
    if len(problems) == 1:
        return f"{head} {problems[0]}"
    return head + "".join(f"\n  - {p}" for p in problems)


def resolve(config: dict, schema: dict | None = None) -> dict:
    """Fill defaults, validate, and apply the rules a schema cannot express.

    Raises ConfigError listing every problem found, each naming its key.
    """
    schema = schema if schema is not None else load_schema()
    empty = _nulls(dict(config))
    if empty:
        raise ConfigError(invalid([f"config key `{key}` is given without a value; give one, or "
                                    "drop the key to get its default" for key in empty]))
    config = copy.deepcopy(dict(config))
    expanded_from = None
    if "matrix" in config:  # the matrix gives the targets (see matrix.py)
        found = _matrix_problems(config["matrix"], schema)
        if found:
            raise ConfigError(invalid(found))
        try:
            config["targets"] = matrix.expand(config.pop("matrix"))
        except ValueError as exc:  # a varied key below a base value that is not a mapping
            raise ConfigError(invalid([f"config key `matrix`: {exc}"])) from None
        expanded_from = [t.get("name") for t in config["targets"]]
    cfg = fill(config, schema)
    if isinstance(cfg.get("runs"), list):
        # YAML reads an unquoted 2026-12-01 as a date; the run id is what the user typed.
        cfg["runs"] = [r.isoformat() if isinstance(r, datetime.date) else r for r in cfg["runs"]]
    arms = cfg["arms"] if isinstance(cfg.get("arms"), list) else []
    if isinstance(cfg.get("targets"), list):
        cfg["targets"] = [
            fill_target(t, arms, schema) if isinstance(t, dict) else t
            for t in cfg["targets"]
        ]
        cfg["targets"] = workloads.filled(cfg["targets"], schema)  # a target's own workload
    if cfg.get("reps") == "auto" and "stopping" not in cfg:  # its defaults, only with auto
        cfg["stopping"] = fill({}, schema["properties"]["stopping"])
    problems = _schema_problems(cfg, schema)
    if not problems:
        problems = _semantic_problems(cfg) + stopping.problems(cfg, config)
    if problems and expanded_from:
        problems.append("the targets were expanded from `matrix`: " + ", ".join(
            f"targets[{i}] = {name}" for i, name in enumerate(expanded_from)))
    if problems:
        raise ConfigError(invalid(problems))
    given = [t["name"] for t in cfg["targets"]]
    # a grid's points, each target's own workload with only its kind's keys
    cfg["targets"] = workloads.expand(cfg["targets"], cfg["workload"])
    if problems := workloads.name_problems(cfg["targets"], given):
        raise ConfigError(invalid(problems))
    cfg["workload"] = pruned_workload(cfg["workload"])  # only its kind's keys
    if cfg["archive"]["name"] is None:  # derived: the experiment's name
        cfg["archive"]["name"] = cfg["experiment"]
    cfg["arms"] = sorted((canonical(a) if isinstance(a, dict) else a for a in cfg["arms"]),
                         key=lambda a: arm_order(arm_id(a)))
    # sorted keys all the way down: Snakemake compares params by repr, so key order in a YAML
    # file (a config file's, or the sorted config.resolved.yaml that `slotbench archive` gives
    # Snakemake) must not look like a change and rerun measurement
    return canonical(cfg)


def _matrix_problems(value, schema: dict) -> list[str]:
    """The matrix's own keys, checked as the top-level key they are, before it is expanded."""
    return _schema_problems({"matrix": value}, schema) or matrix.problems(value)


def canonical(cfg: dict) -> dict:
    """The resolved config with sorted keys all the way down (lists keep their order)."""

    def walk(value):
        if isinstance(value, dict):
            return {str(k): walk(value[k]) for k in sorted(value, key=str)}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    return walk(cfg)


def _semantic_problems(cfg: dict) -> list[str]:
    """What the schema cannot say: the template's fields, the targets' names, URLs and
    backends, the arms' requests (the reps: workflow/stopping.py)."""
    problems = template_problems(cfg["prompt"]["template"])
    if cfg["experiment"] in LAYOUT:
        problems.append(
            f"config key `experiment`: {cfg['experiment']!r} names what a result's folder holds "
            "(results/<experiment>/" + cfg["experiment"] + "); choose another name"
        )
    problems += _target_problems(cfg["targets"])
    problems += workloads.problems(cfg)  # the top-level workload's and each target's own
    problems += _arm_problems(cfg["arms"], cfg["requests_per_cell"])
    if cfg["design"] == "paired" and len(cfg["targets"]) < 2:
        problems.append(
            "config key `design`: paired needs two targets or more to pair (a matrix with one "
            f"varied key, usually); this config has {len(cfg['targets'])}"
        )
    return problems


def _target_problems(targets: list[dict]) -> list[str]:
    problems = []
    names = [t["name"] for t in targets]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(
            f"config key `targets`: the name {dup!r} is used twice; names must be unique"
        )
    for i, target in enumerate(targets):
        if not target["managed"] and "url" not in target:
            problems.append(
                f"config key `targets[{i}].url`: target {target['name']!r} is not managed, "
                "so it needs the base URL of its server (e.g. http://127.0.0.1:8080)"
            )
        if target["managed"] and "url" in target:
            problems.append(
                f"config key `targets[{i}].url`: target {target['name']!r} is managed (the "
                "pipeline starts the server on a free port); drop url or set managed: false"
            )
        elif "url" in target and urls.problem(f"targets[{i}].url", target["url"]):
            problems.append(urls.problem(f"targets[{i}].url", target["url"]))
        if target["managed"] and "metrics_url" in target:
            problems.append(
                f"config key `targets[{i}].metrics_url`: target {target['name']!r} is managed, "
                "and the pipeline scrapes the /metrics of the server it starts; drop metrics_url"
            )
        scraped = [(f"targets[{i}].metrics_url", target["metrics_url"])] if (
            "metrics_url" in target) else []
        scraped += [(f"targets[{i}].exporters[{j}]", url)
                    for j, url in enumerate(target.get("exporters") or [])]
        problems += [p for key, url in scraped if (p := urls.problem(key, url))]
    for i, target in enumerate(targets):
        problems += _backend_problems(i, target)
    return problems


def _backend_problems(i: int, target: dict) -> list[str]:
    """Target ``i``'s keys that its backend lacks or does not understand."""
    problems = []
    backend = target["backend"]
    if "model" not in target and backend != "llamacpp":  # llama-server reports its own
        problems.append(
            f"config key `targets[{i}].model`: target {target['name']!r} needs the model "
            f"name the {backend} server knows (e.g. "
            + ("gemma3:270m)" if backend == "ollama" else "the id GET /v1/models lists)")
        )
    for key, allowed in BACKEND_ONLY.items():
        if key in target and backend not in allowed:
            problems.append(
                f"config key `targets[{i}].{key}`: applies only to backend "
                f"{' or '.join(sorted(allowed))}, not {backend}"
                + ("; Ollama does not honour ignore_eos" if key == "ignore_eos" else "")
            )
    for key, allowed in SERVER_ONLY.items():
        if key in target.get("server", {}) and backend not in allowed:
            problems.append(
                f"config key `targets[{i}].server.{key}`: applies only to a managed "
                f"{' or '.join(sorted(allowed))} server, not {backend}"
            )
    if target["managed"] and backend not in MANAGEABLE:
        problems.append(
            f"config key `targets[{i}].managed`: the pipeline can manage llamacpp and ollama "
            f"servers, not {backend}; set managed: false and give the url"
        )
    if "server" in target and not target["managed"]:
        problems.append(
            f"config key `targets[{i}].server`: server settings apply only to a managed "
            "server; an external server keeps its own (state Ollama's in ollama_env)"
        )
    return problems


def _arm_problems(arms: list, per_cell) -> list[str]:
    """Rate arms' rates and requests, and requests_per_cell against the arms."""
    problems = []
    closed = [a for a in arms if isinstance(a, int)]
    rates = [a for a in arms if isinstance(a, dict)]
    biggest = max(closed)
    ids = [arm_id(a) for a in rates]
    for i, rate in enumerate(rates):
        if ids.count(arm_id(rate)) > 1 and ids.index(arm_id(rate)) == i:
            problems.append(f"config key `arms`: two rate arms offer {rate['rate']:g} requests/s "
                            "(to a thousandth); give each rate arm its own rate")
        if isinstance(per_cell, dict) and rate.get("requests") is None:
            problems.append(f"config key `arms`: the rate arm {rate['rate']:g}/s needs its own "
                            "`requests` when requests_per_cell is a mapping")
    if isinstance(per_cell, dict):
        listed = {int(k) if str(k).isdigit() else k for k in per_cell}
        if listed != set(closed):
            problems.append(
                f"config key `requests_per_cell`: a mapping must give every concurrency arm its "
                f"number and no other; arms {closed}, mapping has {sorted(map(str, listed))}"
            )
        problems += [
            f"config key `requests_per_cell.{arm}`: {n} requests cannot keep {arm} in flight; "
            f"give at least {arm}"
            for arm, n in sorted(per_cell.items(), key=lambda kv: str(kv[0]))
            if str(arm).isdigit() and n < int(arm)
        ]
    elif per_cell < biggest:
        problems.append(
            f"config key `requests_per_cell`: {per_cell} is fewer than the largest arm "
            f"({biggest}); every arm sends the same number of requests, so it needs at least "
            f"{biggest}"
        )
    return problems


def listed(value) -> list[str]:
    """A comma-separated --config value (e.g. compare_declare=a,b) as its items."""
    return [f for f in str(value or "").split(",") if f.strip()]


def run_ids(cfg: dict) -> list[str]:
    """Run ids: run1, run2, ... from a count, or the listed ids in their order.

    A list lets runs accumulate: adding an id measures only that run, and nothing a run-level
    job sees depends on the other runs."""
    if isinstance(cfg["runs"], list):
        return [str(r) for r in cfg["runs"]]
    return [f"run{i}" for i in range(1, cfg["runs"] + 1)]


def rep_ids(cfg: dict) -> list[int]:  # with reps: auto, the looks decide how many it measures
    return stopping.possible_reps(cfg)


# A target's keys that say where its telemetry is scraped and what it costs: evidence about the
# measurement, not part of it, so adding an exporter or a price measures nothing again.
TELEMETRY_KEYS = ("metrics_url", "exporters", "usd_per_hour")


def target_by_name(cfg: dict, name: str) -> dict:
    """The target as measured: its config without TELEMETRY_KEYS (see telemetry_settings) and
    without its own workload (workload_params gives the workload it measures)."""
    for target in cfg["targets"]:
        if target["name"] == name:
            return {k: v for k, v in target.items() if k not in (*TELEMETRY_KEYS, "workload")}
    raise ConfigError(f"no target named {name!r} in config")


def telemetry_settings(cfg: dict, name: str) -> dict:
    """Where a rep of target ``name`` scrapes telemetry and how often: its ``metrics_url`` (None:
    the server's root /metrics is tried), its ``exporters`` and ``telemetry.interval_s``.
    Read by the rep from the workflow's config, never a rule's params, so a change to it
    re-measures nothing; each raw file records what was scraped."""
    target = next((t for t in cfg["targets"] if t["name"] == name), None)
    if target is None:
        raise ConfigError(f"no target named {name!r} in config")
    return {"interval_s": float(cfg["telemetry"]["interval_s"]),
            "metrics_url": target.get("metrics_url"),
            "exporters": list(target.get("exporters") or [])}


def prices(cfg: dict) -> dict:
    """Each target's ``usd_per_hour`` (None where not given): the analysis's cost per token."""
    return {t["name"]: t.get("usd_per_hour") for t in cfg["targets"]}


def experiment(cfg: dict, target: str) -> dict:
    """Everything that defines what a rep of ``target`` measures: the target and its server,
    the measurement settings, and what the plan derives prompts and order from. Every raw file
    records it; consolidation refuses to pool reps measured under different ones."""
    return {"target": target_by_name(cfg, target), "measurement": measurement_settings(cfg),
            "seed": cfg["seed"], "prompt": canonical(cfg["prompt"]),
            "control_arm": cfg["control_arm"], **workload_params(cfg, target)}


def workload_params(cfg: dict, target: str) -> dict:
    """{"workload": the workload target ``target`` measures (its own, else the config's)}, or {}
    for the article's: an article experiment's plans, raw files and rule params stay as they
    were before workloads existed."""
    workload = workloads.of_target(cfg, target)
    return {} if is_article(workload) else {"workload": canonical(workload)}


def check_settings(cfg: dict) -> dict:
    """What the checks read: their thresholds, the interval level and resamples, the seed."""
    return {"checks": cfg["checks"], "analysis": cfg["analysis"], "seed": cfg["seed"]}


def client_settings(cfg: dict) -> dict:
    """How the rep's requests are sent: client processes (``auto`` resolved against the widest
    arm and the CPUs the client may use) and their CPUs. Not part of the experiment: reps sent
    by different client processes still pool, and each raw file records its own."""
    client = cfg["client"]
    processes = client["processes"]
    if processes == "auto":
        cpus = client.get("cpus") or (sorted(os.sched_getaffinity(0))
                                  if hasattr(os, "sched_getaffinity") else [0])
        widest = max([a for a in cfg["arms"] if isinstance(a, int)]
                     + [a.get("max_in_flight") or 0 for a in cfg["arms"] if isinstance(a, dict)])
        processes = auto_processes(widest, len(cpus), client["streams_per_process"])
    return {"processes": int(processes), "cpus": client.get("cpus")}


def measurement_settings(cfg: dict) -> dict:
    """The values that change what a rep measures; a change to any of them reruns the reps."""
    keys = ["arms", "requests_per_cell", "num_predict", "temperature", "warmup_predict",
            "request_timeout_s", "cooldown_s"]
    return {k: cfg[k] for k in keys} | {"thermal_interval_s": cfg["thermal"]["interval_s"]}
