"""The plan of a run: rotated arm order per rep, and the prompts with their nonces.

Everything derives from the seed, so the same config gives the same plan. Prompt *token*
length is held equal (rule 2) by keeping only nonces whose prompt tokenizes to the modal length.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from typing import Callable

PLAN_SCHEMA = "slotbench.plan/1"


def derive_seed(*parts: object) -> int:
    """A stable 32-bit seed from any parts (Python's hash() is salted per process)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:8], 16)


def rotation(arms: list[int], reps: int, seed: int) -> list[list[int]]:
    """Cyclic Latin square: a seeded base order, shifted by one place per rep.

    Every block of len(arms) consecutive reps puts each arm in each position exactly once.
    """
    rng = random.Random(seed)
    base = list(arms)
    rng.shuffle(base)
    offset = rng.randrange(len(base))
    k = len(base)
    return [[base[(r + offset + i) % k] for i in range(k)] for r in range(reps)]


def nonces(count: int, digits: int, rng: random.Random) -> list[str]:
    """Distinct zero-padded decimal nonces."""
    seen: set[str] = set()
    out = []
    while len(out) < count:
        n = f"{rng.randrange(10**digits):0{digits}d}"
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def equal_length_prompts(
    template: str,
    count: int,
    digits: int,
    rng: random.Random,
    count_tokens: Callable[[str], int] | None,
) -> tuple[list[tuple[str, str]], int | None]:
    """Pick ``count`` (nonce, prompt) pairs whose prompts all have the same token length.

    Candidates are drawn in seeded order; the modal length of the first batch is the target.
    Without a tokenizer the lengths cannot be checked and None is returned as the length.
    """
    if count_tokens is None:
        ns = nonces(count, digits, rng)
        return [(n, template.format(nonce=n)) for n in ns], None
    pool = nonces(count * 3, digits, rng)
    lengths = {n: count_tokens(template.format(nonce=n)) for n in pool}
    target_len = Counter(lengths.values()).most_common(1)[0][0]
    chosen = [n for n in pool if lengths[n] == target_len]
    seen = set(pool)
    attempts = 0
    while len(chosen) < count:
        attempts += 1
        if attempts > count * 20:
            raise RuntimeError(
                f"could not find {count} nonces whose prompts are all {target_len} tokens long; "
                "use a template where the nonce tokenizes uniformly (digits usually do)"
            )
        for n in nonces(1, digits, rng):
            if n in seen:
                continue
            seen.add(n)
            if count_tokens(template.format(nonce=n)) == target_len:
                chosen.append(n)
    chosen = chosen[:count]
    return [(n, template.format(nonce=n)) for n in chosen], target_len


def make_plan(
    target: str,
    run: str,
    arms: list[int],
    reps: int,
    requests_per_cell: int,
    seed: int,
    template: str,
    nonce_digits: int,
    count_tokens: Callable[[str], int] | None = None,
    warmup_requests: int | None = None,
    nonces: bool = True,
    control_arm: bool = False,
) -> dict:
    """The whole plan of one run, as a JSON-ready dict.

    Every request in the run (warm-up included) carries its own nonce, so no two requests share
    a prefix beyond the words before the nonce, and no arm can reuse another arm's cache.

    ``nonces=False`` gives every measured request the same prompt and lets the server cache it:
    what a naive benchmark does, kept only so the cache-hit check can be shown to fire.
    ``control_arm=True`` appends to every rep a control cell at the largest concurrency whose
    requests share one prompt and may use the cache (MLPerf TEST04's idea): it measures how much
    a shared prefix would have inflated the parallel arms. It is never part of the headline.
    """
    run_seed = derive_seed(seed, target, run)
    rng = random.Random(run_seed)
    orders = rotation(arms, reps, run_seed)
    n_warm = warmup_requests if warmup_requests is not None else max(arms)
    n_measured = reps * len(arms) * requests_per_cell
    n_control = reps if control_arm else 0
    pairs, prompt_tokens = equal_length_prompts(
        template, n_measured + n_warm + n_control, nonce_digits, rng, count_tokens
    )
    sampling = [rng.randrange(2**31) for _ in pairs]
    items = [
        {"nonce": n, "prompt": p, "seed": s} for (n, p), s in zip(pairs, sampling, strict=True)
    ]
    warmup = items[:n_warm]
    measured = iter(items[n_warm : n_warm + n_measured])
    control = iter(items[n_warm + n_measured :])
    shared = items[n_warm]  # the one prompt every request uses when nonces are off
    plan_reps = []
    for r, order in enumerate(orders, start=1):
        cells = []
        for position, arm in enumerate(order):
            requests = []
            for i in range(requests_per_cell):
                item = next(measured)
                if not nonces:
                    item = {**item, "nonce": shared["nonce"], "prompt": shared["prompt"],
                            "allow_cache": True}  # fmt: skip
                requests.append({"request": i, **item})
            cells.append({"arm": arm, "position": position, "requests": requests})
        if control_arm:
            one = next(control)
            cells.append({
                "arm": max(arms), "position": len(order), "control": True,
                "requests": [{"request": i, **one, "seed": sampling[i], "allow_cache": True}
                             for i in range(requests_per_cell)],
            })  # fmt: skip
        plan_reps.append({"rep": r, "order": order, "cells": cells})
    return {
        "schema": PLAN_SCHEMA,
        "target": target,
        "run": run,
        "seed": seed,
        "run_seed": run_seed,
        "arms": list(arms),
        "requests_per_cell": requests_per_cell,
        "prompt_tokens": prompt_tokens,
        "tokenizer": "server" if count_tokens is not None else None,
        "nonces": nonces,
        "control_arm": control_arm,
        "warmup": [{"request": i, **w} for i, w in enumerate(warmup)],
        "reps": plan_reps,
    }


def rep_plan(plan: dict, rep: int) -> dict:
    for entry in plan["reps"]:
        if entry["rep"] == rep:
            return entry
    raise KeyError(
        f"target {plan['target']}, run {plan['run']}: the plan has no rep {rep} "
        f"(it has {len(plan['reps'])}); rerun the plan rule"
    )
