"""The paired design's comparison: every target against the first, pair by pair.

With ``design: paired``, rep k of every target is pair k of its run, its sides measured back to
back in an order that reverses every other pair (ABBA, :func:`slotbench.measure.plan.pair_order`).
Two sides of a pair ran minutes apart at most, so whatever the machine did over the run (a slower
afternoon, a warming chassis) touches both nearly alike, and linear drift cancels over two pairs.
Per (arm, metric) row of ``compare`` this module takes the ratio B / A within each pair, its median
with a bootstrap interval over the pairs, and the exact Wilcoxon signed-rank p-value of the log
ratios; Holm–Bonferroni over the rows of each comparison, as ``compare`` does.

The verdict is "B faster" or "B slower" where the test detects a change and the interval
excludes 1, "no detectable change" where it could have and did not, and "too few pairs to
decide" where even pairs all of one sign could not pass Holm (3 pairs never can), with the
pairs that could. Beside each row: what an unpaired comparison of the same cells would say (the
rank-sum of ``compare``), and the drift line, the serial arm's absolute rate of every side over
the run's time, which says how far the machine moved while it was measured. Nothing is assumed
about the order: each pair's sides are checked against their planned order by their start times.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slotbench.analysis.compare import (COSTS, METRICS, NOT_ASSESSABLE, RATES, metric_rows,
                                        verdict)
from slotbench.core import stats
from slotbench.core.cells import SERIAL_ARM, cell_labels

PAIR_KEYS = ["run", "rep"]  # a pair: one rep of every target, the same run and rep number
TOO_FEW_PAIRS = "too few pairs to decide"
SCHEMA = "slotbench.paired/1"
# the sides with a serial cell a target needs for the drift line through them
MIN_DRIFT_POINTS = 3


def pair_rows(ra: pd.DataFrame, rb: pd.DataFrame, n_boot: int, ci: float, seed: int) -> list[dict]:
    """One row per (arm, metric) both targets have: the per-pair ratios B / A, their median and
    interval, the signed-rank p-value, Holm's detection over the rows and the verdict, with the
    pairs' cells and raw files."""
    rows, unassessable = [], []
    for arm in sorted(set(ra["arm"].astype(int)) & set(rb["arm"].astype(int))):
        ca, cb = ra[ra["arm"] == arm], rb[rb["arm"] == arm]
        both = ca.merge(cb, on=PAIR_KEYS, suffixes=("_a", "_b"))
        both = both.sort_values(PAIR_KEYS)
        for metric, (label, higher) in METRICS.items():
            if arm == SERIAL_ARM and metric not in RATES:
                continue
            if metric in COSTS:
                if not (_finite(ra, metric) or _finite(rb, metric)):
                    continue  # neither target has it anywhere: no row at all
                lacking = [s for s, c in (("A", ca), ("B", cb)) if not _finite(c, metric)]
                if lacking:
                    unassessable.append(_not_assessable(arm, metric, label, lacking))
                    continue
            elif f"{metric}_a" not in both:
                continue
            a, b = both[f"{metric}_a"].to_numpy(float), both[f"{metric}_b"].to_numpy(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = b / a
            ok = np.isfinite(ratio) & (ratio > 0)
            pairs = both[ok]
            ratio = ratio[ok]
            med, lo, hi = (stats.median_ci(ratio, stats.resample_indices(len(ratio), n_boot, seed),
                                           ci) if len(ratio) else (np.nan,) * 3)
            keys = lambda side: pairs[["run", "rep", f"target_{side}"]].assign(  # noqa: E731
                arm=arm).rename(columns={f"target_{side}": "target"})
            rows.append({
                "arm": arm, "metric": metric, "label": label, "pairs": int(len(ratio)),
                "a": stats.median(a[ok]) if len(ratio) else np.nan,
                "b": stats.median(b[ok]) if len(ratio) else np.nan,
                "ratio": med, "ratio_lo": lo, "ratio_hi": hi,
                "pair_ratios": [{"run": str(r), "pair": int(p), "ratio": float(x)} for r, p, x in
                                zip(pairs["run"], pairs["rep"], ratio)],
                "p": stats.signed_rank_p(np.log(ratio)), "higher_better": higher,
                "min_p": stats.signed_rank_min_p(len(ratio)),
                "cells_a": cell_labels(keys("a")), "cells_b": cell_labels(keys("b")),
                "raw_a": sorted(set(pairs["raw_sha256_a"].dropna())) if "raw_sha256_a" in pairs
                else [],
                "raw_b": sorted(set(pairs["raw_sha256_b"].dropna())) if "raw_sha256_b" in pairs
                else [],
            })
    detected = stats.holm([r["p"] for r in rows], 1 - ci)
    reachable = stats.holm_reachable([r.pop("min_p") for r in rows], 1 - ci)
    for row, found, can in zip(rows, detected, reachable):
        row["detected"] = found
        # compare's verdict on the ratio's distance from 1: B faster or slower only where the
        # test detected a change and the interval excludes 1
        row["verdict"] = verdict(row["ratio_lo"] - 1, row["ratio_hi"] - 1,
                                 row.pop("higher_better"), found)
        if row["verdict"] and not can:
            row["verdict"] = TOO_FEW_PAIRS
            row["pairs_to_decide"] = stats.pairs_to_decide(len(rows), 1 - ci)
    rank = {m: i for i, m in enumerate(METRICS)}
    return sorted(rows + unassessable, key=lambda r: (r["arm"], rank[r["metric"]]))


def _finite(cells: pd.DataFrame, metric: str) -> bool:
    return metric in cells and bool(np.isfinite(cells[metric].to_numpy(float)).any())


def _not_assessable(arm: int, metric: str, label: str, lacking: list[str]) -> dict:
    """A cost row one target has no numbers for (no energy source, no usd_per_hour): no pairs
    compared, no verdict."""
    why = "no energy source" if metric == "j_per_token" else "no usd_per_hour"
    return {"arm": arm, "metric": metric, "label": label, "pairs": 0, "a": np.nan, "b": np.nan,
            "ratio": np.nan, "ratio_lo": np.nan, "ratio_hi": np.nan, "pair_ratios": [],
            "p": np.nan, "cells_a": [], "cells_b": [], "raw_a": [], "raw_b": [],
            "detected": False, "verdict": NOT_ASSESSABLE,
            "why": f"{why} on {' and '.join(lacking)}"}


def drift_line(cells: pd.DataFrame, target: str) -> dict:
    """The serial arm's aggregate tok/s of every side of ``target`` at the time it started,
    and the change over the run that a straight line through them gives (not assessable with
    fewer than MIN_DRIFT_POINTS sides)."""
    s = cells[(cells["target"].astype(str) == target) & (cells["arm"] == SERIAL_ARM)]
    s = s[np.isfinite(s["agg_tps"]) & np.isfinite(s["t_start_unix"])].sort_values("t_start_unix")
    points = [{"run": str(r), "pair": int(p), "t_unix": float(t), "agg_tps": float(v),
               "cell": f"{target}/{r}/rep{int(p)}/arm{SERIAL_ARM}"}
              for r, p, t, v in zip(s["run"], s["rep"], s["t_start_unix"], s["agg_tps"])]
    out = {"points": points, "assessable": len(points) >= MIN_DRIFT_POINTS,
           "min_points": MIN_DRIFT_POINTS}
    if out["assessable"]:
        t = s["t_start_unix"].to_numpy(float)
        v = s["agg_tps"].to_numpy(float)
        slope, intercept = np.polyfit(t - t[0], v, 1)
        start, end = intercept, intercept + slope * (t[-1] - t[0])
        out |= {"minutes": float((t[-1] - t[0]) / 60), "fit_start": float(start),
                "fit_end": float(end), "change": float(end / start - 1) if start > 0 else np.nan}
    return out


def order_check(cells: pd.DataFrame, planned: dict) -> dict:
    """Whether each pair's sides were measured in their planned order, one after the other, by
    the time each rep's first cell started (a resumed side may have run later)."""
    starts = cells.groupby(["target", "run", "rep"])["t_start_unix"].min()
    in_order, late = 0, []
    for run, pairs in planned.items():
        for pair, order in pairs.items():
            times = [starts.get((t, run, int(pair))) for t in order]
            if any(x is None or not np.isfinite(x) for x in times):
                continue
            if all(x < y for x, y in zip(times, times[1:])):
                in_order += 1
            else:
                late.append(f"{run}/pair{pair}")
    return {"pairs_in_order": in_order, "pairs_out_of_order": late}


def analyse(ratios: pd.DataFrame, cells: pd.DataFrame, targets: list[str], planned: dict,
            decision: dict, n_boot: int, ci: float, seed: int) -> dict:
    """The paired comparison of every target after the first against the first (A)."""
    baseline = targets[0]
    out = {"schema": SCHEMA, "ci": ci, "baseline": baseline, "targets": list(targets),
           "order": order_check(cells, planned),
           "pairs_planned": sum(len(p) for p in planned.values()),
           "drift": {t: drift_line(cells, t) for t in targets}, "comparisons": {}}
    ra = ratios[ratios["target"].astype(str) == baseline]
    for target in targets[1:]:
        rb = ratios[ratios["target"].astype(str) == target]
        refusal = [f"{label}'s headline was refused"
                   for t, label in ((baseline, "A"), (target, "B"))
                   if (decision.get(t) or {}).get("status") == "refused"]
        rows = pair_rows(ra, rb, n_boot, ci, seed)
        unpaired = {(r["arm"], r["metric"]): r for r in metric_rows(ra, rb, n_boot, ci, seed)}
        for row in rows:
            if refusal:
                row["verdict"] = None
                row.pop("pairs_to_decide", None)
            u = unpaired.get((row["arm"], row["metric"]), {})
            row["unpaired"] = {k: u.get(k) for k in ("diff", "diff_lo", "diff_hi", "p",
                                                      "verdict", "reps_to_decide")}
        out["comparisons"][target] = {"a": baseline, "b": target,
                                      "refusal": "; ".join(refusal) or None, "rows": rows}
    return out
