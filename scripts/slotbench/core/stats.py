"""The statistics every stage quotes, each written once: pure functions, arrays in, numbers out.

In the spirit of pytest-benchmark's ``stats.py`` and pyperf's helpers: the analysis, the checks
and the figures call these and never re-derive a median, a mode or an interval of their own, so
a number means the same thing wherever it appears. No scipy: its exact permutation test gives the
same rank-sum p-values, its exact Mann-Whitney ignores ties, and its bootstrap would move every
interval already reported (benchmarks/RESULTS.md, section 7).
"""

from __future__ import annotations

import functools
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


# One cell's requests, in plain Python: consolidation takes these for each of ~250,000 cells at
# a million requests, where numpy's cost per call would dominate.


def cell_median(values) -> float:
    """:func:`median` of one cell's values (a list): the finite values' median, the mean of the
    middle two for an even count; NaN when there are none."""
    vals = sorted(v for v in values if v is not None and math.isfinite(v))
    if not vals:
        return np.nan
    mid = len(vals) // 2
    return float(vals[mid]) if len(vals) % 2 else float((vals[mid - 1] + vals[mid]) / 2)


def cell_quantile(values, q: float) -> float:
    """:func:`quantile` of one cell's values (a list): the q quantile of the finite values,
    interpolated linearly between order statistics; NaN when there are none."""
    vals = sorted(v for v in values if v is not None and math.isfinite(v))
    if not vals:
        return math.nan
    pos = q * (len(vals) - 1)
    low = int(pos)
    high = min(low + 1, len(vals) - 1)
    return float(vals[low] + (vals[high] - vals[low]) * (pos - low))


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


def median_diff_ci(a, b, n_boot: int, ci: float, seed: int) -> tuple[float, float, float]:
    """median(b) − median(a) over the finite values of each side, and its percentile-bootstrap
    interval at level ``ci``: each side resampled on its own (a from ``seed``, b from
    ``seed + 1``, :func:`resample_indices`); NaN when a side has no finite value."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if not len(a) or not len(b):
        return (np.nan,) * 3
    ra = np.median(a[resample_indices(len(a), n_boot, seed)], axis=1)
    rb = np.median(b[resample_indices(len(b), n_boot, seed + 1)], axis=1)
    tail = (1 - ci) / 2 * 100
    lo, hi = np.percentile(rb - ra, [tail, 100 - tail])
    return float(np.median(b) - np.median(a)), float(lo), float(hi)


def share_ci(hits, totals, resamples: np.ndarray, ci: float) -> tuple[float, float, float]:
    """The pooled share sum(hits) / sum(totals) over items (e.g. each rep's requests that met a
    level, out of its requests) and its percentile-bootstrap interval at level ``ci``, the items
    resampled as ``resamples`` (:func:`resample_indices`) says; NaN when there is nothing to
    count."""
    hits = np.asarray(hits, dtype=float)
    totals = np.asarray(totals, dtype=float)
    nan = (float("nan"),) * 3
    if not totals.size or not totals.sum() > 0:
        return nan
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = hits[resamples].sum(axis=1) / totals[resamples].sum(axis=1)
    boot = boot[np.isfinite(boot)]
    alpha = (1.0 - ci) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha]) if boot.size else (np.nan, np.nan)
    return float(hits.sum() / totals.sum()), float(lo), float(hi)


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
                       "g": np.asarray(groups)}).dropna()
    if df.empty:
        return float("nan")
    by = df.groupby("g")
    dx = df["x"] - by["x"].transform("mean")
    dy = df["y"] - by["y"].transform("mean")
    denom = float((dx * dx).sum())
    return float((dx * dy).sum() / denom) if denom > 0 else float("nan")


def median_rank_corr(x, y, groups) -> float:
    """Median over groups of each group's Spearman rho between x and y (NaN groups skipped):
    :func:`rank_corr` of each group, the ranks taken for every group at once."""
    df = pd.DataFrame({"x": x, "y": y, "g": groups}).dropna()
    if df.empty:
        return float("nan")
    df = df.sort_values("g", kind="stable")
    by = df.groupby("g", sort=False)
    rx, ry = by["x"].rank().to_numpy(float), by["y"].rank().to_numpy(float)
    g = df["g"].to_numpy()
    bounds = [0, *(np.flatnonzero(g[1:] != g[:-1]) + 1), len(g)]
    rhos = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        xa, ya = rx[a:b], ry[a:b]
        if b - a < 3 or xa.min() == xa.max() or ya.min() == ya.max():
            continue  # rank_corr's NaN: too few points or a constant side
        rho = float(pd.Series(xa).corr(pd.Series(ya)))
        if rho == rho:
            rhos.append(rho)
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


def _dummies(codes: np.ndarray, k: int) -> np.ndarray:
    """One-hot columns for codes 1..k-1 (code 0 is the reference), for codes of any shape."""
    return np.eye(k)[codes][..., 1:]


# permutations of the position test computed together (memory: PERM_CHUNK × cells × positions)
PERM_CHUNK = 100


def _demean(x: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """x minus its mean within each group (rows of x, groups 0..n_groups-1)."""
    sums = np.zeros((n_groups,) + x.shape[1:])
    np.add.at(sums, groups, x)
    counts = np.bincount(groups, minlength=n_groups).astype(float)
    return x - (sums / counts.reshape((-1,) + (1,) * (x.ndim - 1)))[groups]


def _position_range(xtx: np.ndarray, xty: np.ndarray, n_arm: int) -> np.ndarray:
    """exp(max - min of the position coefficients) - 1, for stacked normal equations."""
    beta = np.full(xty.shape, np.nan)
    for i in range(len(xty)):
        if np.linalg.matrix_rank(xtx[i]) == xtx.shape[-1]:
            beta[i] = np.linalg.solve(xtx[i], xty[i])
    pos = np.concatenate([np.zeros((len(beta), 1)), beta[:, n_arm:]], axis=1)
    return np.exp(pos.max(axis=1) - pos.min(axis=1)) - 1.0


def position_effect(
    values,
    blocks,
    arms,
    positions,
    *,
    n_boot: int,
    n_perm: int,
    ci: float,
    seed: int,
) -> dict:
    """How much position (the place in the rep's order) moves a value, reps and arms accounted.

    The Latin-square analysis of the rotated design: log(value) = rep effect + arm effect +
    position effect + noise, the rep (block) effects absorbed by demeaning within each block.
    The effect is exp(max - min of the position coefficients) - 1: how much the best position
    beats the worst. Its interval is a percentile bootstrap over blocks; its p-value comes from
    shuffling the positions within each block (what noise alone gives when position does
    nothing). NaN effect when the design cannot separate position from arm and block.
    """
    y = np.log(np.asarray(values, dtype=float))
    keep = np.isfinite(y)
    y = y[keep]
    block_codes, block_index = np.unique(np.asarray(blocks)[keep], return_inverse=True)
    arm_codes, arm_index = np.unique(np.asarray(arms)[keep], return_inverse=True)
    pos_codes, pos_index = np.unique(np.asarray(positions)[keep], return_inverse=True)
    n_blocks, n_arm = len(block_codes), len(arm_codes) - 1
    nan = {"effect": float("nan"), "lo": float("nan"), "hi": float("nan"),
           "p_value": float("nan"), "coefficients": {}, "blocks": n_blocks}
    if n_blocks < 2 or len(pos_codes) < 2:
        return nan
    x_arm = _demean(_dummies(arm_index, len(arm_codes)), block_index, n_blocks)
    raw_pos = _dummies(pos_index, len(pos_codes))
    pos_means = raw_pos - _demean(raw_pos, block_index, n_blocks)  # shuffling keeps them
    yd = _demean(y, block_index, n_blocks)

    def normal_equations(x_pos, weights):
        x = np.concatenate([np.broadcast_to(x_arm, x_pos.shape[:-1] + x_arm.shape[-1:]), x_pos],
                           axis=-1)
        w = weights[..., block_index]
        return (
            np.einsum("...n,...ni,...nj->...ij", w, x, x),
            np.einsum("...n,...ni,...n->...i", w, x, yd),
        )

    x_pos = raw_pos - pos_means
    xtx, xty = normal_equations(x_pos[None], np.ones((1, n_blocks)))
    effect = float(_position_range(xtx, xty, n_arm)[0])
    if not np.isfinite(effect):
        return nan
    beta = np.linalg.solve(xtx[0], xty[0])
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, n_blocks, n_blocks), minlength=n_blocks)
                       for _ in range(n_boot)]).astype(float)
    boot = _position_range(*normal_equations(x_pos[None], counts), n_arm)
    boot = boot[np.isfinite(boot)]
    alpha = (1.0 - ci) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1 - alpha]) if boot.size else (np.nan, np.nan)
    # positions shuffled within each block: sorting block + a uniform draw orders every block's
    # values at random and keeps the blocks apart; PERM_CHUNK shuffles at a time bound memory
    order = np.argsort(block_index, kind="stable")
    null_parts = []
    for done in range(0, n_perm, PERM_CHUNK):
        k = min(PERM_CHUNK, n_perm - done)
        shuffled = np.argsort(block_index[None, :] + rng.random((k, len(y))), axis=1)
        perms = np.empty((k, len(y)), dtype=int)
        perms[:, order] = pos_index[shuffled]
        perm_x = _dummies(perms, len(pos_codes)) - pos_means
        null_parts.append(_position_range(*normal_equations(perm_x, np.ones((k, n_blocks))),
                                          n_arm))
    null = np.concatenate(null_parts)
    null = null[np.isfinite(null)]
    coefs = {int(p): float(np.exp(c) - 1) for p, c in
             zip(pos_codes, np.concatenate([[0.0], beta[n_arm:]]))}
    return {"effect": effect, "lo": float(lo), "hi": float(hi),
            "p_value": float((1 + (null >= effect - 1e-12).sum()) / (1 + null.size)),
            "null_median": float(np.median(null)) if null.size else float("nan"),
            "null_p95": float(np.quantile(null, 0.95)) if null.size else float("nan"),
            "coefficients": coefs, "blocks": n_blocks}


# Rank-sum tests enumerate every split exactly up to this many; past it, the normal
# approximation with a tie correction (n of 20 per side and more).
EXACT_SPLITS = 200_000


def rank_sum_p(a, b) -> float:
    """Two-sided p-value of the Wilcoxon–Mann–Whitney rank-sum test of a against b (finite
    values only; NaN when a side is empty). Exact for small samples, so 3 against 3 can never
    reach 0.05 (its smallest p is 0.1): too few reps cannot claim a change."""
    from math import comb, erf, sqrt

    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    n_a, n_b = len(a), len(b)
    if not n_a or not n_b:
        return float("nan")
    pooled = np.concatenate([a, b])
    order = pooled.argsort(kind="mergesort")
    ranks = np.empty(len(pooled))
    ranks[order] = np.arange(1, len(pooled) + 1)
    for value in np.unique(pooled):  # ties share their mean rank
        tied = pooled == value
        ranks[tied] = ranks[tied].mean()
    observed = ranks[:n_a].sum()
    centre = n_a * (len(pooled) + 1) / 2
    if comb(len(pooled), n_a) <= EXACT_SPLITS:
        # every split's rank sum, counted by sum: ways[k, s] = splits of k items summing to s
        # (ranks doubled, so that ties' half ranks stay integers)
        ranks2 = np.rint(2 * ranks).astype(int)
        ways = np.zeros((n_a + 1, int(ranks2.sum()) + 1))
        ways[0, 0] = 1.0
        for r in ranks2:
            ways[1:, r:] = ways[1:, r:] + ways[:-1, : ways.shape[1] - r]
        sums = np.arange(ways.shape[1])
        far = np.abs(sums - 2 * centre) >= abs(2 * observed - 2 * centre) - 2e-9
        return float(ways[n_a, far].sum() / comb(len(pooled), n_a))
    counts = np.unique(pooled, return_counts=True)[1]
    n = len(pooled)
    var = n_a * n_b / 12 * ((n + 1) - (counts**3 - counts).sum() / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(observed - centre) - 0.5) / sqrt(var)
    return float(max(0.0, min(1.0, 2 * (1 - 0.5 * (1 + erf(z / sqrt(2)))))))


def holm(p_values, alpha: float) -> list[bool]:
    """Which of the p-values the Holm–Bonferroni procedure rejects at family-wise level alpha
    (NaN never): many metrics compared at once must not make one false claim likely."""
    p = [(v, i) for i, v in enumerate(p_values) if v == v]
    rejected = [False] * len(p_values)
    for k, (value, i) in enumerate(sorted(p)):
        if value > alpha / (len(p) - k):
            break
        rejected[i] = True
    return rejected


@functools.cache
def rank_sum_min_p(n_a: int, n_b: int) -> float:
    """The smallest p-value :func:`rank_sum_p` can give for n_a values against n_b (that of a
    complete separation); NaN when a side is empty. 3 against 3: 0.1; 8 against 8: 0.00016."""
    if n_a < 1 or n_b < 1:
        return float("nan")
    if math.comb(n_a + n_b, n_a) <= EXACT_SPLITS:  # the exact test: both extreme splits
        return min(1.0, 2 / math.comb(n_a + n_b, n_a))
    return rank_sum_p(np.arange(n_a), np.arange(n_a, n_a + n_b))


def holm_reachable(min_p_values, alpha: float) -> list[bool]:
    """Which tests Holm–Bonferroni could ever reject at level alpha, given each test's smallest
    reachable p-value. Holm rejects more as p-values fall, so a test it does not reject with
    every p-value at its smallest can never be rejected, whatever the data: too few samples
    to decide, rather than no change seen."""
    return holm(min_p_values, alpha)


def reps_to_decide(n_tests: int, alpha: float, limit: int = 1000) -> int:
    """The fewest reps a side for which a rank-sum test, first in a Holm–Bonferroni family of
    ``n_tests``, can reach level alpha at all (16 tests at 0.05: 6 a side)."""
    for n in range(2, limit + 1):
        if rank_sum_min_p(n, n) <= alpha / max(n_tests, 1):
            return n
    return limit


# Signed-rank tests enumerate the sign flips exactly (by the distribution of the rank sum) up to
# this many pairs; past it, the normal approximation with a tie correction.
EXACT_PAIRS = 200


def signed_rank_p(d) -> float:
    """Two-sided p-value of the Wilcoxon signed-rank test that the paired differences ``d`` are
    centred on 0 (finite values; zeros dropped, as Wilcoxon's test does; NaN when none is
    left). Exact up to :data:`EXACT_PAIRS` pairs, from the distribution of the positive rank
    sum over every sign flip: 8 pairs can reach 2/256 = 0.0078, 3 pairs never less than 0.25."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d) & (d != 0)]
    n = len(d)
    if not n:
        return float("nan")
    ranks2 = np.rint(2 * pd.Series(np.abs(d)).rank(method="average").to_numpy()).astype(int)
    observed = int(ranks2[d > 0].sum())  # doubled ranks: ties' halves stay integers
    total = int(ranks2.sum())
    if n <= EXACT_PAIRS:
        counts = np.zeros(total + 1)
        counts[0] = 1.0
        for r in ranks2:  # each (doubled, so at least 2) rank positive or not, independently
            counts[r:] += counts[:-r].copy()
        sums = np.arange(total + 1)
        far = np.abs(sums - total / 2) >= abs(observed - total / 2) - 1e-9
        return float(min(1.0, counts[far].sum() / counts.sum()))
    from math import erf, sqrt

    var = (ranks2.astype(float) ** 2).sum() / 4  # of the positive sum of doubled ranks
    z = (abs(observed - total / 2) - 1) / sqrt(var)  # continuity: one doubled half-rank
    return float(max(0.0, min(1.0, 2 * (1 - 0.5 * (1 + erf(z / sqrt(2)))))))


def signed_rank_min_p(n: int) -> float:
    """The smallest p-value :func:`signed_rank_p` can give for ``n`` pairs (every difference of
    one sign): 2 / 2**n, so 8 pairs 0.0078; NaN with no pair."""
    return float("nan") if n < 1 else min(1.0, 2 / 2**n)


def pairs_to_decide(n_tests: int, alpha: float, limit: int = 1000) -> int:
    """The fewest pairs for which a signed-rank test, first in a Holm–Bonferroni family of
    ``n_tests``, can reach level alpha at all (14 tests at 0.05: 9 pairs)."""
    for n in range(1, limit + 1):
        if signed_rank_min_p(n) <= alpha / max(n_tests, 1):
            return n
    return limit
