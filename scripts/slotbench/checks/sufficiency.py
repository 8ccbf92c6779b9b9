"""Were there enough reps? Each headline ratio's interval against a precision target.

A median with a wide bootstrap interval is a guess. For every parallel arm and ratio this says
how wide the interval is relative to the value, whether that meets the target (default ±5%),
and roughly how many reps would: an interval's width shrinks as 1/sqrt(n), so
reps_needed = ceil(n_reps * (rel / target_rel)^2), assuming the spread stays as it is.

Fewer than ``min_reps`` (default 5) never meet the target: a percentile-bootstrap interval of a
median is at most the range of the reps, and with n reps that range misses the true median with
probability 2 / 2^n (25% at 3 reps, 6% at 5), so two reps that happen to agree prove nothing.
reps_needed is then at least ``min_reps``. Even above it the bootstrap runs narrow with few reps,
so reps_needed is a lower bound.
"""

from __future__ import annotations

import math

import pandas as pd

SERIAL_ARM = 1
METRICS = ("speedup", "user_ratio", "ttft_ratio", "gen_gain", "pipelining")
SUFFICIENCY_COLUMNS = [
    "target", "arm", "metric", "n_reps", "value", "lo", "hi",
    "half_width", "rel", "target_rel", "meets", "reps_needed", "sentence",
]  # fmt: skip


def _reps_needed(n_reps: int, rel: float, target_rel: float, min_reps: int) -> float:
    if not math.isfinite(rel):
        return float("nan")
    # round first: 20 * (0.03 / 0.02)**2 is 45.000000000000007 in floating point
    return float(max(min_reps, math.ceil(round(n_reps * (rel / target_rel) ** 2, 6))))


def _sentence(
    target, arm, metric, n_reps, value, lo, hi, rel, target_rel, meets, needed, min_reps
) -> str:
    where = f"{target}, arm {arm}: {metric} {value:.3g} (CI {lo:.3g}–{hi:.3g})"
    if n_reps < 2:
        return f"{where} rests on one rep, which gives no interval; run at least {min_reps} reps."
    if not math.isfinite(rel):
        return f"{where}: no relative precision can be given (value {value!r})."
    if n_reps < min_reps:
        return (
            f"{where} is ±{rel:.1%} of the value from only {n_reps} reps, too few for the "
            f"interval to be trusted; about {needed:.0f} reps would meet the ±{target_rel:.0%} "
            "target if the spread stays as it is."
        )
    if meets:
        return (
            f"{where} is ±{rel:.1%} of the value, within the ±{target_rel:.0%} target "
            f"with {n_reps} reps."
        )
    return (
        f"{where} is ±{rel:.1%} of the value, outside the ±{target_rel:.0%} target with "
        f"{n_reps} reps; about {needed:.0f} reps would meet it if the spread stays as it is."
    )


def sufficiency(
    summary: pd.DataFrame, metrics=METRICS, target_rel: float = 0.05, min_reps: int = 5
) -> pd.DataFrame:
    """Per parallel arm and metric: interval half-width relative to the value, and reps needed.

    ``summary`` is :func:`slotbench.analyse.summarise` output (per target and arm: <metric>,
    <metric>_lo, <metric>_hi, n_reps). The serial arm is skipped: its ratios are 1 by
    construction. Fewer than ``min_reps`` reps never count as meeting the target (one rep gives
    a zero-width interval; a few give an interval too narrow to trust).
    """
    if target_rel <= 0:
        raise ValueError(f"target_rel must be positive, got {target_rel}")
    missing = [col for m in metrics for col in (m, f"{m}_lo", f"{m}_hi") if col not in summary] + [
        col for col in ("target", "arm", "n_reps") if col not in summary
    ]
    if missing:
        raise ValueError(
            f"summary lacks columns {missing}; pass the output of slotbench.analyse.summarise "
            "or choose metrics it has"
        )
    rows = []
    parallel = summary.loc[summary["arm"] != SERIAL_ARM].sort_values(["target", "arm"])
    for rec in parallel.to_dict("records"):
        n_reps = int(rec["n_reps"])
        for metric in metrics:
            value, lo, hi = (float(rec[metric]), float(rec[f"{metric}_lo"]),
                             float(rec[f"{metric}_hi"]))  # fmt: skip
            half = (hi - lo) / 2.0
            rel = half / abs(value) if value else float("nan")
            meets = bool(n_reps >= max(2, min_reps) and math.isfinite(rel) and rel <= target_rel)
            needed = (
                _reps_needed(n_reps, rel, target_rel, min_reps) if n_reps >= 2 else float("nan")
            )
            rows.append(
                {
                    "target": rec["target"], "arm": int(rec["arm"]), "metric": metric,
                    "n_reps": n_reps, "value": value, "lo": lo, "hi": hi,
                    "half_width": half, "rel": rel, "target_rel": float(target_rel),
                    "meets": meets, "reps_needed": needed,
                    "sentence": _sentence(rec["target"], int(rec["arm"]), metric, n_reps, value,
                                          lo, hi, rel, target_rel, meets, needed, min_reps),
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=SUFFICIENCY_COLUMNS)
