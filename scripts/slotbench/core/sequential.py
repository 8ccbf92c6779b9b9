"""When to stop measuring reps: an interval for a median that stays valid however often it is
looked at, and whether another block of reps can still make it narrow enough.

With ``reps: auto`` the reps come in blocks, and after each block every headline ratio's
interval is compared with the precision target; measuring stops once they all meet it. An
interval that decides its own stop must hold at whatever rep count the stop falls on, which an
interval made for one fixed count does not: re-checked at every look, it stops on the looks
where chance made it narrow, and misses the truth more often than its level says.

The interval here is a confidence sequence for the median (Howard & Ramdas, "Sequential
estimation of quantiles with applications to A/B-testing and best-arm identification",
Bernoulli 28(3), 2022): intervals for every n at once that all hold together with probability
at least 1 - alpha, so stopping on any of them keeps the level. For the true median m of a
continuous distribution, K_n = #{i <= n: x_i < m} is a Binomial(n, 1/2) walk. The beta-binomial
mixture M_n(k) = ∫ (q/½)^k ((1-q)/½)^(n-k) dBeta(q; 1, 1) = 2^n B(1+k, 1+n-k) is a nonnegative
martingale under that null, so by Ville's inequality (Ville, "Étude critique de la notion de
collectif", 1939) M_n(K_n) ever reaching 1/alpha has probability at most alpha. The k with
M_n(k) < 1/alpha form an integer interval [a_n, b_n] around n/2, and K_n >= a_n puts m above the
a_n-th smallest value, K_n <= b_n puts it at or below the (b_n + 1)-th: the interval at n is
[x_(a_n), x_(b_n + 1)] of the sorted values, a side unbounded while few reps allow every k
(n <= 8 at alpha 0.025). No assumption on the distribution beyond continuity: a bimodal or
heavy-tailed handful of reps is covered as well as a normal one.

Each run (a separate start of the server) gets its own sequence at alpha / R (Bonferroni over
the R runs), and the interval quoted is their hull. Run-to-run disagreement thereby widens the
interval instead of averaging away: the hull holds every run's median, and with them the median
of the runs pooled with equal weight, with probability at least 1 - alpha. The value quoted is
the median of all runs' values pooled.

Why not the alternatives:
- A percentile bootstrap of the median, re-checked at every look, is an interval for one fixed
  count: it is narrow early, so it stops at the first looks it may, where a dozen values cover
  less than its level, and the stops its narrowness chose cover less still
  (tests/test_sequential.py and benchmarks/RESULTS.md measure by how much).
- A confidence sequence for the mean of the log ratios (Howard, Ramdas, McAuliffe & Sekhon,
  "Time-uniform, nonparametric, nonasymptotic confidence sequences", Annals of Statistics
  49(2), 2021) needs a bound or a sub-Gaussian scale for the log ratios that nothing here knows,
  and it estimates the mean, not the median the report quotes.
- A group-sequential boundary (Pocock, Biometrika 1977; O'Brien & Fleming, Biometrics 1979)
  rests on a normal approximation that a bimodal or heavy-tailed handful of reps breaks, and
  fixes the number of looks in advance.
- The ``confseq`` package implements Howard & Ramdas, but its last release (0.0.11, 2023-01)
  ships wheels for CPython 3.8 to 3.10 only: on the 3.11 this project runs it compiles C++
  against the Boost headers. The boundary is the few lines below, tested.

Whether more reps can help is a projection: each run's current spread carried to a larger n
(:func:`projected_rel`, :func:`reps_to_reach`). It is optimistic twice, so that a target it
calls out of reach is out of reach: it ignores the runs' disagreement, and it reads the spread
of a handful of reps in its favour (each quantile level moved OPTIMISM_Z standard errors toward
the middle; benchmarks/RESULTS.md counts the reachable targets it still gives up on).
:func:`look` judges one metric; combining the metrics' looks into one stop is the caller's.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from slotbench.core import stats

# What one look decides for one metric.
DECISIONS = ("continue", "precise", "futile", "max_reps")
# Projections stop here by default: a target needing more reps per run is out of reach.
REACH_LIMIT = 10_000


def log_mixture(n: int, k: int) -> float:
    """log M_n(k) = log(2^n B(1+k, 1+n-k)): the beta-binomial mixture's evidence against the
    median when k of n values lie below it."""
    return n * math.log(2.0) + math.lgamma(1 + k) + math.lgamma(1 + n - k) - math.lgamma(2 + n)


@functools.cache
def acceptable_set(n: int, alpha: float) -> tuple[int, int]:
    """[a_n, b_n]: the counts k of values below the median that keep M_n(k) < 1/alpha.

    M_n(k) falls from k = 0 to the middle (each step by (n - k) / (k + 1)) and is symmetric in
    k and n - k, so a_n is found by bisection and b_n = n - a_n. The middle always qualifies:
    the smallest M_n(k) is at most 1, the martingale's mean.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if n < 0:
        raise ValueError(f"n must be at least 0, got {n}")
    level = math.log(1.0 / alpha)
    lo, hi = 0, n // 2  # the smallest k in [lo, hi] with log_mixture < level
    while lo < hi:
        mid = (lo + hi) // 2
        if log_mixture(n, mid) < level:
            hi = mid
        else:
            lo = mid + 1
    return lo, n - lo


def _clean(values) -> np.ndarray:
    """The values as floats, NaNs dropped, sorted."""
    arr = np.asarray(values, dtype=float).ravel()
    return np.sort(arr[~np.isnan(arr)])


def run_interval(values, alpha: float) -> tuple[float, float]:
    """One run's confidence sequence for its median at level alpha, at its current count:
    [x_(a_n), x_(b_n + 1)] of the sorted values (NaNs dropped), -inf / +inf where the order
    statistic falls off the sample."""
    return _sorted_interval(_clean(values), alpha)


def _sorted_interval(x: np.ndarray, alpha: float) -> tuple[float, float]:
    """:func:`run_interval` of values already sorted, NaNs dropped."""
    n = len(x)
    a, b = acceptable_set(n, alpha)
    lo = float(x[a - 1]) if a >= 1 else -math.inf
    hi = float(x[b]) if b + 1 <= n else math.inf
    return lo, hi


def _pooled_median(runs: list[np.ndarray]) -> float:
    """The median of every run's finite values pooled; NaN when there is none."""
    return stats.median(np.concatenate(runs)) if runs else math.nan


def interval(runs_values, alpha: float) -> tuple[float, float, float]:
    """(value, lo, hi) of the runs together: the pooled median, and the hull of each run's
    :func:`run_interval` at alpha / R (R runs, however many values each has)."""
    return _hull([_clean(v) for v in runs_values], alpha)


def _hull(runs: list[np.ndarray], alpha: float) -> tuple[float, float, float]:
    """:func:`interval` of runs already sorted, NaNs dropped."""
    if not runs:
        return math.nan, -math.inf, math.inf
    ends = [_sorted_interval(x, alpha / len(runs)) for x in runs]
    return (_pooled_median(runs), min(lo for lo, _ in ends), max(hi for _, hi in ends))


# How far the projection moves each quantile level toward the middle: this many standard errors
# of a quantile read from the reps so far (sqrt(p (1 - p) / m) of m values), so that a spread
# read from a handful of reps is read optimistically, and futility is said only when even that
# reading falls short (one-sided, about 93%). 1.5 from the simulation in
# benchmarks/sequential_coverage.py: at 1 a bimodal target reachable within max_reps was called
# futile in 3 experiments of 10, at 2 a target four times out of reach was called so in 1 of 4.
OPTIMISM_Z = 1.5


@functools.cache
def _levels(alpha: float, size: int) -> np.ndarray:
    """Where the ends of the interval at n fall, as quantile levels of the distribution, for
    n = 0 .. size - 1: the a_n-th and (b_n + 1)-th of n values lie on average at the levels
    a_n / (n + 1) and (b_n + 1) / (n + 1); a level of 0 or 1 marks an unbounded end (a_n = 0)."""
    rows = [[0.0, 1.0]]
    for n in range(1, size):
        a, b = acceptable_set(n, alpha)
        rows.append([a / (n + 1), (b + 1) / (n + 1)] if a >= 1 else [0.0, 1.0])
    return np.array(rows).T.copy()


def _projected_widths(x: np.ndarray, ns: np.ndarray, alpha: float) -> np.ndarray:
    """One run's projected interval width at each n of ``ns`` (consecutive): its empirical
    quantiles (linear interpolation, as np.quantile) at the levels of :func:`_levels`, each moved
    OPTIMISM_Z standard errors toward the middle (none past it: width 0); inf where an end is
    unbounded or the run has no values."""
    first, last = int(ns[0]), int(ns[-1])
    table = _levels(alpha, 1 << max(last, 1).bit_length())  # sizes doubling: a few tables
    low, high = table[0, first:last + 1], table[1, first:last + 1]
    widths = np.full(len(ns), math.inf)
    inside = (low > 0) & (high < 1)
    if len(x) and inside.any():
        m = len(x)
        low = low + OPTIMISM_Z * np.sqrt(low * (1 - low) / m)
        high = high - OPTIMISM_Z * np.sqrt(high * (1 - high) / m)
        low, high = np.minimum(low, 0.5), np.maximum(high, 0.5)
        # np.quantile's default: the value at virtual index q * (m - 1), linearly between the
        # order statistics around it
        grid = np.arange(m)
        w = (np.interp(high[inside] * (m - 1), grid, x)
             - np.interp(low[inside] * (m - 1), grid, x))
        widths[inside] = np.where(np.isnan(w), math.inf, w)
    return widths


def _projected_rels(runs: list[np.ndarray], ns: np.ndarray, alpha: float,
                    value: float) -> np.ndarray:
    """:func:`projected_rel` at each n of ``ns``, for runs already cleaned and their pooled
    median ``value``."""
    widths = np.max([_projected_widths(x, ns, alpha / len(runs)) for x in runs], axis=0)
    if not value or not math.isfinite(value):
        return np.full(len(ns), math.nan)
    return widths / 2.0 / abs(value)


def projected_rel(runs_values, n: int, alpha: float) -> float:
    """The relative half-width to expect at n reps per run if each run's spread stays as it is,
    read optimistically.

    Each run's interval at n (its acceptable set at alpha / R, read as the quantile levels where
    its ends fall, a_n / (n + 1) and (b_n + 1) / (n + 1), each moved OPTIMISM_Z standard errors
    toward the middle, of the run's values so far) is centred on the pooled median, and their
    hull is the widest of them. It ignores how far the runs' medians now disagree, which may be
    chance, and reads the spread from few reps in its favour, so that a target it cannot reach
    is out of reach. inf while an end is unbounded (a_n = 0); NaN for a zero or missing value.
    """
    runs = [_clean(v) for v in runs_values]
    if not runs or n < 1:
        return math.inf
    ns = np.array([n], dtype=float)
    return float(_projected_rels(runs, ns, alpha, _pooled_median(runs))[0])


def reps_to_reach(runs_values, target_rel: float, alpha: float,
                  limit: int = REACH_LIMIT) -> int | None:
    """The fewest reps per run, from the current count (the smallest run's) up, whose
    :func:`projected_rel` is within ``target_rel``; None when none up to ``limit`` is.

    Every n is tried in turn (the projection need not shrink at every step), a stretch at a
    time, the stretches doubling: a reachable target is found in the first ones.
    """
    runs = [_clean(v) for v in runs_values]
    return _reach(runs, target_rel, alpha, limit, _pooled_median(runs))


def _reach(runs: list[np.ndarray], target_rel: float, alpha: float, limit: int,
           value: float) -> int | None:
    """:func:`reps_to_reach` of runs already sorted, NaNs dropped, with pooled median
    ``value``."""
    start = min((len(x) for x in runs), default=0)
    if start < 1:
        return None
    step = 64
    while start <= limit:
        ns = np.arange(start, min(start + step, limit + 1), dtype=float)
        hits = np.flatnonzero(_projected_rels(runs, ns, alpha, value) <= target_rel)
        if hits.size:
            return int(ns[hits[0]])
        start, step = int(ns[-1]) + 1, step * 2
    return None


@dataclass(frozen=True)
class Look:
    """One metric at one look: its value and interval so far, how precise that is, the reps per
    run the projection says the target needs (None: not within the limit), and the decision
    (one of :data:`DECISIONS`)."""

    value: float
    lo: float
    hi: float
    rel: float
    reps_per_run: int
    reps_needed: int | None
    decision: str


def look(runs_values, *, target_rel: float, alpha: float, min_reps: int, max_reps: int,
         block: int, limit: int = REACH_LIMIT) -> Look:
    """Judge one metric after a block: ``runs_values`` holds each run's values so far (one per
    rep; NaNs dropped), ``alpha`` is 1 - the interval's level (analysis.ci).

    "precise" when the interval is within ``target_rel`` and every run has ``min_reps``
    values; else "max_reps" when another ``block`` of reps would pass ``max_reps`` per run; else
    "futile" when ``min_reps`` are in and the projection cannot reach the target within
    ``max_reps``; else "continue".
    """
    if target_rel <= 0:
        raise ValueError(f"target_rel must be positive, got {target_rel}")
    runs = [_clean(v) for v in runs_values]
    value, lo, hi = _hull(runs, alpha)
    rel = stats.relative_half_width(value, lo, hi)
    per_run = min((len(x) for x in runs), default=0)
    needed = _reach(runs, target_rel, alpha, limit, value)
    if rel <= target_rel and per_run >= min_reps:
        decision = "precise"
    elif per_run + block > max_reps:
        decision = "max_reps"
    elif per_run >= min_reps and (needed is None or needed > max_reps):
        decision = "futile"
    else:
        decision = "continue"
    return Look(value, lo, hi, rel, per_run, needed, decision)
