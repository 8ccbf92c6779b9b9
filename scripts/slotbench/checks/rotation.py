"""Trap: arm order, not concurrency, moving throughput (method rule 3).

Arm order rotates by rep (a cyclic Latin square), so each arm is measured at every position.
Each arm's median aggregate tok/s at each position it occupied is compared; an arm's spread is
(max - min of its per-position medians) / its median over all cells, and the widest spread over
arms is the rotation bias. Strictly above the threshold the headline is refused.
"""

from __future__ import annotations

import pandas as pd

from slotbench import stats
from slotbench.cells import arm_name, cell_labels
from slotbench.checks.base import Tables, Verdict, judged, records, setting
from slotbench.fmt import fmt_pct

TRAP = "rotation_bias"
TITLE = "Rotation bias"
ORDER = 20
TABLES = ("positions",)
CONFIG_KEY = "checks.rotation_threshold"
POSITION_COLUMNS = ["target", "arm", "position", "median_agg_tps", "n_cells", "cells"]


def position_medians(cells: pd.DataFrame) -> pd.DataFrame:
    """Median agg_tps of each arm at each position it occupied (runs pooled, per target)."""
    rows = []
    for (target, arm, position), grp in cells.groupby(["target", "arm", "position"], sort=True):
        rows.append({
            "target": target, "arm": int(arm), "position": int(position),
            "median_agg_tps": stats.median(grp["agg_tps"]), "n_cells": int(len(grp)),
            "cells": ";".join(cell_labels(grp)),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=POSITION_COLUMNS)


def _refusal_reason(bias: float, arm: int, hi: pd.Series, lo: pd.Series, threshold: float) -> str:
    """A sentence for the report: which arm, where it ran fast and slow, and what to do."""
    return (
        f"rotation bias {bias:.1%} (arm {arm}: {hi['median_agg_tps']:.1f} tok/s at position "
        f"{int(hi['position'])} vs {lo['median_agg_tps']:.1f} at position "
        f"{int(lo['position'])}) exceeds the {threshold * 100:g}% threshold: arm order, not "
        "concurrency, may be driving the result; add reps or cool the machine between reps"
    )


def rotation_bias(
    cells: pd.DataFrame, threshold: float = 0.10
) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Per-position medians and, per target, whether arm order moved throughput too much."""
    positions = position_medians(cells)
    arm_medians = cells.groupby(["target", "arm"])["agg_tps"].median()
    targets: dict[str, dict] = {}
    for target, tpos in positions.groupby("target", sort=True):
        arms, extremes = {}, {}
        for arm, apos in tpos.groupby("arm", sort=True):
            hi = apos.loc[apos["median_agg_tps"].idxmax()]
            lo = apos.loc[apos["median_agg_tps"].idxmin()]
            spread = (hi["median_agg_tps"] - lo["median_agg_tps"]) / arm_medians[(target, arm)]
            arms[int(arm)] = {
                "spread": float(spread),
                "positions_seen": sorted(int(p) for p in apos["position"]),
            }
            extremes[int(arm)] = (hi, lo)
        worst_arm = max(arms, key=lambda a: arms[a]["spread"])  # ties -> smallest arm
        bias = arms[worst_arm]["spread"]
        refused = bias > threshold
        targets[str(target)] = {
            "rotation_bias": bias,
            "worst_arm": worst_arm,
            "refused": bool(refused),
            "reason": (
                _refusal_reason(bias, worst_arm, *extremes[worst_arm], threshold)
                if refused
                else None
            ),
            "arms": {str(arm): info for arm, info in arms.items()},
        }
    return positions, targets


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    threshold = float(setting(settings, CONFIG_KEY))
    positions, result = rotation_bias(tables.cells, threshold)
    verdicts = []
    for target in tables.targets:
        info = result[target]
        bias, worst = info["rotation_bias"], info["worst_arm"]
        side = "above" if info["refused"] else "within"
        summary = f"rotation bias {fmt_pct(bias, 1)} against a {fmt_pct(threshold)} threshold"
        if info["refused"]:
            summary += "; headline refused"
        rows = positions[positions["target"] == target]
        verdicts.append(judged(
            TRAP, TITLE, target, info["refused"], summary,
            (
                f"Rotation bias {fmt_pct(bias, 1)} (worst arm {arm_name(worst)}): the widest "
                "relative spread of an arm's median aggregate tok/s across the positions it "
                f"occupied. That is {side} the {fmt_pct(threshold)} threshold (above it the "
                "report refuses a headline)."
            ),
            threshold=threshold, config_key=CONFIG_KEY, effect="refuse",
            evidence={"rotation_bias": bias, "worst_arm": worst, "reason": info["reason"],
                      "arms": info["arms"], "rows": records(rows)},
            cells=sorted({c for cs in rows["cells"] for c in cs.split(";")}),
            arms=[worst] if info["refused"] else [],
        ))  # fmt: skip
    return verdicts, {"positions": positions}
