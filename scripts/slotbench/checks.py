"""Checks that decide whether the headline may be quoted at all.

Deviance (method rule 6) names cells whose output length strayed from the run's mode, because
one request that fails to stop moves wall clock and throughput in opposite directions. Rotation
bias (method rule 3) refuses a headline when an arm's throughput depends on where it ran.
Serialisation names a parallel arm the server served one request at a time, so that a server
setting (one slot) is not read as the engine failing to batch.
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


def verdict(
    cells: pd.DataFrame,
    rotation_threshold: float,
    deviance_threshold: float,
    requests: pd.DataFrame | None = None,
) -> dict:
    """Everything the report needs to decide, per target, whether to quote a headline.

    With ``requests`` each target also gets "serialisation": per parallel arm, whether the
    server served its requests one at a time (see :func:`serialisation`).
    """
    _, rotation = rotation_bias(cells, rotation_threshold)
    deviant_counts = deviance(cells, deviance_threshold)["target"].value_counts()
    modal = modal_tokens(cells)
    serial = None if requests is None else serialisation_verdict(serialisation(requests))
    targets = {}
    for target, info in rotation.items():
        targets[target] = {
            **info,
            "deviant_cells": int(deviant_counts.get(target, 0)),
            "modal_tokens": {str(run): int(tokens) for run, tokens in modal.loc[target].items()},
        }
        if serial is not None:
            targets[target]["serialisation"] = serial.get(target, {})
    return {
        "rotation_threshold": float(rotation_threshold),
        "deviance_threshold": float(deviance_threshold),
        "targets": targets,
    }


# --------------------------------------------------------------------------------------------
# Serialisation: a parallel arm the server served one request at a time
# --------------------------------------------------------------------------------------------

SERIALISATION_COLUMNS = [
    "target", "arm", "n_cells", "in_flight_median", "max_overlap_median", "serialised_cells",
    "queue_gap_slope_s", "queue_gap_trend", "wait_slope_s", "wait_trend",
    "serialised", "cause", "cells",
]  # fmt: skip
SERIALISED_CAUSE = (
    "the server served one request at a time: likely OLLAMA_NUM_PARALLEL=1 (or a model "
    "architecture Ollama forces to one slot) on Ollama, or --parallel 1 on llama-server; the "
    "'no batching gain' in this arm is a server setting, not a property of the engine"
)
# "(nearly) all cells": one odd cell in a handful (e.g. two very short outputs that happened
# not to overlap) must not hide a server that otherwise never overlapped, nor invent one.
SERIALISED_SHARE = 0.8
OVERLAP_TOLERANCE_S = 0.005


def _max_concurrent(cell: pd.DataFrame, start: str, tolerance_s: float) -> int:
    """Most windows [start, t_done_s) sharing one instant, ``tolerance_s`` trimmed off each end.

    The trim keeps back-to-back windows (one request's last chunk and the next one's first token
    read a millisecond apart by two client threads) from counting as overlapping. A window is
    counted at its own start even when it is shorter than the tolerance.
    """
    starts, ends = list(cell[start]), list(cell["t_done_s"])
    best = 0
    for s in starts:
        n = sum(1 for s2, e2 in zip(starts, ends) if s2 <= s and (e2 - tolerance_s > s or s2 == s))
        best = max(best, n)
    return best


def _rank_corr(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rho without scipy: Pearson on ranks; NaN when either side is constant."""
    rx, ry = x.rank(), y.rank()
    if len(rx) < 3 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(rx.corr(ry))


def _within_cell_slope(frame: pd.DataFrame, value: str) -> float:
    """Slope of ``value`` per place in the service order, cell baselines removed (pooled OLS)."""
    df = frame.dropna(subset=[value])
    if df.empty:
        return float("nan")
    grp = df.groupby("_cell")
    dx = df["_order"] - grp["_order"].transform("mean")
    dy = df[value] - grp[value].transform("mean")
    denom = float((dx * dx).sum())
    return float((dx * dy).sum() / denom) if denom > 0 else float("nan")


def _median_trend(frame: pd.DataFrame, value: str) -> float:
    rhos = [
        _rank_corr(g["_order"], g[value])
        for _, g in frame.dropna(subset=[value]).groupby("_cell", sort=True)
    ]
    rhos = [r for r in rhos if r == r]
    return float(pd.Series(rhos).median()) if rhos else float("nan")


def _service_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests with their cell label, service order, Ollama queue gap and client-side wait."""
    df = requests.dropna(subset=["t_first_s", "t_done_s"]).copy()
    df["_cell"] = [cell_label(*k) for k in df[CELL_KEYS].itertuples(index=False, name=None)]
    # the order the server served them in: who got a first token first
    df["_order"] = df.groupby("_cell")["t_first_s"].rank(method="first") - 1
    ns = [
        "total_duration_ns", "load_duration_ns", "prompt_eval_duration_ns", "eval_duration_ns",
    ]  # fmt: skip
    if all(c in df for c in ns):
        total, evald = (pd.to_numeric(df[c], errors="coerce") for c in (ns[0], ns[3]))
        load, prompt = (pd.to_numeric(df[c], errors="coerce").fillna(0) for c in ns[1:3])
        df["_queue_gap_s"] = (total - load - prompt - evald) / 1e9  # NaN unless Ollama sent them
    else:
        df["_queue_gap_s"] = float("nan")
    df["_ttft_s"] = df["t_first_s"] - df["t_sent_s"]
    serial_ttft = df[df["arm"] == 1].groupby("target")["_ttft_s"].median()
    df["_wait_s"] = df["_ttft_s"] - df["target"].map(serial_ttft)
    return df


def serialisation(requests: pd.DataFrame, tolerance_s: float = OVERLAP_TOLERANCE_S) -> pd.DataFrame:
    """Per (target, parallel arm): did the server ever generate two of its requests at once?

    A server with one slot (OLLAMA_NUM_PARALLEL=1, llama-server --parallel 1) queues the extra
    requests, so their generation windows [t_first_s, t_done_s] run back to back although the
    client had ``arm`` in flight. The verdict rests on that overlap alone; the queue gap
    (Ollama's total - load - prompt_eval - eval, i.e. time spent waiting for a slot) and the
    client-side wait (TTFT over the serial arm's median TTFT) growing with service order are
    reported as corroboration, as slopes in seconds per place and as median Spearman trends.
    """
    df = _service_frame(requests)
    rows = []
    for (target, arm), grp in df[df["arm"] > 1].groupby(["target", "arm"], sort=True):
        overlaps, in_flight = [], []
        for _, cell in grp.groupby("_cell", sort=True):
            # generating at once (server side) vs in flight at once (client side)
            overlaps.append(_max_concurrent(cell, "t_first_s", tolerance_s))
            in_flight.append(
                _max_concurrent(cell.dropna(subset=["t_sent_s"]), "t_sent_s", tolerance_s)
            )
        n = len(overlaps)
        serialised_cells = sum(1 for o in overlaps if o <= 1)
        # only the server's doing when the client really had more than one request in flight
        client_parallel = float(pd.Series(in_flight).median()) > 1
        serialised = bool(n and client_parallel and serialised_cells >= SERIALISED_SHARE * n)
        rows.append(
            {
                "target": target,
                "arm": int(arm),
                "n_cells": n,
                "in_flight_median": float(pd.Series(in_flight).median()),
                "max_overlap_median": float(pd.Series(overlaps).median()),
                "serialised_cells": serialised_cells,
                "queue_gap_slope_s": _within_cell_slope(grp, "_queue_gap_s"),
                "queue_gap_trend": _median_trend(grp, "_queue_gap_s"),
                "wait_slope_s": _within_cell_slope(grp, "_wait_s"),
                "wait_trend": _median_trend(grp, "_wait_s"),
                "serialised": serialised,
                "cause": SERIALISED_CAUSE if serialised else None,
                "cells": ";".join(sorted(grp["_cell"].unique())),
            }
        )
    return pd.DataFrame(rows, columns=SERIALISATION_COLUMNS)


def _plain(x) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


def serialisation_verdict(table: pd.DataFrame) -> dict[str, dict]:
    """target -> {arm: {...}}: the serialisation table as plain JSON for verdict.json."""
    out: dict[str, dict] = {}
    for row in table.itertuples(index=False):
        out.setdefault(str(row.target), {})[str(int(row.arm))] = {
            "serialised": bool(row.serialised),
            "max_overlap_median": _plain(row.max_overlap_median),
            "queue_gap_slope_s": _plain(row.queue_gap_slope_s),
            "cause": row.cause if isinstance(row.cause, str) else None,
        }
    return out
