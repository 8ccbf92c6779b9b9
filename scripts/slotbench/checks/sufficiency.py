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

from slotbench.checks.base import (Tables, Verdict, constant, judged, not_assessable, records,
                                   setting)
from slotbench.core import stats
from slotbench.core.cells import SERIAL_ARM, arm_name
from slotbench.core.fmt import count

TRAP = "sufficiency"
TITLE = "Too few reps (interval width)"
ORDER = 100
TABLES = ("sufficiency",)
CONFIG_KEY = "checks.precision"
MIN_REPS = 5
METRICS = ("speedup", "user_ratio", "ttft_ratio", "gen_gain", "pipelining")
SUFFICIENCY_COLUMNS = [
    "target", "arm", "metric", "n_reps", "value", "lo", "hi",
    "half_width", "rel", "target_rel", "meets", "reps_needed", "sentence",
]


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
    summary: pd.DataFrame, metrics=METRICS, *, target_rel: float, min_reps: int = MIN_REPS
) -> pd.DataFrame:
    """Per parallel arm and metric: interval half-width relative to the value (against
    ``target_rel``, checks.precision), and reps needed.

    ``summary`` is :func:`slotbench.analysis.analyse.summarise` output (per target and arm:
    <metric>, <metric>_lo, <metric>_hi, n_reps). The serial arm is skipped: its ratios are 1 by
    construction. Fewer than ``min_reps`` reps never count as meeting the target (one rep gives a
    zero-width interval; a few give an interval too narrow to trust).
    """
    if target_rel <= 0:
        raise ValueError(f"target_rel must be positive, got {target_rel}")
    missing = [col for m in metrics for col in (m, f"{m}_lo", f"{m}_hi") if col not in summary] + [
        col for col in ("target", "arm", "n_reps") if col not in summary
    ]
    if missing:
        raise ValueError(
            f"summary lacks columns {missing}; pass the output of "
            "slotbench.analysis.analyse.summarise or choose metrics it has"
        )
    rows = []
    parallel = summary.loc[summary["arm"] != SERIAL_ARM].sort_values(["target", "arm"])
    for rec in parallel.to_dict("records"):
        n_reps = int(rec["n_reps"])
        for metric in metrics:
            value, lo, hi = (float(rec[metric]), float(rec[f"{metric}_lo"]),
                             float(rec[f"{metric}_hi"]))
            half = (hi - lo) / 2.0
            rel = stats.relative_half_width(value, lo, hi)
            meets = bool(n_reps >= max(2, min_reps) and math.isfinite(rel) and rel <= target_rel)
            needed = (
                stats.reps_needed(n_reps, rel, target_rel, min_reps)
                if n_reps >= 2
                else float("nan")
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
            )
    return pd.DataFrame(rows, columns=SUFFICIENCY_COLUMNS)


def _pct_g(x) -> str:
    """A precision target as a percent with the digits it was given: 0.05 -> 5%, 0.001 -> 0.1%."""
    return f"{round(float(x) * 100, 6):g}%"


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    target_rel = float(setting(settings, CONFIG_KEY))
    table = sufficiency(tables.summary, target_rel=target_rel)
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target]
        if rows.empty:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no parallel arm to assess", "No parallel arm to assess.",
                threshold=target_rel, config_key=CONFIG_KEY,
            ))
            continue
        misses = rows[~rows["meets"]]
        n_reps = sorted({int(n) for n in rows["n_reps"].dropna()})
        reps_text = f"{n_reps[0]} reps" if len(n_reps) == 1 else "their reps"
        target_text = f"±{_pct_g(target_rel)}"
        m = len(rows)
        evidence = {"rows": records(rows), "intervals": m, "misses": len(misses),
                    "min_reps": MIN_REPS, "target_text": target_text}
        if misses.empty:
            summary = f"every interval meets {target_text} with {reps_text}"
            sentence = (f"Enough reps: every interval meets {target_text} with {reps_text} "
                        f"({count(m, 'interval')}).")
        else:
            needed = pd.to_numeric(misses["reps_needed"], errors="coerce").max()
            widest = misses.loc[pd.to_numeric(misses["rel"], errors="coerce")
                                .fillna(float("inf")).idxmax()]
            need_text = "" if pd.isna(needed) else f"; about {int(needed)} reps would meet them all"
            summary = (f"{len(misses)} of {count(m, 'interval')} miss {target_text} with "
                       f"{reps_text}{need_text}")
            widest_rel = "n/a" if pd.isna(widest["rel"]) else f"±{float(widest['rel']) * 100:.1f}%"
            evidence |= {
                "reps_needed": None if pd.isna(needed) else int(needed),
                "widest": f"{arm_name(widest['arm'])} {widest['metric']} {widest_rel}",
            }
            sentence = (f"Too few reps: {summary} if the spread stays as it is (widest: "
                        f"{evidence['widest']}).")
            if (pd.to_numeric(misses["n_reps"], errors="coerce") < MIN_REPS).any():
                sentence += (f" An interval from fewer than {MIN_REPS} reps never counts as "
                             f"meeting it ({constant(MIN_REPS=MIN_REPS)}).")
        verdicts.append(judged(
            TRAP, TITLE, target, len(misses), summary, sentence, threshold=target_rel,
            config_key=CONFIG_KEY, evidence=evidence, arms=sorted({int(a) for a in misses["arm"]}),
        ))
    return verdicts, {"sufficiency": table}
