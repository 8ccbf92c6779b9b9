"""Sequential stopping (reps: auto): when to stop measuring, look by look, and the trail of looks.

After every rotation block (workflow/stopping.py), a look takes the reps measured so far and,
for every parallel arm of every target and every headline ratio the sufficiency check judges,
the ratio's sequential interval: a confidence sequence for the median per run, hulled across
runs (slotbench.core.sequential), which keeps its coverage although its width decides the stop.
The experiment stops when one of these holds:

- ``precise``: every interval is within checks.precision, with at least min_reps reps a run,
  and the rotation and deviance checks can look and do not refuse the headline;
- ``futile``: some ratio cannot reach the target within max_reps at the spread seen so far
  (the projection is optimistic, so this is said only when even it falls short);
- ``max_reps``: another block would pass max_reps;
- ``max_minutes``: another block, at the pace of the blocks so far, would take the reps' time
  past max_minutes.

The trail (:func:`trail`, analysis/stopping.csv) is decided again from the cells alone, look by
look, with no clock and no unseeded draw, so the checkpoint's decisions and a re-render agree
byte for byte. Not a trap: the sufficiency check judges the intervals the experiment ends with,
and the report's Stopping section says why it ended there.
"""

from __future__ import annotations

import math

import pandas as pd

from slotbench.checks import deviance, rotation
from slotbench.checks.base import Tables
from slotbench.checks.sufficiency import METRICS
from slotbench.core import sequential
from slotbench.core.cells import SERIAL_ARM, arm_name
from slotbench.core.fmt import fmt_duration
from slotbench.workflow.stopping import CONTINUE

COLUMNS = ["look", "reps_per_run", "minutes", "target", "arm", "metric", "value", "lo", "hi",
           "rel", "target_rel", "reps_needed", "decision", "look_decision"]
# the checks a precise stop needs assessable and not refusing the headline
GATE_CHECKS = (rotation, deviance)


def rep_minutes(cells: pd.DataFrame) -> pd.Series:
    """Each rep's measuring time in minutes, as its cells time it: from its first cell's start
    to its last cell's end (target, run, rep)."""
    if cells.empty:
        return pd.Series(dtype=float)
    end = cells["t_start_unix"] + cells["wall_s"]
    span = cells.assign(end=end).groupby(["target", "run", "rep"]).agg(
        start=("t_start_unix", "min"), end=("end", "max"))
    return (span["end"] - span["start"]) / 60.0


def measured_looks(cells: pd.DataFrame, block: int) -> int:
    """How many whole looks the cells hold: the fewest reps any target and run has, in
    blocks."""
    if cells.empty:
        return 0
    reps = cells.groupby(["target", "run"])["rep"].max()
    return int(reps.min()) // block


def gate(cells: pd.DataFrame, check_settings: dict) -> list[str]:
    """Why the checks a precise stop needs do not allow it (none: they do), from these
    cells."""
    tables = Tables(cells=cells, requests=pd.DataFrame(), control=pd.DataFrame(),
                    thermal=pd.DataFrame(), summary=pd.DataFrame())
    reasons = []
    for check in GATE_CHECKS:
        verdicts, _ = check.check(tables, check_settings)
        for v in verdicts:
            if not v.assessable:
                reasons.append(f"{v.target}: {v.title.lower()} not assessable")
            elif v.fired and v.effect == "refuse":
                reasons.append(f"{v.target}: {v.title.lower()} refuses the headline")
    return reasons


def look_rows(ratios: pd.DataFrame, cells: pd.DataFrame, look: int, settings: dict,
              check_settings: dict) -> tuple[list[dict], str, list[str]]:
    """Look ``look``: its rows (one per target, parallel arm and metric), its decision and the
    checks' reasons against a precise stop. ``ratios`` are the headline cells' ratios
    (analysis.analyse.headline_ratios) and ``cells`` every measured cell, both of every rep so
    far; the look reads those of its reps alone."""
    size, reps = settings["block"], look * settings["block"]
    ratios, cells = ratios[ratios["rep"] <= reps], cells[cells["rep"] <= reps]
    alpha, target_rel = 1.0 - settings["ci"], settings["precision"]
    minutes = float(rep_minutes(cells).sum())
    runs = sorted(set(cells["run"].astype(str)))
    rows = []
    for (target, arm), grp in ratios[ratios["arm"] != SERIAL_ARM].groupby(["target", "arm"]):
        for metric in METRICS:
            by_run = [grp.loc[grp["run"].astype(str) == run, metric].to_numpy(float)
                      for run in runs]
            seen = sequential.look(by_run, target_rel=target_rel, alpha=alpha,
                                   min_reps=settings["min_reps"], max_reps=settings["max_reps"],
                                   block=size)
            rows.append({"look": look, "reps_per_run": reps, "minutes": round(minutes, 6),
                         "target": str(target), "arm": int(arm), "metric": metric,
                         "value": seen.value, "lo": seen.lo, "hi": seen.hi, "rel": seen.rel,
                         "target_rel": target_rel, "reps_needed": seen.reps_needed,
                         "decision": "precise" if seen.decision == "precise" else (
                             "futile" if seen.decision == "futile" else CONTINUE)})
    reasons = gate(ratios, check_settings) if rows and all(
        r["decision"] == "precise" for r in rows) else []
    decision = decide(rows, reasons, reps, minutes / look, minutes, settings)
    for row in rows:
        row["look_decision"] = decision
        if row["decision"] == CONTINUE and decision in ("max_reps", "max_minutes"):
            row["decision"] = decision  # a budget ends every row still open
    return rows, decision, reasons


def decide(rows: list[dict], reasons: list[str], reps: int, block_minutes: float,
           minutes: float, settings: dict) -> str:
    """A look's decision from its rows, the checks' reasons against a precise stop, the reps a
    run so far, a block's minutes and the minutes so far (the order of the module's list)."""
    if rows and not reasons and all(r["decision"] == "precise" for r in rows):
        return "precise"
    if reps + settings["block"] > settings["max_reps"]:
        return "max_reps"
    if minutes + block_minutes > settings["max_minutes"]:
        return "max_minutes"
    if any(r["decision"] == "futile" for r in rows):
        return "futile"
    return CONTINUE


def trail(ratios: pd.DataFrame, cells: pd.DataFrame, settings: dict,
          check_settings: dict) -> pd.DataFrame:
    """Every look the cells hold, decided again: analysis/stopping.csv."""
    rows = []
    for look in range(1, measured_looks(cells, settings["block"]) + 1):
        rows += look_rows(ratios, cells, look, settings, check_settings)[0]
    return pd.DataFrame(rows, columns=COLUMNS)


def progress_line(rows: list[dict], decision: str, look: int, settings: dict,
                  runs_targets: int) -> str:
    """One line a look prints: reps a run, each arm's widest ratio against the target, and
    what is left, e.g. ``look 3: 9 reps/run · parallel-2 speedup ±7.4% (target 5%) ·
    parallel-4 ±2.1% ✓ · ≥ 12 more reps, ≥ 8 min``."""
    reps = look * settings["block"]
    parts = [f"look {look}: {reps} reps/run"]
    target = f"{settings['precision'] * 100:.3g}%"
    shown_target = False
    for arm in sorted({r["arm"] for r in rows}, key=lambda a: (a < 0, abs(a))):
        arm_rows = [r for r in rows if r["arm"] == arm]
        widest = max(arm_rows, key=lambda r: r["rel"] if r["rel"] == r["rel"] else math.inf)
        rel = widest["rel"]
        width = "unbounded" if not math.isfinite(rel) else f"±{rel * 100:.1f}%"
        if all(r["decision"] == "precise" for r in arm_rows):
            parts.append(f"{arm_name(arm)} {width} ✓")
        else:
            parts.append(f"{arm_name(arm)} {widest['metric']} {width}"
                         + ("" if shown_target else f" (target {target})"))
            shown_target = True
    minutes = rows[0]["minutes"] if rows else 0.0
    if decision == CONTINUE:
        needed = [r["reps_needed"] for r in rows if r["decision"] != "precise"]
        goal = min(settings["max_reps"], max((n for n in needed if n is not None),
                                             default=reps + settings["block"]))
        goal = max(goal, reps + settings["block"], settings["min_reps"])
        more = goal - reps
        pace = minutes / (reps * runs_targets) if reps else 0.0
        # the projection reads the spread in its favour: a floor, not a forecast
        parts.append(f"≥ {more} more reps, ≥ {fmt_duration(more * runs_targets * pace * 60)}")
    else:
        parts.append(f"stop: {decision} after {fmt_duration(minutes * 60)}")
    return " · ".join(parts)
