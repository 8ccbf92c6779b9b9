"""The plan: a run's prompt calibration, and each rep's arm order, nonces and prompts.

A rep's plan derives from (seed, target, run, rep) alone, never from how many reps or runs the
config asks for, so raising ``reps`` measures only the new reps and leaves the others as they are.
The run plan (results/<experiment>/plan/<target>/<run>.json) holds only what every rep shares: the
prompt's length in tokens (the modal length of a fixed calibration sample, counted by the server's
tokenizer) and, with nonces off, the one shared prompt. The rep job derives its own plan at the
start of the rep (the server's tokenizer is at hand then) and records it in its raw file.

docs/method.md#nonces: every request carries its own nonce near the start of the prompt, and prompt
length in tokens is held equal by keeping only nonces whose prompt has the run's length. A nonce
is the rep number (zero-padded, the first half of its digits) followed by random digits drawn
without replacement, so no two requests of a run ever share one.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from typing import Callable

from slotbench.core.cells import arm_id, is_rate_arm
from slotbench.measure.workload import (
    build_prompt,
    is_article,
    min_input,
    rep_shapes,
    trace_summary,
    vocabulary,
)
from slotbench.measure.workload import context_problem as workload_context_problem

PLAN_SCHEMA = "slotbench.plan/2"
CALIBRATION_PROMPTS = 30
# candidates tried per prompt a rep needs, before giving up on finding equal lengths
ATTEMPTS_PER_PROMPT = 20


def derive_seed(*parts: object) -> int:
    """A stable 32-bit seed from any parts (Python's hash() is salted per process)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:8], 16)


def rotation_order(arms: list[int], rep: int, run_seed: int) -> list[int]:
    """Rep ``rep``'s arm order: a seeded base order shifted cyclically by one place per rep.

    It depends on the run's seed and the rep alone, so every block of len(arms) consecutive
    reps is a Latin square (each arm in each position once) however many reps there are.
    """
    rng = random.Random(run_seed)
    base = list(arms)
    rng.shuffle(base)
    offset = rng.randrange(len(base))
    k = len(base)
    return [base[(rep - 1 + offset + i) % k] for i in range(k)]


def rotation(arms: list[int], reps: int, seed: int) -> list[list[int]]:
    """The orders of reps 1..reps (a prefix of the same sequence for any ``reps``)."""
    return [rotation_order(arms, rep, seed) for rep in range(1, reps + 1)]


def pair_order(targets: list[str], seed: int, run: str, pair: int) -> list[str]:
    """The paired design's order of pair ``pair``'s sides (one rep of every target): a seeded
    order of the targets, reversed in every other pair, so that A B, B A, A B … (ABBA) puts
    every target at the same mean position over two pairs and linear drift cancels in the
    comparison. From (seed, run, pair) alone, like a rep's arm order."""
    rng = random.Random(derive_seed(seed, run, "pairs"))
    base = list(targets)
    rng.shuffle(base)
    return base if pair % 2 == 1 else base[::-1]


def rep_digits(nonce_digits: int) -> int:
    """Leading digits of a nonce that hold the rep number."""
    return (nonce_digits + 1) // 2


def max_reps(nonce_digits: int) -> int:
    return 10 ** rep_digits(nonce_digits) - 1


def nonce_stream(rep: int, digits: int, rng: random.Random):
    """Distinct nonces of one rep: its number, then random digits without replacement."""
    head, tail = rep_digits(digits), digits - rep_digits(digits)
    if not 0 <= rep <= max_reps(digits):
        raise ValueError(f"rep {rep} does not fit the {head} rep digits of a {digits}-digit nonce; "
                         "raise prompt.nonce_digits")
    seen: set[int] = set()
    while len(seen) < 10**tail:
        n = rng.randrange(10**tail)
        if n not in seen:
            seen.add(n)
            yield f"{rep:0{head}d}{n:0{tail}d}"


def run_plan(
    target: str,
    run: str,
    arms: list[int],
    requests_per_cell: int,
    seed: int,
    template: str,
    nonce_digits: int,
    count_tokens: Callable[[str], int] | None = None,
    *,
    nonces: bool,
    control_arm: bool,
    paired: bool = False,
    workload: dict | None = None,
    trace=None,
) -> dict:
    """What every rep of a run shares. Nothing here depends on how many reps there are.
    ``nonces`` and ``control_arm`` are the config's prompt.nonces and control_arm.

    ``paired`` (design: paired): the arm order and the open loop's arrivals of rep k come from
    (seed, run, k) without the target, so the sides of a pair run their arms in one order and
    drift within a rep touches them alike; nonces and prompts stay the target's own.

    ``workload`` (a kind other than article: slotbench.measure.workload) replaces the template's
    calibration with the words the server's tokenizer reads as one token each, from which every
    rep builds prompts of its requests' planned lengths; an article plan is as it always was."""
    run_seed = derive_seed(seed, target, run)
    prompt_tokens = None
    if not is_article(workload):
        shortest = min_input(count_tokens, nonce_digits)
        count_tokens, vocab = None, vocabulary(count_tokens)
    if count_tokens is not None:
        rng = random.Random(derive_seed(run_seed, "calibration"))
        stream = nonce_stream(0, nonce_digits, rng)
        sample = [template.format(nonce=next(stream)) for _ in range(CALIBRATION_PROMPTS)]
        prompt_tokens = Counter(map(count_tokens, sample)).most_common(1)[0][0]
    shared = None
    if not nonces:
        rng = random.Random(derive_seed(run_seed, "shared"))
        nonce = next(nonce_stream(0, nonce_digits, rng))
        shared = {"nonce": nonce, "prompt": template.format(nonce=nonce)}
    return {
        "schema": PLAN_SCHEMA, "target": target, "run": run, "seed": seed, "run_seed": run_seed,
        "arms": list(arms), "requests_per_cell": requests_per_cell, "template": template,
        "nonce_digits": nonce_digits, "prompt_tokens": prompt_tokens,
        "tokenizer": "server" if count_tokens is not None else None, "nonces": nonces,
        "shared": shared, "control_arm": control_arm,
        # only in the paired design, so that a run's plan stays as it was without it
        **({"order_seed": derive_seed(seed, run, "pair-arms")} if paired else {}),
        # only for a workload other than the article's, so that an article plan stays as it was
        **({} if is_article(workload) else
           {"workload": workload, "vocabulary": vocab, "min_input_tokens": shortest,
            "tokenizer": "server" if vocab is not None else None,
            **({"trace": trace_summary(workload, trace)} if trace is not None else {})}),
    }


def _prompts(
    plan: dict, rep: int, count: int, rng: random.Random, count_tokens: Callable[[str], int] | None
) -> list[tuple[str, str]]:
    """``count`` (nonce, prompt) pairs of one rep, all of the run's token length."""
    stream = nonce_stream(rep, plan["nonce_digits"], rng)
    template, want = plan["template"], plan["prompt_tokens"]
    chosen = []
    for _ in range(count * ATTEMPTS_PER_PROMPT):
        nonce = next(stream, None)
        if nonce is None:
            break
        prompt = template.format(nonce=nonce)
        if want is None or count_tokens is None or count_tokens(prompt) == want:
            chosen.append((nonce, prompt))
            if len(chosen) == count:
                return chosen
    raise RuntimeError(
        f"target {plan['target']}, run {plan['run']}, rep {rep}: could not find {count} nonces "
        f"whose prompts are all {want} tokens long; use a template where the nonce tokenizes "
        "uniformly (digits usually do)"
    )


def cell_requests(per_cell: int | dict, arm) -> int:
    """How many requests a cell of ``arm`` sends: one number for every arm, or the arm's own
    (a mapping read from YAML has int keys, from a plan file str keys); a rate arm (a mapping
    with its rate) its own ``requests``, else the one number."""
    if isinstance(arm, dict):
        return int(arm.get("requests") or per_cell)
    if isinstance(per_cell, dict):
        return int(per_cell[arm] if arm in per_cell else per_cell[str(arm)])
    return int(per_cell)


def auto_processes(widest_arm: int, cpus: int, streams_per_process: int) -> int:
    """client.processes "auto": one process per ``streams_per_process`` streams of the widest
    arm (client.streams_per_process), never more than the client's CPUs."""
    return max(1, min(math.ceil(widest_arm / streams_per_process), cpus))


def arrival_offsets(n: int, rate: float, seed: int, arrival: str,
                    burstiness: float) -> list[float]:
    """When each of an open-loop cell's ``n`` requests arrives, in seconds from its start, at
    ``rate`` requests/s: the first at 0, then gaps that are exponential (``poisson``), all
    1/rate (``constant``) or gamma-distributed with shape ``burstiness`` and the same mean
    (``gamma``: below 1 burstier than Poisson, above 1 more regular; 1 is Poisson). From
    ``seed`` alone, as every part of a rep's plan."""
    if rate <= 0:
        raise ValueError(f"an arrival rate must be positive, not {rate}")
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(n):
        offsets.append(t)
        if arrival == "constant":
            t += 1.0 / rate
        elif arrival == "gamma":
            t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        elif arrival == "poisson":
            t += rng.expovariate(rate)
        else:
            raise ValueError(f"unknown arrival process {arrival!r}")
    return offsets


def split_streams(streams: int, request_ids: list[int], processes: int) -> list[dict]:
    """How a cell's streams and requests are shared out over client processes: as evenly as
    possible, never more processes than streams, request k to process k mod P (so each process
    gets requests in proportion to its streams, within one)."""
    used = max(1, min(processes, streams, len(request_ids) or 1))
    return [{"process": j, "streams": streams // used + (1 if j < streams % used else 0),
             "requests": request_ids[j::used]} for j in range(used)]


def context_problem(plan: dict, num_predict: int, context: tuple[int, str] | None,
                    trace=None) -> str | None:
    """Why a request of this plan cannot fit one slot of its server, or None: its prompt's
    tokens plus ``num_predict`` beyond the slot's context would be cut short by the server (or
    refused mid-rep), so the rep refuses before anything is sent. ``context`` is (tokens, where
    that number comes from), None where the server does not say (nothing can be checked)."""
    if plan.get("workload"):  # each request's own lengths (a trace workload's from ``trace``)
        return workload_context_problem(plan["workload"], context, trace)
    if context is None:
        return None
    tokens, source = context
    prompt = plan.get("prompt_tokens") or 0
    if prompt + num_predict <= tokens:
        return None
    counted = f"the prompt ({prompt} tokens) plus " if prompt else ""
    return (f"{counted}num_predict ({num_predict}) cannot fit one slot of the server: "
            f"{tokens} tokens ({source}); lower num_predict, or give the server more context "
            "per slot; nothing was sent")


def make_rep_plan(
    plan: dict,
    rep: int,
    count_tokens: Callable[[str], int] | None = None,
    *,
    client_processes: int,
    pin: bool = False,
    trace=None,
) -> dict:
    """Rep ``rep``'s order, warm-up and cells, from (seed, target, run, rep) alone, its cells
    shared out over ``client_processes`` (config.client_settings' processes).

    ``nonces=False`` gives every measured request the run's shared prompt and lets the server
    cache it: what a naive benchmark does, kept only so the cache-hit check can be shown to
    fire. ``control_arm`` appends a control cell at the largest concurrency whose requests share
    one prompt and may use the cache (MLPerf TEST04's idea); it is never part of the headline.

    A plan with a workload (slotbench.measure.workload) draws the rep's request shapes once
    (with ``trace``, a trace workload's Trace) and gives every cell the same shapes in the same
    order, each request a fresh nonce and a prompt of its planned length; ``pin`` says the
    backend pins each output to its planned length (else the length is a ceiling).
    """
    specs, per_cell = {arm_id(a): a for a in plan["arms"]}, plan["requests_per_cell"]
    # the arms' order and arrivals: the run's own, or the pair's (a plan older than pairs has
    # no order_seed, and its reps were ordered by the run's seed)
    order_seed = plan.get("order_seed", plan["run_seed"])
    order = rotation_order(list(specs), rep, order_seed)
    rng = random.Random(derive_seed(plan["run_seed"], "rep", rep))
    widest = max(a for a in specs if not is_rate_arm(a))
    n_warm = widest
    # a conversation's cell: every turn of its requests_per_cell sessions, from one process
    workload = plan.get("workload")
    turns = workload["turns"] if workload and workload["kind"] == "multi_turn" else 1
    client_processes = 1 if turns > 1 else client_processes
    n_measured = sum(cell_requests(per_cell, spec) for spec in specs.values()) * turns
    drawn = None
    if plan.get("workload"):
        counts = [cell_requests(per_cell, specs[a]) * turns for a in order]
        # the rep's shapes: the run's own, or the pair's (the sides of a pair send alike)
        drawn = rep_shapes(plan["workload"], derive_seed(order_seed, "shapes", rep),
                           max(counts), trace, plan["min_input_tokens"])
        items = _workload_items(plan, rng, count_tokens, pin, drawn, counts, rep, n_warm)
    else:
        pairs = _prompts(plan, rep, n_warm + n_measured + (1 if plan["control_arm"] else 0),
                         rng, count_tokens)
        items = [{"nonce": n, "prompt": p, "seed": rng.randrange(2**31)} for n, p in pairs]
    warmup, measured = items[:n_warm], iter(items[n_warm : n_warm + n_measured])
    cells = []
    for position, arm in enumerate(order):
        requests = []
        for i in range(cell_requests(per_cell, specs[arm]) * turns):
            item = next(measured)
            if not plan["nonces"]:
                item = item | plan["shared"] | {"allow_cache": True}
            requests.append({"request": i, **item})
        cell = {"arm": arm, "position": position, "requests": requests}
        if is_rate_arm(arm):  # open loop: when each request arrives, from the seed alone
            cell |= _open_loop(specs[arm], len(requests),
                               derive_seed(order_seed, "arrivals", rep, arm), drawn)
        cell["shares"] = _shares(len(requests) if is_rate_arm(arm) else arm, requests,
                                 client_processes)
        cells.append(cell)
    if plan["control_arm"]:
        one = items[-1]
        cells.append({
            "arm": widest, "position": len(order), "control": True,
            "requests": [{"request": i, **one, "seed": items[n_warm + i]["seed"],
                          "allow_cache": True} for i in range(cell_requests(per_cell, widest))],
        })
        cells[-1]["shares"] = _shares(widest, cells[-1]["requests"], client_processes)
    warm = [{"request": i, **w} for i, w in enumerate(warmup)]
    return {
        "rep": rep,
        "order": order,
        "prompt_tokens": plan["prompt_tokens"],
        "warmup": warm,
        "warmup_shares": _shares(len(warm), warm, client_processes),
        "cells": cells,
    }


def _open_loop(spec: dict, n: int, seed: int, drawn: list[dict] | None) -> dict:
    """A rate arm's cell: its open-loop settings and when each of its ``n`` requests arrives,
    from ``seed``; with arrival trace (a trace replayed), the rep's window's own arrivals, and
    the rate that window offers, against which the open loop's numbers are judged."""
    opened = {k: spec.get(k) for k in ("rate", "arrival", "burstiness", "max_in_flight")}
    if spec["arrival"] != "trace":
        return {"open": opened, "arrivals": arrival_offsets(n, spec["rate"], seed,
                                                            spec["arrival"], spec["burstiness"])}
    arrivals = [d["offset_s"] for d in drawn[:n]]
    span = arrivals[-1] if arrivals else 0.0
    return {"open": opened | {"rate": (n - 1) / span if span > 0 else spec["rate"]},
            "arrivals": arrivals}


def _workload_items(plan: dict, rng: random.Random, count_tokens, pin: bool, drawn: list[dict],
                    per_cell: list[int], rep: int, n_warm: int) -> list[dict]:
    """A workload rep's warm-up items, then each cell's in the rep's order: the rep's shapes,
    ``drawn`` once, the same in every cell; a fresh nonce and prompt for every request."""
    workload = plan["workload"]
    stream = nonce_stream(rep, plan["nonce_digits"], rng)
    vocab = plan.get("vocabulary")

    count = count_tokens if vocab is not None else None

    def item(shape: dict, measured: bool, prefix: dict | None = None, index: int = 0) -> dict:
        nonce = next(stream)
        tokens = shape["input_tokens"] + (prefix["tokens"] if prefix else 0)
        prompt, _ = build_prompt(nonce, tokens, vocab, rng, count,
                                 lead=prefix["text"] if prefix else "")
        out = {"nonce": nonce, "prompt": prompt, "seed": rng.randrange(2**31)}
        if measured:
            out |= {"input_tokens": tokens, "output_tokens": shape["output_tokens"],
                    "pinned": pin,
                    **{k: shape[k] for k in ("trace_input_tokens", "trace_row") if k in shape}}
        if measured and workload["kind"] == "multi_turn":  # request i: session, turn
            out |= {"session": index // workload["turns"], "turn": index % workload["turns"],
                    "think_time_s": workload["think_time_s"],
                    # a later turn's history is the cache's to serve, as in a real chat
                    **({"allow_cache": True} if index % workload["turns"] else {})}
        if prefix:  # a shared prefix: the server's prefix cache is meant to serve it
            out |= {"allow_cache": True, "prefix_group": prefix["group"],
                    "prefix_tokens": prefix["tokens"],
                    "planned_cached_tokens": prefix["cached"] + plan["min_input_tokens"] - 1}
        return out

    def prefixes() -> list[dict]:  # one per group: "System <nonce>:" and words, exactly
        return [{"group": g, "tokens": workload["prefix_tokens"],
                 "text": build_prompt(next(stream), workload["prefix_tokens"], vocab, rng, count,
                                      mark="System")[0]}
                for g in range(workload["prefix_groups"])]

    items = [item(drawn[i % len(drawn)], False) for i in range(n_warm)]
    shared = workload["kind"] == "shared_prefix"
    rep_prefixes = prefixes() if shared and workload["prefix_scope"] == "rep" else None
    for n in per_cell:
        groups = (rep_prefixes or prefixes()) if shared else None
        # the first request of a group pays its prefill in every cell alike; later ones of it
        # may find the prefix in the cache
        items += [item(drawn[i], True, groups and groups[i % len(groups)]
                       | {"cached": 0 if i < len(groups) else groups[0]["tokens"]})
                  if shared else item(drawn[i], True, index=i) for i in range(n)]
    return items


def _shares(streams: int, requests: list[dict], processes: int) -> list[dict]:
    return split_streams(streams, [r["request"] for r in requests], processes)
