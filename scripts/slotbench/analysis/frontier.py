"""The frontier of a grid of workloads (docs/workloads.md#the-frontier): what each workload buys
the operator against what it leaves each user, and which stage carries its speedup.

From results/<experiment>/analysis/summary.csv (every arm's medians with their bootstrap
intervals over the reps) and each target's workload:

- every concurrency arm of every workload is a point, per-user tok/s against aggregate tok/s,
  with both intervals and its TTFT. A point is *dominated* when another point, of any workload,
  has both a higher per-user and a higher aggregate rate (medians); the others are the frontier;
- at each workload's widest arm, the speedup, gen_gain (batching) and pipelining (overlap) are
  each judged on their interval: *gains* when it lies wholly above 1, *loses* wholly below, else
  *unclear*. Where the speedup gains, the stage that *carries* it is the one that gains (both,
  or neither), and where both gain, the one with the larger median is the main one; where it
  does not, there is no speedup to carry;
- a workload with fixed lengths is *prefill-heavy* when its prompt is longer than its output,
  *decode-heavy* when shorter. Whether the data show that every prefill-heavy workload gains
  mainly by overlap and every decode-heavy one mainly by batching is said as measured: yes, no
  (naming the workloads that do not), or not assessable (the grid lacks one of the two mixes).

The report presents it (slotbench.report.frontier) and figures/frontier.py draws it.
"""

from __future__ import annotations

import math

import pandas as pd

from slotbench.core.cells import SERIAL_ARM
from slotbench.measure.workload import describe

GAINS, LOSES, UNCLEAR = "gains", "loses", "unclear"
NO_SPEEDUP = "no speedup"  # what carries a speedup that is not above 1 over its interval
FACTORS = ("gen_gain", "pipelining")  # batching, overlap
PREFILL_HEAVY, DECODE_HEAVY, BALANCED = "prefill-heavy", "decode-heavy", "balanced"
# what each point keeps of its arm's summary row: the medians and their intervals
POINT = ("user_tps", "agg_tps", "ttft_s")
SPLIT = ("speedup", "gen_gain", "pipelining")


def _num(value) -> float | None:
    """A number for the JSON (None where the summary has none)."""
    return None if value is None or pd.isna(value) else float(value)


def _with_ci(row: dict, names) -> dict:
    return {f"{n}{s}": _num(row.get(f"{n}{s}")) for n in names for s in ("", "_lo", "_hi")}


def _listed(value) -> list[str]:
    return [] if value is None or pd.isna(value) else [v for v in str(value).split(";") if v]


def fixed_lengths(workload: dict) -> tuple[int | None, int | None]:
    """A workload's input and output length where each is fixed, else None."""
    def value(spec):
        return int(spec["value"]) if isinstance(spec, dict) and spec.get("dist") == "fixed" \
            else None

    return value(workload.get("input_tokens")), value(workload.get("output_tokens"))


def mix(input_tokens: int | None, output_tokens: int | None) -> str | None:
    if input_tokens is None or output_tokens is None:
        return None
    return (PREFILL_HEAVY if input_tokens > output_tokens else
            DECODE_HEAVY if output_tokens > input_tokens else BALANCED)


def judged(value, lo, hi) -> str:
    """A factor on its interval: gains (wholly above 1), loses (wholly below), else unclear."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (value, lo, hi)):
        return UNCLEAR
    return GAINS if lo > 1 else LOSES if hi < 1 else UNCLEAR


def split(row: dict) -> dict:
    """One arm's speedup and its two factors with their intervals, each judged, and which
    factor carries the speedup (gen_gain, pipelining, both, neither; NO_SPEEDUP where the
    speedup does not gain) and which mainly (None where none does)."""
    out = {"arm": int(row["arm"]), **_with_ci(row, SPLIT)}
    verdicts = {f: judged(out[f], out[f"{f}_lo"], out[f"{f}_hi"]) for f in SPLIT}
    gaining = [f for f in FACTORS if verdicts[f] == GAINS]
    out["verdicts"] = verdicts
    if verdicts["speedup"] != GAINS:
        out["carries"], out["main"] = NO_SPEEDUP, None
        return out
    out["carries"] = gaining[0] if len(gaining) == 1 else ("both" if gaining else "neither")
    out["main"] = max(gaining, key=lambda f: out[f]) if gaining else None
    return out


def _points(target: str, rows: pd.DataFrame) -> list[dict]:
    return [{"target": target, "arm": int(r["arm"]), **_with_ci(r, POINT),
             "cells": _listed(r.get("cells")), "raw_sha256": _listed(r.get("raw_sha256"))}
            for r in rows.sort_values("arm").to_dict("records")]


def mark_dominated(points: list[dict]) -> None:
    """Each point's ``dominated_by`` (the first point, of any workload, with both a higher
    per-user and a higher aggregate rate, as {target, arm}; None) and ``frontier`` (not
    dominated, and both rates known)."""
    known = [p for p in points if p["user_tps"] is not None and p["agg_tps"] is not None]
    for p in points:
        drawn = any(p is k for k in known)
        better = next((q for q in known if q["user_tps"] > p["user_tps"]
                       and q["agg_tps"] > p["agg_tps"]), None) if drawn else None
        p["dominated_by"] = {"target": better["target"], "arm": better["arm"]} if better else None
        p["frontier"] = drawn and better is None


def claim(workloads: list[dict]) -> dict:
    """Whether the data show that every prefill-heavy workload gains mainly by overlap
    (pipelining) and every decode-heavy one mainly by batching (gen_gain): holds True, False
    (``against`` names the workloads that do not), or None (not assessable: the grid lacks a
    prefill-heavy or a decode-heavy workload, ``why``)."""
    expected = {PREFILL_HEAVY: "pipelining", DECODE_HEAVY: "gen_gain"}
    groups = {m: [w for w in workloads if w["mix"] == m] for m in expected}
    out = {"prefill_heavy": [w["target"] for w in groups[PREFILL_HEAVY]],
           "decode_heavy": [w["target"] for w in groups[DECODE_HEAVY]],
           "against": [], "holds": None, "why": None}
    missing = [m for m, ws in groups.items() if not ws]
    if missing:
        out["why"] = f"no {' and no '.join(missing)} workload in the grid"
        return out
    out["against"] = [w["target"] for m, ws in groups.items() for w in ws
                      if (w["split"] or {}).get("main") != expected[m]]
    out["holds"] = not out["against"]
    return out


def _order(item: tuple[str, dict]) -> tuple:
    name, workload = item
    i, o = fixed_lengths(workload)
    return (math.inf if i is None else i, math.inf if o is None else o, name)


def assess(summary: pd.DataFrame, workloads: dict[str, dict], ci: float) -> dict:
    """{"ci", "workloads": [per workload: target, workload in words, its fixed lengths, mix,
    points (every concurrency arm), widest (the split at its widest parallel arm)], "frontier"
    (the non-dominated points, {target, arm}), "claim"}; the workloads by input length, then
    output length, then name."""
    rows = summary[summary["arm"].astype(int) > 0]
    out = []
    for target, workload in sorted(workloads.items(), key=_order):
        mine = rows[rows["target"].astype(str) == target]
        i, o = fixed_lengths(workload)
        parallel = mine[mine["arm"].astype(int) > SERIAL_ARM]
        widest = (parallel.loc[parallel["arm"].astype(int).idxmax()].to_dict()
                  if len(parallel) else None)
        out.append({"target": target, "workload": describe(workload), "input_tokens": i,
                    "output_tokens": o, "mix": mix(i, o), "points": _points(target, mine),
                    "split": split(widest) if widest is not None else None})
    points = [p for w in out for p in w["points"]]
    mark_dominated(points)
    return {"ci": float(ci), "workloads": out,
            "frontier": [{"target": p["target"], "arm": p["arm"]} for p in points
                         if p["frontier"]],
            "claim": claim(out)}
