"""``reps: auto``: the config's side of sequential stopping, and the reps the workflow grows to.

A sequential experiment measures whole rotation blocks, as many reps as arms, in every run at
once, and looks after each block (rules/stopping.smk, the ``look`` checkpoint): each look decides
from the cells measured so far whether to measure another block (slotbench.checks.stopping
says how). Every stop then leaves each arm at every position equally often in every run.

Plain data in and out, no Snakemake: rules/stopping.smk asks :func:`decided_reps` which reps the
experiment has, giving it a reader of the looks that raises Snakemake's own exception for a look
not yet made.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Callable

from slotbench.measure.plan import max_reps  # the nonce holds the rep number

# what a look decides to go on; every other decision (precise, futile, max_reps, max_minutes)
# stops the experiment
CONTINUE = "continue"


def is_auto(cfg: dict) -> bool:
    return cfg.get("reps") == "auto"


def block(cfg: dict) -> int:
    """Reps in one rotation block: one per arm, so every arm holds every position once."""
    return len(cfg["arms"])


def whole_blocks(reps: int, size: int, up: bool) -> int:
    """``reps`` rounded to whole blocks of ``size``: up, or down."""
    return (math.ceil if up else math.floor)(reps / size) * size


def settings(cfg: dict) -> dict | None:
    """What the looks read (None for a fixed ``reps``): the stopping block with min_reps rounded
    up and max_reps down to whole blocks, the block, the precision target and the interval's
    level."""
    if not is_auto(cfg):
        return None
    size, stop = block(cfg), cfg["stopping"]
    return {
        "block": size,
        "min_reps": whole_blocks(stop["min_reps"], size, up=True),
        "max_reps": whole_blocks(stop["max_reps"], size, up=False),
        "max_minutes": float(stop["max_minutes"]),
        "precision": float(cfg["checks"]["precision"]),
        "ci": float(cfg["analysis"]["ci"]),
    }


def problems(cfg: dict, given: dict) -> list[str]:
    """What the schema cannot say of ``reps`` and ``stopping`` (``given``: the config as
    written, before defaults): the reps a nonce can number, and the stopping block's keys."""
    found, most = [], max_reps(cfg["prompt"]["nonce_digits"])
    if not is_auto(cfg):
        if cfg["reps"] > most:
            found.append(f"config key `reps`: {cfg['reps']} reps do not fit a "
                         f"{cfg['prompt']['nonce_digits']}-digit nonce, whose leading digits "
                         f"hold the rep number (at most {most}); raise prompt.nonce_digits")
        if "stopping" in given:
            found.append("config key `stopping`: it applies only with reps: auto, and reps is "
                         f"{cfg['reps']}; drop `stopping` or set reps: auto")
        return found
    stop, size = cfg["stopping"], block(cfg)
    if stop["max_reps"] < size:
        found.append(f"config key `stopping.max_reps`: {stop['max_reps']} is less than one "
                     f"rotation block ({size} reps, one per arm); give at least {size}")
    elif stop["min_reps"] > stop["max_reps"]:
        found.append(f"config key `stopping.min_reps`: {stop['min_reps']} is more than "
                     f"stopping.max_reps ({stop['max_reps']}); lower it or raise max_reps")
    elif whole_blocks(stop["min_reps"], size, up=True) > whole_blocks(stop["max_reps"], size,
                                                                      up=False):
        found.append(f"config key `stopping.min_reps`: {stop['min_reps']} rounds up to "
                     f"{whole_blocks(stop['min_reps'], size, up=True)} reps (whole blocks of "
                     f"{size}), more than the {whole_blocks(stop['max_reps'], size, up=False)} "
                     f"that max_reps {stop['max_reps']} rounds down to; raise max_reps")
    if stop["max_reps"] > most:
        found.append(f"config key `stopping.max_reps`: {stop['max_reps']} reps do not fit the "
                     f"nonce, whose leading digits hold the rep number (at most {most}); raise "
                     "prompt.nonce_digits")
    if cfg["design"] == "paired":
        found.append("config key `reps`: auto is not available with design: paired (its stop "
                     "would have to decide every pair's difference); give a number of reps")
    return found


def possible_reps(cfg: dict) -> list[int]:
    """Every rep the experiment may measure: 1..reps, or with reps: auto up to max_reps (in
    whole blocks). The reps it does measure are :func:`decided_reps`."""
    if not is_auto(cfg):
        return list(range(1, cfg["reps"] + 1))
    return list(range(1, settings(cfg)["max_reps"] + 1))


def decided_reps(size: int, decision_of: Callable[[int], str], limit: int,
                 measured: int = 0) -> list[int]:
    """The reps a sequential experiment measures: from the last look whose reps are all
    measured (``measured``; a measured rep is always used, never dropped), look after look
    (``decision_of(k)``, which raises while look k is not made yet) until one decides to stop;
    never past ``limit``."""
    look = max(1, measured)
    while look * size < limit and decision_of(look) == CONTINUE:
        look += 1
    return list(range(1, min(look * size, limit) + 1))


def measured_looks(size: int, measured: Callable[[int], bool], limit: int) -> int:
    """How many whole looks are measured: blocks all of whose reps ``measured(rep)`` says are
    (in every target and run)."""
    looks = 0
    while (looks + 1) * size <= limit and all(
            measured(rep) for rep in range(looks * size + 1, (looks + 1) * size + 1)):
        looks += 1
    return looks


def looks_key(stopping: dict, checks: dict, code_files: list[str]) -> str:
    """A short digest of what decides a look: the settings and the code. The looks live in a
    folder of that name, so a change decides again from the reps measured (a checkpoint's
    output that merely reran would leave Snakemake's grown DAG as it was)."""
    digest = hashlib.sha256(json.dumps([stopping, checks], sort_keys=True).encode())
    for path in sorted(code_files):
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:12]


def decision_in(path: str) -> str:
    """The decision a look's file records."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)["decision"]


def look_reps(look: int, size: int) -> list[int]:
    """The reps look ``look`` reads: every rep of its block and of the blocks before it."""
    return list(range(1, look * size + 1))


def plan_line(cfg: dict) -> str:
    """What a sequential experiment will do, said before it starts (and by ``snakemake -n``)."""
    s = settings(cfg)
    return (f"reps: auto: whole blocks of {s['block']} reps in each run, a look after each; the "
            f"first block is planned, the rest is decided as the run goes (precise at "
            f"±{s['precision'] * 100:.3g}%, at least {s['min_reps']} and at most {s['max_reps']} reps a "
            f"run, at most {s['max_minutes']:g} min)")
