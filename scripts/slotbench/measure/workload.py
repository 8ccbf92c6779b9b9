"""The workload: what each request of a rep asks for (docs/workloads.md).

``kind: article`` is the article's experiment: one summarisation template, every prompt of a run
the same length in tokens, outputs capped by ``num_predict`` (slotbench.measure.plan builds it,
and nothing here touches it). The other kinds give every request a *shape*, its input and output
length in tokens:

- ``synthetic`` draws each length from the config's distribution (fixed, uniform, normal or
  lognormal, the last two redrawn until inside their min..max);
- ``trace`` samples (input, output) pairs from a request trace (slotbench.measure.traces),
  scaled by ``length_scale``.

A rep draws its shapes once, from (seed, target, run, rep) alone, and every arm of the rep sends
the same shapes in the same order, each request with a nonce of its own: every arm does the same
work and none can profit from a cache another warmed (docs/method.md#nonces, generalised).

A prompt is built to its planned length with the server's tokenizer where it has one: a head that
holds the nonce, then words that the server's tokenizer reads as one token each (found once per
run, at plan time), counted again whole and adjusted until the count is exact. Without a
tokenizer the words are counted as one token each: the prompt-length check then reports how far
each request's server-reported length is from its plan.
"""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path
from typing import Callable

from slotbench.core.fmt import count
from slotbench.measure.traces import (
    length_quantiles,
    read_trace,
    replay_window,
    sample_lengths,
    scale_length,
)

# the kinds this version measures; the schema names the others
MEASURED = ("article", "synthetic", "shared_prefix", "multi_turn", "trace")
# which keys belong to which kind (kind, format, mode and the scales are always allowed)
KIND_KEYS = {
    "synthetic": {"input_tokens", "output_tokens", "grid"},
    "shared_prefix": {"input_tokens", "output_tokens", "prefix_tokens", "prefix_groups",
                      "prefix_scope"},
    "multi_turn": {"input_tokens", "output_tokens", "turns", "think_time_s"},
    "trace": {"path", "format", "mode", "length_scale", "time_scale"},
}
DIST_KEYS = {"fixed": {"value"}, "uniform": {"min", "max"},
             "normal": {"mean", "sd", "min", "max"}, "lognormal": {"mean", "sd", "min", "max"}}
# keys the schema fills for every kind: never "given" by the user
FILLED = {"kind", "format", "mode", "length_scale", "time_scale", "prefix_groups",
          "prefix_scope", "think_time_s"}
# common English words, each usually one token after a space; the run's plan keeps those the
# server's tokenizer agrees are
WORDS = tuple("""
the of and to in is was for on that with as by at from his it an were are which this be or
had not but first one their its new after who they have her she two been other when there all
during into school time may years more most only over city some world would where later up
such used many can state about national out known university united then made well through
part between three south river under second year while both american since team people war
game north music some group early home being film high series own de day also last world them
long work city name best great life small good four place new early public late found land
five power road book back old much even line time end life light water house way story side
""".split())
# the quantiles the report sets the lengths sent beside the trace's
QUANTILES = (0.1, 0.5, 0.9, 0.99)
# how many distinct rejections a rep may make of a drawn length before it gives up
REDRAWS = 1000


class WorkloadError(ValueError):
    """A workload that cannot be planned as asked, said in one line."""


def is_article(workload: dict | None) -> bool:
    """Whether a (resolved) workload is the article's: an empty one is, as before workloads."""
    return not workload or workload["kind"] == "article"


def pruned(workload: dict) -> dict:
    """The workload with only its kind's keys (the schema fills a trace's defaults for all)."""
    kind = workload["kind"]
    return {k: v for k, v in workload.items() if k == "kind" or k in KIND_KEYS.get(kind, ())}


def problems(workload: dict, key: str = "workload", arms: list | None = None) -> list[str]:
    """What the schema cannot say about a workload: the kinds this version measures, the keys
    that belong to its kind, each length's form, a trace file that exists, and rate arms that
    replay a trace (``arms``: the config's) only with a trace replayed. One line each."""
    kind = workload["kind"]
    replays = [a for a in arms or [] if isinstance(a, dict) and a.get("arrival") == "trace"]
    replay = kind == "trace" and workload["mode"] == "replay"
    if replays and not replay:
        return [f"config key `arms`: a rate arm with arrival trace replays a trace's arrivals, "
                f"so it needs workload.kind trace with mode replay, not {kind}"
                + (f" with mode {workload['mode']}" if kind == "trace" else "")]
    if replay and not replays:
        return [f"config key `{key}.mode`: replay plays the trace's arrivals in a rate arm; add "
                "one with arrival trace, e.g. arms: [1, 2, 4, {rate: 1, arrival: trace}]"]
    if kind == "article":
        stray = sorted(set(workload) - FILLED)
        return ([f"config key `{key}.{stray[0]}`: belongs to another kind of workload, not "
                 f"article; set {key}.kind or drop it"] if stray else [])
    if kind not in MEASURED:
        return [f"config key `{key}.kind`: {kind} is not measured by this version of slotbench; "
                f"choose one of {', '.join(MEASURED)}"]
    found = grid_problems(workload, key)
    own = KIND_KEYS[kind] | FILLED
    for other in sorted(set(workload) - own):
        found.append(f"config key `{key}.{other}`: does not apply to a {kind} workload")
    if kind == "multi_turn":
        if "turns" not in workload:
            found.append(f"config key `{key}.turns`: a multi_turn workload needs its turns per "
                         "session, e.g. 4")
        if any(isinstance(a, dict) for a in arms or []):
            found.append("config key `arms`: a multi_turn workload's arms count sessions in "
                         "flight; rate arms are not measured with it by this version")
    if kind in ("synthetic", "shared_prefix", "multi_turn"):
        for name in ("input_tokens", "output_tokens"):
            if name not in workload and "grid" not in workload:
                found.append(f"config key `{key}.{name}`: a {kind} workload needs it, e.g. "
                             "{dist: fixed, value: 256}")
            elif name in workload:
                found += _length_problems(workload[name], f"{key}.{name}")
    if kind == "shared_prefix" and "prefix_tokens" not in workload:
        found.append(f"config key `{key}.prefix_tokens`: a shared_prefix workload needs the "
                     "shared system prompt's length, e.g. 512")
    if kind == "trace":
        if "path" not in workload:
            found.append(f"config key `{key}.path`: a trace workload needs the trace file")

    return found


def _length_problems(spec: dict, key: str) -> list[str]:
    if "dist" not in spec:
        return [f"config key `{key}.dist`: give the lengths' distribution: "
                f"{', '.join(DIST_KEYS)}"]
    dist = spec["dist"]
    need = DIST_KEYS[dist]
    found = [f"config key `{key}.{k}`: a {dist} length does not take it (it takes "
             f"{', '.join(sorted(need))})" for k in sorted(set(spec) - need - {"dist"})]
    found += [f"config key `{key}.{k}`: a {dist} length needs it" for k in sorted(need - set(spec))]
    if found:
        return found
    if "min" in spec and spec["min"] > spec["max"]:
        found.append(f"config key `{key}`: min {spec['min']} is above max {spec['max']}")
    elif "mean" in spec and not spec["min"] <= spec["mean"] <= spec["max"]:
        found.append(f"config key `{key}.mean`: {spec['mean']:g} is outside min..max "
                     f"({spec['min']}..{spec['max']}), so almost every draw would be redrawn")
    return found


def grid_problems(workload: dict, key: str = "workload") -> list[str]:
    """A synthetic grid's lists (the schema holds each value to a length): both are needed, and
    the grid gives every length, so input_tokens and output_tokens beside it are refused."""
    if workload.get("grid") is None or workload["kind"] != "synthetic":
        return []  # a grid of another kind is refused as a key that does not apply to it
    found = [f"config key `{key}.grid.{name}`: a grid needs the {what} lengths to combine, e.g. "
             f"{example}" for name, what, example in (("input_tokens", "input", "[128, 1024]"),
                                                      ("output_tokens", "output", "[16, 256]"))
             if name not in workload["grid"]]
    found += [f"config key `{key}.{name}`: the grid gives every {name.split('_')[0]} length; "
              f"drop {key}.{name} or the grid" for name in ("input_tokens", "output_tokens")
              if name in workload]
    return found


def draw(spec: dict, rng: random.Random) -> int:
    """One length from a length spec (see the schema's ``$defs.length``)."""
    dist = spec["dist"]
    if dist == "fixed":
        return int(spec["value"])
    if dist == "uniform":
        return rng.randint(spec["min"], spec["max"])
    lo, hi = spec["min"], spec["max"]
    if dist == "normal":
        sample = lambda: rng.gauss(spec["mean"], spec["sd"])  # noqa: E731
    else:  # lognormal with the given mean and sd of the lengths themselves
        sigma2 = math.log1p((spec["sd"] / spec["mean"]) ** 2)
        mu = math.log(spec["mean"]) - sigma2 / 2
        sample = lambda: rng.lognormvariate(mu, math.sqrt(sigma2))  # noqa: E731
    for _ in range(REDRAWS):
        value = round(sample())
        if lo <= value <= hi:
            return value
    raise WorkloadError(f"a {dist} length of mean {spec['mean']:g} and sd {spec['sd']:g} fell "
                        f"outside {lo}..{hi} {REDRAWS} times in a row; widen min..max")


def shapes(workload: dict, rng: random.Random, n: int, trace=None,
           min_input: int = 1) -> list[dict]:
    """``n`` request shapes ({input_tokens, output_tokens}) drawn from the workload with ``rng``
    (a trace workload's pairs from ``trace``, a slotbench.measure.traces.Trace). A trace's
    input shorter than ``min_input`` (what a prompt's nonce takes, and a word) is raised to it,
    and the shape keeps the trace's own length as ``trace_input_tokens``."""
    if workload["kind"] == "trace":
        pairs = sample_lengths(trace, n, rng, workload["length_scale"])
        return [{"input_tokens": max(i, min_input), "output_tokens": o,
                 **({"trace_input_tokens": i} if i < min_input else {})} for i, o in pairs]
    return [{"input_tokens": draw(workload["input_tokens"], rng),
             "output_tokens": draw(workload["output_tokens"], rng)} for _ in range(n)]


def rep_shapes(workload: dict, seed: int, n: int, trace=None, min_input: int = 1) -> list[dict]:
    """A rep's ``n`` request shapes from its ``seed``: drawn (shapes), or, for a trace replayed
    (mode replay), a window of ``n`` consecutive rows from a start the seed draws, each shape
    with its arrival (``offset_s``: the trace's gaps × time_scale from the window's first row)."""
    rng = random.Random(seed)
    if workload["kind"] != "trace" or workload["mode"] != "replay":
        return shapes(workload, rng, n, trace, min_input)
    window = replay_window(trace, n, rng, workload["time_scale"], workload["length_scale"])
    return [{"input_tokens": max(w["input_tokens"], min_input),
             "output_tokens": w["output_tokens"], "offset_s": w["offset_s"],
             "trace_row": w["row"],
             **({"trace_input_tokens": w["input_tokens"]}
                if w["input_tokens"] < min_input else {})} for w in window]


def min_input(count_tokens: Callable[[str], int] | None, nonce_digits: int) -> int:
    """The shortest prompt a workload can send: its nonce's head and one word."""
    start = head("0" * nonce_digits)
    return (count_tokens(start) if count_tokens else estimate(start)) + 1


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def trace_changed(plan: dict) -> str | None:
    """Why a rep may not draw from its run's trace (the file changed since the run's plan was
    made, so the run's reps would not sample one trace), or None."""
    recorded = plan.get("trace")
    if recorded is None:
        return None
    now = file_sha256(recorded["path"]) if Path(recorded["path"]).is_file() else None
    if now == recorded["sha256"]:
        return None
    return (f"the trace {recorded['path']} " + ("is gone" if now is None else "changed")
            + " since the run's plan was made from it (SHA-256 " + recorded["sha256"][:12]
            + "…); restore it, or delete the run's plan and raw files to measure the new trace")


def trace_summary(workload: dict, trace) -> dict:
    """What a run's plan records of a trace workload's trace: which file (its SHA-256: a rep
    refuses a trace changed since), its format, rows and dropped rows, and the quantiles of
    its lengths at the workload's length_scale, for the report to set the lengths sent beside."""
    scale = workload["length_scale"]

    def quantiles(values):
        return {str(q): v for q, v in length_quantiles(values, QUANTILES).items()}

    return {"path": str(workload["path"]), "sha256": file_sha256(workload["path"]),
            "format": trace.format, "rows": len(trace.rows), "dropped": dict(trace.dropped),
            "length_scale": scale,
            "input_tokens": quantiles([scale_length(r.input_tokens, scale) for r in trace.rows]),
            "output_tokens": quantiles([scale_length(r.output_tokens, scale)
                                        for r in trace.rows])}


def load_trace(workload: dict):
    """A trace workload's Trace (slotbench.measure.traces), None for any other kind. The file is
    read where a run is planned and measured, never where a result is re-rendered (an archive
    re-renders without it), so a missing one is said here, in one line, not at validation."""
    if workload.get("kind") != "trace":
        return None
    if not Path(workload["path"]).is_file():
        raise WorkloadError(f"config key `workload.path`: no file {workload['path']!r} (from "
                            f"{Path.cwd()})")
    return read_trace(workload["path"], workload["format"])


def largest(workload: dict, trace=None) -> tuple[int, int, str]:
    """The most tokens (input + output) a request of the workload can hold, its input and its
    output, and what holds it: for a context check before any request is sent."""
    if workload["kind"] == "trace":
        scale = workload["length_scale"]
        row = max(trace.rows, key=lambda r: scale_length(r.input_tokens, scale)
                  + scale_length(r.output_tokens, scale))
        return (scale_length(row.input_tokens, scale), scale_length(row.output_tokens, scale),
                f"the trace's largest request (row {trace.rows.index(row) + 1}, scaled by "
                f"{scale:g})")

    def top(spec):
        return spec["value"] if spec["dist"] == "fixed" else spec["max"]

    shared = workload["prefix_tokens"] if workload["kind"] == "shared_prefix" else 0
    return (top(workload["input_tokens"]) + shared, top(workload["output_tokens"]),
            "the largest request the workload's lengths allow")


def context_problem(workload: dict, context: tuple[int, str] | None, trace=None) -> str | None:
    """Why the workload's largest request cannot fit one slot of the server, or None; refused
    before anything is sent, never clipped by the server."""
    if context is None:
        return None
    tokens, source = context
    prompt, output, what = largest(workload, trace)
    if prompt + output <= tokens:
        return None
    return (f"{what} needs {prompt} prompt tokens plus {output} output tokens, more than one "
            f"slot of the server holds: {tokens} tokens ({source}); lower the lengths (or "
            "length_scale), or give the server more context per slot; nothing was sent")


def head(nonce: str, mark: str = "Request") -> str:
    """The start of every prompt of a workload (and of a shared prefix: ``mark`` "System"): its
    nonce, so no two requests (no two cells' prefixes) share a start."""
    return f"{mark} {nonce}:"


def vocabulary(count_tokens: Callable[[str], int] | None) -> list[str] | None:
    """The words the server's tokenizer reads as one token after a space and the head, or None
    without a tokenizer (every word is then counted as one token)."""
    if count_tokens is None:
        return None
    base_text = head("0" * 6)
    base = count_tokens(base_text)
    kept = [w for w in dict.fromkeys(WORDS) if count_tokens(f"{base_text} {w}") - base == 1]
    if len(kept) < 10:
        raise WorkloadError(f"the server's tokenizer reads only {len(kept)} of "
                            f"{len(set(WORDS))} common words as one token each; cannot build "
                            "prompts of an exact length")
    return kept


def estimate(text: str) -> int:
    """Tokens in ``text`` without a tokenizer: a BOS, one per word, one per digit of a number."""
    return 1 + sum(len(w.rstrip(":")) + w.endswith(":") if w.rstrip(":").isdigit() else 1
                   for w in text.split())


def build_prompt(nonce: str, tokens: int, words: list[str] | None, rng: random.Random,
                 count_tokens: Callable[[str], int] | None, lead: str = "",
                 mark: str = "Request") -> tuple[str, int | None]:
    """A prompt of ``tokens`` tokens: ``lead`` (a shared prefix, if any), the nonce's head
    (``mark`` and the nonce), then words: (text, the tokenizer's count of it, or None where
    there is no tokenizer and the length is an estimate)."""
    start = (f"{lead} " if lead else "") + head(nonce, mark)
    pool = words or list(dict.fromkeys(WORDS))
    base = count_tokens(start) if count_tokens else estimate(start)
    if tokens < base + 1:
        raise WorkloadError(f"a prompt of {tokens} tokens cannot hold its nonce and one word "
                            f"({base + 1} tokens at least); raise the input lengths")
    body = [rng.choice(pool) for _ in range(tokens - base)]
    text = start + "".join(" " + w for w in body)
    if count_tokens is None:
        return text, None
    for _ in range(12):
        counted = count_tokens(text)
        if counted == tokens:
            return text, counted
        short = tokens - counted
        body = body + [rng.choice(pool) for _ in range(short)] if short > 0 else body[:short]
        if not body:
            break
        text = start + "".join(" " + w for w in body)
    raise WorkloadError(f"could not build a prompt of exactly {tokens} tokens with the server's "
                        f"tokenizer (nonce {nonce})")


def describe(workload: dict) -> str:
    """The workload in one phrase, for logs and the report (an absent one: the article's)."""
    if is_article(workload):
        return "article"
    kind = workload["kind"]
    if kind == "synthetic" and workload.get("grid"):
        grid = workload["grid"]
        return (f"synthetic grid: input {', '.join(map(str, grid['input_tokens']))} × output "
                f"{', '.join(map(str, grid['output_tokens']))} tokens, one target per pair")
    if kind == "synthetic":
        return (f"synthetic: input {length_phrase(workload['input_tokens'])}, output "
                f"{length_phrase(workload['output_tokens'])} tokens")
    if kind == "shared_prefix":
        return (f"shared prefix: {workload['prefix_tokens']} tokens shared by the requests of "
                f"{count(workload['prefix_groups'], 'group')} in each "
                + ("cell" if workload["prefix_scope"] == "cell" else "rep (reused across arms)")
                + f", then input {length_phrase(workload['input_tokens'])}, output "
                f"{length_phrase(workload['output_tokens'])} tokens")
    if kind == "multi_turn":
        think = workload["think_time_s"]
        return (f"multi-turn: sessions of {workload['turns']} turns"
                + (f", {think:g} s of thinking between them" if think else "")
                + f", each turn a new message of {length_phrase(workload['input_tokens'])} "
                f"tokens after the history, and a reply of "
                f"{length_phrase(workload['output_tokens'])} tokens")
    if kind == "trace":
        scale = workload["length_scale"]
        if workload["mode"] == "replay":
            return (f"trace {Path(workload['path']).name} replayed: a window of its rows a rep, "
                    f"lengths × {scale:g}, arrivals at its gaps × {workload['time_scale']:g}")
        return (f"trace {Path(workload['path']).name}, its (input, output) lengths sampled"
                + (f" × {scale:g}" if scale != 1 else ""))
    return kind


def length_phrase(spec: dict) -> str:
    dist = spec["dist"]
    if dist == "fixed":
        return str(spec["value"])
    if dist == "uniform":
        return f"uniform {spec['min']}–{spec['max']}"
    return f"{dist} mean {spec['mean']:g} sd {spec['sd']:g} in {spec['min']}–{spec['max']}"
