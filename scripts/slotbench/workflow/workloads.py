"""Each target's workload (docs/workloads.md): its own (``targets[].workload``) or the top-level
``workload``, and a grid of workloads expanded into targets.

    workload:
      kind: synthetic
      grid: {input_tokens: [128, 1024], output_tokens: [16, 256]}

makes every target that takes the top-level workload one target per (input, output) pair, the
inputs' order first and the outputs' within it: emb-in128-out16, emb-in128-out256,
emb-in1024-out16, emb-in1024-out256. Each carries its own workload, the top-level one with those
fixed lengths and no grid, and is a whole sub-experiment (rotation, serial arm, headline, traps)
as any target is. A target with its own workload is never expanded, so a resolved config, whose
targets carry their grid points, resolves to itself.
"""

from __future__ import annotations

import copy

from slotbench.core.defaults import fill
from slotbench.measure.workload import is_article, problems as workload_problems, pruned

NAME_LIMIT = 64  # the schema's targets[].name maxLength


def own(target: dict) -> dict | None:
    """The target's own workload, or None where it takes the top-level one."""
    workload = target.get("workload") if isinstance(target, dict) else None
    return workload if isinstance(workload, dict) else None


def of_target(cfg: dict, name: str) -> dict:
    """The workload target ``name`` measures: its own, else the config's (an empty one is the
    article's, as in a config from before workloads)."""
    target = next((t for t in cfg.get("targets") or [] if t.get("name") == name), None)
    return own(target) or cfg.get("workload") or {}


def by_target(cfg: dict) -> dict[str, dict]:
    """The workload of each target (by name) that measures one other than the article's."""
    found = {t["name"]: own(t) or cfg.get("workload") or {} for t in cfg["targets"]}
    return {name: w for name, w in found.items() if not is_article(w)}


def has_grid(cfg: dict) -> bool:
    """Whether the config's top-level workload is a grid (its targets are the grid's points)."""
    return bool((cfg.get("workload") or {}).get("grid"))


def filled(targets: list, schema: dict) -> list:
    """Each target's own workload with the schema's defaults (kind, format, mode, scales), as the
    top-level workload gets them."""
    node = schema["properties"]["workload"]
    return [t | {"workload": fill(t["workload"], node)} if own(t) is not None else t
            for t in targets]


def problems(cfg: dict) -> list[str]:
    """The top-level workload's problems and each target's own, one line each (their keys named
    ``workload`` and ``targets[i].workload``), a grid in a target's workload, and the article's
    own keys (control_arm, prompt.nonces: false) with any target measuring another workload."""
    found = workload_problems(cfg["workload"], arms=cfg["arms"])
    for i, target in enumerate(cfg["targets"]):
        workload = own(target)
        if workload is None:
            continue
        key = f"targets[{i}].workload"
        if workload.get("grid") is not None:
            found.append(f"config key `{key}.grid`: a grid is the top-level workload's, which it "
                         "expands into one target per pair of lengths; move it to workload.grid")
            continue
        found += workload_problems(workload, key, arms=cfg["arms"])
    other = [w for w in (own(t) or cfg["workload"] for t in cfg["targets"]) if not is_article(w)]
    if other:
        if cfg["control_arm"]:
            found.append("config key `control_arm`: applies to the article workload only in "
                         f"this version, not {other[0]['kind']}")
        if not cfg["prompt"]["nonces"]:
            found.append("config key `prompt.nonces`: a workload other than the article's "
                         "always gives every request its own nonce; drop nonces: false")
    return found


def grid_name(name: str, input_tokens: int, output_tokens: int) -> str:
    return f"{name}-in{input_tokens}-out{output_tokens}"


def point(workload: dict, input_tokens: int, output_tokens: int) -> dict:
    """The grid's workload at one pair of lengths: fixed lengths, no grid."""
    out = {k: copy.deepcopy(v) for k, v in workload.items() if k != "grid"}
    return out | {"input_tokens": {"dist": "fixed", "value": int(input_tokens)},
                  "output_tokens": {"dist": "fixed", "value": int(output_tokens)}}


def expand(targets: list[dict], workload: dict) -> list[dict]:
    """The targets with every one that takes a grid workload expanded into the grid's points (a
    target with its own workload, or any without a grid, as it is), each target's own workload
    with only its kind's keys."""
    grid = workload.get("grid")
    out = []
    for target in targets:
        if own(target) is not None or not grid:
            out.append(target | ({"workload": pruned(target["workload"])} if own(target) else {}))
            continue
        for i in grid["input_tokens"]:
            for o in grid["output_tokens"]:
                out.append(copy.deepcopy(target) | {"name": grid_name(target["name"], i, o),
                                                    "workload": pruned(point(workload, i, o))})
    return out


def name_problems(targets: list[dict], given: list[str]) -> list[str]:
    """One line when the grid's targets' names collide or grow too long (``given``: the names
    before the grid expanded them)."""
    names = [t["name"] for t in targets]
    twice = sorted({n for n in names if names.count(n) > 1})
    long = [n for n in names if len(n) > NAME_LIMIT]
    if not twice and not long:
        return []
    why = (f"the name{'s' if len(twice) > 1 else ''} {', '.join(map(repr, twice))} would be "
           "used twice" if twice else
           f"{long[0]!r} is longer than {NAME_LIMIT} characters")
    return [f"config key `workload.grid`: it names every target <target>-in<I>-out<O>, and from "
            f"the targets {', '.join(given)} {why}; rename the targets"]
