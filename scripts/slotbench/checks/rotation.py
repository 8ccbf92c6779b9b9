"""Trap: arm order, not concurrency, moving throughput (docs/method.md#rotation).

Arm order rotates by rep (a cyclic Latin square), so each arm is measured at every position.
The check analyses the design the way a Latin square is analysed: log aggregate tok/s = rep +
arm + position, the reps' effects (drift, a busy machine) absorbed within each rep. The
position effect is how much the best position beats the worst, with a bootstrap interval over
reps and a p-value from shuffling positions within reps (the spread noise alone gives). Four
verdicts:

- position bias: the effect is above the threshold and distinguishable from noise: refused;
- no position bias: the whole interval lies below the threshold;
- inconclusive: neither; the headline is provisional and the sentence says how many reps would
  resolve it;
- not assessable: in some run an arm never occupied some position, so order cannot be
  separated from the arm; the headline is provisional.

Each arm's median at each position it occupied (positions.csv) stays as the descriptive table.
"""

from __future__ import annotations

import math

import pandas as pd

from slotbench.analysis.analyse import position_medians
from slotbench.checks.base import (Tables, Verdict, constant, judged, not_assessable, records,
                                   setting)
from slotbench.core import stats
from slotbench.core.cells import arm_name
from slotbench.core.fmt import fmt_pct

TRAP = "rotation_bias"
TITLE = "Rotation bias"
ORDER = 20
TABLES = ("positions",)
CONFIG_KEY = "checks.rotation_threshold"
# The position effect is "distinguishable from noise" below this permutation p-value.
ALPHA = 0.05
# Reps to resolve an inconclusive verdict are not quoted beyond this.
MAX_REPS_QUOTED = 10_000


def arm_spreads(positions: pd.DataFrame, cells: pd.DataFrame) -> dict[str, dict]:
    """Per arm: (max - min of its per-position medians) / its median, and positions seen."""
    medians = cells.groupby("arm")["agg_tps"].agg(stats.median)
    out = {}
    for arm, apos in positions.groupby("arm", sort=True):
        spread = (apos["median_agg_tps"].max() - apos["median_agg_tps"].min()) / medians[arm]
        out[str(int(arm))] = {
            "spread": float(spread),
            "positions_seen": sorted(int(p) for p in apos["position"]),
        }
    return out


def incomplete_rotation(cells: pd.DataFrame) -> list[str]:
    """Per run, each arm and the positions it never occupied (a complete rotation has none)."""
    gaps = []
    for run, grp in cells.groupby("run", sort=True):
        arms = sorted(grp["arm"].astype(int).unique())
        every = set(range(len(arms)))
        for arm in arms:
            seen = set(grp.loc[grp["arm"] == arm, "position"].astype(int))
            missing = sorted(every - seen)
            if missing:
                where = ", ".join(map(str, missing))
                gaps.append(f"{arm_name(arm)} never at position{'s' if len(missing) > 1 else ''} "
                            f"{where} in {run}")
    return gaps


def reps_to_resolve(n_reps: int, effect: float, lo: float, hi: float, threshold: float) -> int:
    """Reps for the interval to leave the threshold, if it narrows as 1/sqrt(reps)
    (:func:`slotbench.core.stats.reps_needed`, its half-width against the distance to the
    threshold)."""
    distance = abs(effect - threshold)
    if not distance:
        return MAX_REPS_QUOTED
    return int(min(MAX_REPS_QUOTED, stats.reps_needed(n_reps, (hi - lo) / 2, distance, 1)))


def judge(target: str, cells: pd.DataFrame, threshold: float, settings: dict) -> Verdict:
    rows = position_medians(cells)
    evidence = {"arms": arm_spreads(rows, cells), "rows": records(rows)}
    common = {"threshold": threshold, "config_key": CONFIG_KEY, "evidence": evidence,
              "cells": sorted({c for cs in rows["cells"] for c in cs.split(";")})}
    gaps = incomplete_rotation(cells)
    if gaps:
        text = "; ".join(gaps)
        return not_assessable(
            TRAP, TITLE, target, f"rotation incomplete: {text}",
            f"Rotation bias is not assessable: {text}, so arm order cannot be told apart from "
            f"the arm; run at least {cells['arm'].nunique()} reps per run (a full rotation).",
            effect="provisional", **common | {"evidence": evidence | {"gaps": gaps}},
        )
    analysis = settings["analysis"]
    n_boot = int(analysis["bootstrap"])
    fit = stats.position_effect(
        cells["agg_tps"], cells["run"].astype(str) + "/" + cells["rep"].astype(str),
        cells["arm"], cells["position"], n_boot=n_boot, n_perm=n_boot,
        ci=float(analysis["ci"]), seed=int(settings["seed"]),
    )
    effect, lo, hi, p = fit["effect"], fit["lo"], fit["hi"], fit["p_value"]
    coefs = fit["coefficients"]
    evidence |= {k: fit[k] for k in ("effect", "lo", "hi", "p_value", "null_median", "null_p95")}
    evidence |= {"position_effects": {str(k): v for k, v in coefs.items()}, "reps": fit["blocks"]}
    if not math.isfinite(effect):
        return not_assessable(
            TRAP, TITLE, target, "the design cannot separate position from arm and rep",
            "Rotation bias is not assessable: the cells cannot separate position from arm and "
            "rep.", effect="provisional", **common)
    best, worst = max(coefs, key=coefs.get), min(coefs, key=coefs.get)
    moved = (f"Position moved aggregate tok/s by {fmt_pct(effect, 1)} [{fmt_pct(lo, 1)}, "
             f"{fmt_pct(hi, 1)}] (position {best} fastest, position {worst} slowest, reps and "
             "arms accounted for)")
    summary = (f"position effect {fmt_pct(effect, 1)} [{fmt_pct(lo, 1)}, {fmt_pct(hi, 1)}], "
               f"p = {p:.2f}, against a {fmt_pct(threshold)} threshold")
    if effect > threshold and p < ALPHA:
        evidence["reason"] = (
            f"position bias: position moved aggregate tok/s by {fmt_pct(effect, 1)} "
            f"[{fmt_pct(lo, 1)}, {fmt_pct(hi, 1)}], above the {fmt_pct(threshold)} threshold and "
            f"more than noise alone gives (p = {p:.3f} < {constant(ALPHA=ALPHA)}): arm "
            "order, not concurrency, may be driving the result; cool the machine between reps "
            "(cooldown_s) or find what else ran"
        )
        return judged(TRAP, TITLE, target, True, summary + "; headline refused",
                      f"{moved}: above the {fmt_pct(threshold)} threshold and more than noise "
                      f"alone gives (p = {p:.3f} < {constant(ALPHA=ALPHA)}). The report "
                      "refuses a headline.",
                      effect="refuse", verdict="position bias", **common)
    if hi < threshold:
        return judged(TRAP, TITLE, target, False, summary,
                      f"{moved}: the whole interval is below the {fmt_pct(threshold)} threshold.",
                      verdict="no position bias", **common)
    needed = reps_to_resolve(fit["blocks"], effect, lo, hi, threshold)
    evidence["reps_to_resolve"] = needed
    noise = (
        "no more than noise alone gives"
        if p >= ALPHA
        else "more than noise alone gives but not above the threshold"
    )
    return Verdict(
        TRAP, TITLE, target, assessable=True, fired=False, verdict="inconclusive",
        summary=summary + f"; about {needed} reps would resolve it",
        sentence=f"{moved}, {noise} (p = {p:.2f}; {constant(ALPHA=ALPHA)}), and its "
        f"interval reaches across the {fmt_pct(threshold)} threshold: inconclusive; about "
        f"{needed} reps would resolve it. "
        "The headline is provisional.", effect="provisional", **common,
    )


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    threshold = float(setting(settings, CONFIG_KEY))
    cells = tables.cells
    verdicts = [judge(t, cells[cells["target"] == t], threshold, settings) for t in tables.targets]
    return verdicts, {"positions": position_medians(cells)}
