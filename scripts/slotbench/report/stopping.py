"""The report's Stopping section (reps: auto): why the experiment stopped where it did, after how
many reps and minutes, and what a fixed run of max_reps would have cost (analysis/stopping.csv,
the trail of looks; slotbench.checks.stopping decides them)."""

from __future__ import annotations

import math

import pandas as pd

from slotbench.core.cells import arm_name
from slotbench.core.fmt import count, fmt_duration
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table
from slotbench.report.traps import TargetContext

STOPPING_ID = "stopping"  # the provenance id of the last look's table

WHY = {
    "precise": "every headline ratio of every parallel arm is within the target, with at least "
               "{min_reps} reps a run, and the rotation and deviance checks could look and did "
               "not refuse the headline",
    "futile": "a ratio cannot reach the target within {max_reps} reps a run at the spread seen so "
              "far (judged optimistically, so this is said only when even the optimistic "
              "projection falls short)",
    "max_reps": "another block would have passed max_reps ({max_reps} reps a run)",
    "max_minutes": "another block would have taken the reps past max_minutes ({max_minutes:g} "
                   "min of measuring)",
}


def _pct(x) -> str:
    return "unbounded" if not math.isfinite(float(x)) else f"±{float(x) * 100:.1f}%"


def _needed(n, have: int) -> str:
    """What the projection (the spread so far, read in its favour) says of the reps a run the
    target needs, against the ``have`` measured: a floor when it asks for more, and no promise
    when it asks for no more than were measured and they fell short."""
    if pd.isna(n):
        return "more than 10,000 reps a run even at this spread read in its favour"
    if int(n) > have:
        return f"at least {int(n)} reps a run at this spread, read in its favour"
    return (f"{have} reps a run fell short, though this spread read in its favour would reach "
            f"it at {int(n)}")


def _missed(rows: pd.DataFrame) -> str:
    """The rows that missed the target, named: target, arm, metric, width, reps needed."""
    missed = rows[rows["decision"] != "precise"]
    return "; ".join(
        f"{r.target} {arm_name(int(r.arm))} {r.metric} {_pct(r.rel)} "
        f"({_needed(r.reps_needed, int(r.reps_per_run))})" for r in missed.itertuples())


def split_arms(verdicts: list[dict]) -> dict[str, list[int]]:
    """Per target, the arms whose rounds split into two states (the rounds check fired)."""
    return {v["target"]: list(v.get("arms") or []) for v in verdicts
            if v["trap"] == "rounds" and v["fired"] and v.get("arms")}


def blocks(trail: pd.DataFrame | None, settings: dict | None, split: dict,
           runs_targets: int, index: prov.CellIndex | None = None) -> list:
    """The section, or nothing for a fixed number of reps (no trail). ``split`` maps a
    target to the arms whose rounds split into two states (the rounds check); with ``index``,
    the last look's table names its cells (every measured cell: the look read them all)."""
    if trail is None or settings is None:
        return []
    if trail.empty:
        return [Heading(2, "Stopping"),
                Paragraph("reps: auto, but no whole block of reps was measured: no look was made.",
                          "warning")]
    last = trail[trail["look"] == trail["look"].max()]
    decision = str(last["look_decision"].iloc[0])
    look, reps = int(last["look"].iloc[0]), int(last["reps_per_run"].iloc[0])
    minutes = float(last["minutes"].iloc[0])
    target = f"±{settings['precision'] * 100:.3g}%"
    text = (f"reps: auto. The experiment measured {count(reps, 'rep')} a run in "
            f"{count(look, 'look')} (blocks of {settings['block']}, so every arm held every "
            f"position equally often in every run), {fmt_duration(minutes * 60)} of measuring, and "
            f"stopped {decision}: " + WHY.get(decision, decision).format(**settings) + ".")
    if decision != "precise":
        text += f" Missed the {target} target: {_missed(last)}."
    pace = minutes / (reps * runs_targets) if reps else float("nan")
    fixed = settings["max_reps"] * runs_targets * pace
    text += (f" A fixed run of max_reps ({settings['max_reps']} reps a run) would have taken "
             f"about {fmt_duration(fixed * 60)} of measuring at the pace measured.")
    out = [Heading(2, "Stopping")]
    if decision != "precise":
        out.append(Paragraph(f"Not precise: the experiment stopped {decision} before every "
                             f"headline ratio met {target}; the intervals below say how wide "
                             "they are, and no headline here is claimed to meet the target.",
                             "warning"))
    out.append(Paragraph(text))
    for tgt, arms in sorted(split.items()):
        for arm in arms:
            out.append(Paragraph(
                f"{tgt} {arm_name(arm)}: its rounds split into two states (Rounds that split "
                "into two states), so its reps are a mixture; more reps narrow such an "
                "interval only slowly.", "note"))
    out.append(Paragraph(
        "Every interval of the headline ratios in this report is sequential: a confidence "
        "sequence for the median in each run (Howard and Ramdas, Bernoulli 2022), hulled across "
        "runs, so it keeps its level although its width decided when to stop. "
        "analysis/stopping.csv holds every look, decided again from the cells."))
    rows = [[r.target, arm_name(int(r.arm)), r.metric, f"{r.value:.3g}",
             "—" if not math.isfinite(r.lo) else f"{r.lo:.3g}",
             "—" if not math.isfinite(r.hi) else f"{r.hi:.3g}", _pct(r.rel),
             "—" if pd.isna(r.reps_needed) else str(int(r.reps_needed)), r.decision]
            for r in last.itertuples()]
    title = f"The last look (look {look}, {reps} reps a run) against {target}"
    out.append(Table(title, ["target", "arm", "metric", "value", "lo", "hi", "half-width",
                             "reps a run needed", "decision"], rows,
                     "Every look, decided again from the cells: analysis/stopping.csv.",
                     anchor=STOPPING_ID))
    if index is not None:
        labels = index.labels()
        ref = prov.Ref(STOPPING_ID, "table", title, prov.with_roles((labels, "source")),
                       STOPPING_ID)
        out.append(TargetContext("", labels, index).sources(labels, STOPPING_ID, (ref,)))
    return out
