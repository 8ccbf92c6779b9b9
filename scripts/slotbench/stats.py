"""The statistics every stage quotes, each written once: pure functions, arrays in, numbers out.

In the spirit of pytest-benchmark's ``stats.py`` and pyperf's helpers: the analysis, the checks
and the figures call these and never re-derive a median, a mode or an interval of their own, so
a number means the same thing wherever it appears.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd


def median(values) -> float:
    """Median of the finite values; NaN when there are none."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(np.median(arr)) if arr.size else float("nan")


def quantile(values, q: float) -> float:
    """The q-quantile (linear interpolation) of the finite values; NaN when there are none."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(np.quantile(arr, q)) if arr.size else float("nan")


def mode(values):
    """Most common value; ties go to the smallest, so the answer does not depend on row order.

    None when there are no values.
    """
    series = pd.Series(values).dropna()
    if series.empty:
        return None
    return series.mode().min()


def resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) indices for a bootstrap over n items, from a generator started at ``seed``."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_boot, n))


def median_ci(values, resamples: np.ndarray, ci: float) -> tuple[float, float, float]:
    """Median and percentile-bootstrap interval at level ``ci``; NaNs are skipped.

    ``resamples`` comes from :func:`resample_indices`, so several metrics of the same items can
    share one set of resamples (their intervals then describe the same bootstrap draws).
    """
    values = np.asarray(values, dtype=float)
    alpha = (1.0 - ci) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN metric gives NaN quietly
        boot = np.nanmedian(values[resamples], axis=1)
        lo, hi = np.nanquantile(boot, [alpha, 1.0 - alpha])
        return float(np.nanmedian(values)), float(lo), float(hi)


def rank_corr(x, y) -> float:
    """Spearman's rho (Pearson on ranks); NaN with fewer than 3 points or a constant side."""
    rx = pd.Series(x).reset_index(drop=True).rank()
    ry = pd.Series(y).reset_index(drop=True).rank()
    if len(rx) < 3 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(rx.corr(ry))


def within_group_slope(x, y, groups) -> float:
    """OLS slope of y on x with each group's means removed (pooled within-group regression).

    NaN when x does not vary within any group.
    """
    df = pd.DataFrame({"x": np.asarray(x, dtype=float), "y": np.asarray(y, dtype=float),
                       "g": np.asarray(groups)}).dropna()  # fmt: skip
    if df.empty:
        return float("nan")
    by = df.groupby("g")
    dx = df["x"] - by["x"].transform("mean")
    dy = df["y"] - by["y"].transform("mean")
    denom = float((dx * dx).sum())
    return float((dx * dy).sum() / denom) if denom > 0 else float("nan")


def median_rank_corr(x, y, groups) -> float:
    """Median over groups of each group's Spearman rho between x and y (NaN groups skipped)."""
    df = pd.DataFrame({"x": x, "y": y, "g": groups}).dropna()
    rhos = [rank_corr(g["x"], g["y"]) for _, g in df.groupby("g", sort=True)]
    rhos = [r for r in rhos if r == r]
    return float(np.median(rhos)) if rhos else float("nan")


def relative_half_width(value: float, lo: float, hi: float) -> float:
    """Half the interval's width relative to the value; NaN for a zero value."""
    return (hi - lo) / 2.0 / abs(value) if value else float("nan")


def reps_needed(n_reps: int, rel: float, target_rel: float, min_reps: int) -> float:
    """Reps for a relative half-width of ``target_rel``, if it shrinks as 1/sqrt(reps).

    reps_needed = ceil(n_reps * (rel / target_rel)^2), and never fewer than ``min_reps``.
    """
    if not math.isfinite(rel):
        return float("nan")
    # round first: 20 * (0.03 / 0.02)**2 is 45.000000000000007 in floating point
    return float(max(min_reps, math.ceil(round(n_reps * (rel / target_rel) ** 2, 6))))
