"""Checks that decide whether the headline may be quoted at all.

Deviance (method rule 6) names cells whose output length strayed from the run's mode, because
one request that fails to stop moves wall clock and throughput in opposite directions. Rotation
bias (method rule 3) refuses a headline when an arm's throughput depends on where it ran.
"""

from __future__ import annotations

import pandas as pd

from slotbench.cells import CELL_KEYS, cell_label, position_medians

RUN_KEYS = ["target", "run"]
ARM_KEYS = RUN_KEYS + ["arm"]
DEVIANCE_COLUMNS = [
    "target", "run", "rep", "arm", "position",
    "tokens_out", "modal_tokens", "deviation",
    "wall_s", "wall_effect", "agg_tps", "tps_effect",
    "cell", "raw_file", "raw_sha256",
]  # fmt: skip


def _mode(tokens: pd.Series) -> float:
    """Most common value; ties go to the smallest so the answer does not depend on row order."""
    return tokens.mode().min()


def modal_tokens(cells: pd.DataFrame) -> pd.Series:
    """Modal tokens_out per (target, run): what a normal cell of that run produced."""
    return cells.groupby(RUN_KEYS, sort=True)["tokens_out"].agg(_mode).rename("modal_tokens")


def deviance(cells: pd.DataFrame, threshold: float = 0.05) -> pd.DataFrame:
    """Cells whose output differs from their run's mode by more than ``threshold``.

    wall_effect and tps_effect compare each deviant cell with the median of the normal cells of
    the same target, run and arm, showing how far the extra (or missing) tokens moved it.
    """
    df = cells.merge(modal_tokens(cells).reset_index(), on=RUN_KEYS, how="left")
    df["deviation"] = (df["tokens_out"] - df["modal_tokens"]) / df["modal_tokens"]
    is_deviant = df["deviation"].abs() > threshold
    normal = (
        df.loc[~is_deviant]
        .groupby(ARM_KEYS)[["wall_s", "agg_tps"]]
        .median()
        .add_suffix("_normal")
        .reset_index()
    )
    out = df.loc[is_deviant].merge(normal, on=ARM_KEYS, how="left")
    out["wall_effect"] = out["wall_s"] / out["wall_s_normal"] - 1.0
    out["tps_effect"] = out["agg_tps"] / out["agg_tps_normal"] - 1.0
    out["cell"] = [cell_label(*key) for key in out[CELL_KEYS].itertuples(index=False, name=None)]
    out = out.sort_values(CELL_KEYS, ignore_index=True)
    return out.reindex(columns=DEVIANCE_COLUMNS)


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
    """Per-position medians and, per target, whether arm order moved throughput too much.

    An arm's spread is (max - min of its per-position medians) / its median over all cells; the
    widest spread over arms is the rotation bias. Refusal is strictly above ``threshold``.
    """
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


def verdict(cells: pd.DataFrame, rotation_threshold: float, deviance_threshold: float) -> dict:
    """Everything the report needs to decide, per target, whether to quote a headline."""
    _, rotation = rotation_bias(cells, rotation_threshold)
    deviant_counts = deviance(cells, deviance_threshold)["target"].value_counts()
    modal = modal_tokens(cells)
    targets = {}
    for target, info in rotation.items():
        targets[target] = {
            **info,
            "deviant_cells": int(deviant_counts.get(target, 0)),
            "modal_tokens": {str(run): int(tokens) for run, tokens in modal.loc[target].items()},
        }
    return {
        "rotation_threshold": float(rotation_threshold),
        "deviance_threshold": float(deviance_threshold),
        "targets": targets,
    }
