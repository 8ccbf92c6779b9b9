"""Simulated sequential experiments with a known median, for tests/test_sequential.py and
benchmarks/sequential_coverage.py: how often the interval at the stop holds the true median when
its own width decides the stop.

Each experiment measures R runs in blocks of ``block`` reps per run; after each block it looks,
and stops when the interval is within the target (and every run has ``min_reps``), when the
projection says the target is out of reach within ``max_reps``, or when another block would pass
``max_reps``. Two rules share that stop and differ in the interval:

- chosen: slotbench.core.sequential.look, the confidence-sequence hull;
- naive: a percentile bootstrap of the pooled median, re-checked at every look (what a fixed-n
  interval does when it decides the stop).

The per-rep ratios come from three distributions whose CDFs are known (CASES): a normal, a
lognormal and a bimodal mixture; their medians by bisection on the CDF.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from slotbench.core import sequential

R = 2  # runs
BLOCK = 3  # reps per run per look (the number of arms)
MIN_REPS = 6
MAX_REPS = 60
ALPHA = 0.05  # analysis.ci = 0.95
N_BOOT = 200  # the naive rule's resamples
BOOT_CHUNK = 250  # experiments resampled together (memory: chunk x N_BOOT x R x reps)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _bisect(cdf: Callable[[float], float], p: float, lo: float = 0.01,
            hi: float = 100.0) -> float:
    """The x in [lo, hi] with cdf(x) = p, to double precision."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# the bimodal case: 20% of reps at LOW times the rest, the rest N(MODE, MODE_SD)
MODE, MODE_SD, LOW, LOW_SHARE = 1.5, 0.03, 0.6, 0.2
LOG_SD = 0.25  # the lognormal case: exp(N(log 1.5, LOG_SD))


def _normal(rng, shape):
    return rng.normal(1.5, 0.1, shape)


def _normal_dist(x: float) -> float:
    return _normal_cdf((x - 1.5) / 0.1)


def _lognormal(rng, shape):
    return np.exp(rng.normal(math.log(1.5), LOG_SD, shape))


def _lognormal_dist(x: float) -> float:
    return _normal_cdf((math.log(x) - math.log(1.5)) / LOG_SD)


def _bimodal(rng, shape):
    main = rng.normal(MODE, MODE_SD, shape)
    return np.where(rng.random(shape) < LOW_SHARE, LOW * main, main)


def _bimodal_dist(x: float) -> float:
    """0.8 Φ((x - 1.5) / 0.03) + 0.2 Φ((x / 0.6 - 1.5) / 0.03)."""
    return ((1 - LOW_SHARE) * _normal_cdf((x - MODE) / MODE_SD)
            + LOW_SHARE * _normal_cdf((x / LOW - MODE) / MODE_SD))


@dataclass(frozen=True)
class Case:
    """A distribution of per-rep ratios (a sampler and its CDF) and the precision target that
    spreads the chosen rule's stops over several looks."""

    name: str
    draw: Callable
    cdf: Callable[[float], float]
    target_rel: float
    seed: int

    def quantile(self, p: float) -> float:
        return _bisect(self.cdf, p)

    @property
    def median(self) -> float:
        """The true median, by bisection on the CDF."""
        return self.quantile(0.5)

    def reps_needed(self, target_rel: float, limit: int = 10_000) -> int | None:
        """The fewest reps per run whose interval, with the true distribution's quantiles in
        place of the sample's, is within ``target_rel``: what the projection would say if it
        knew the distribution (None: not up to ``limit``)."""
        m = self.median
        for n in range(1, limit + 1):
            a, b = sequential.acceptable_set(n, ALPHA / R)
            if a >= 1 and (self.quantile((b + 1) / (n + 1))
                           - self.quantile(a / (n + 1))) / 2 / m <= target_rel:
                return n
        return None


CASES = (
    Case("normal", _normal, _normal_dist, 0.06, 11),
    Case("lognormal", _lognormal, _lognormal_dist, 0.2, 12),
    Case("bimodal", _bimodal, _bimodal_dist, 0.03, 13),
)


@dataclass
class Outcome:
    """Per experiment: the interval at the stop, the reps per run then, and why it stopped."""

    lo: np.ndarray
    hi: np.ndarray
    reps: np.ndarray
    decision: np.ndarray

    def coverage(self, median: float) -> float:
        return float(np.mean((self.lo <= median) & (median <= self.hi)))


def draws(case: Case, experiments: int) -> np.ndarray:
    """(experiments, R, MAX_REPS) per-rep values, seeded by the case: both rules see the same."""
    return case.draw(np.random.default_rng(case.seed), (experiments, R, MAX_REPS))


def looks() -> range:
    return range(BLOCK, MAX_REPS + 1, BLOCK)


def chosen(values: np.ndarray, target_rel: float) -> Outcome:
    """Each experiment stopped by slotbench.core.sequential.look."""
    n_exp = len(values)
    out = Outcome(np.empty(n_exp), np.empty(n_exp), np.zeros(n_exp, int), np.empty(n_exp, object))
    for e in range(n_exp):
        for n in looks():
            seen = sequential.look(values[e, :, :n], target_rel=target_rel, alpha=ALPHA,
                                   min_reps=MIN_REPS, max_reps=MAX_REPS, block=BLOCK)
            if seen.decision != "continue":
                out.lo[e], out.hi[e], out.reps[e], out.decision[e] = (
                    seen.lo, seen.hi, n, seen.decision)
                break
    return out


def bootstrap(pooled: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each row's 95% percentile-bootstrap interval of the median, N_BOOT resamples."""
    los, his = [], []
    for start in range(0, len(pooled), BOOT_CHUNK):
        rows = pooled[start:start + BOOT_CHUNK]
        idx = rng.integers(0, rows.shape[1], (len(rows), N_BOOT, rows.shape[1]))
        meds = np.median(np.take_along_axis(rows[:, None, :], idx, axis=2), axis=2)
        lo, hi = np.quantile(meds, [ALPHA / 2, 1 - ALPHA / 2], axis=1)
        los.append(lo)
        his.append(hi)
    return np.concatenate(los), np.concatenate(his)


def naive(values: np.ndarray, target_rel: float, seed: int) -> Outcome:
    """Each experiment stopped on its percentile-bootstrap interval of the pooled median, with
    the same stop as :func:`chosen` (the futility call from sequential.reps_to_reach)."""
    rng = np.random.default_rng(seed)
    n_exp = len(values)
    out = Outcome(np.empty(n_exp), np.empty(n_exp), np.zeros(n_exp, int), np.empty(n_exp, object))
    active = np.arange(n_exp)
    for n in looks():
        pooled = values[active, :, :n].reshape(len(active), -1)
        value = np.median(pooled, axis=1)
        lo, hi = bootstrap(pooled, rng)
        rel = (hi - lo) / 2 / np.abs(value)
        decision = np.full(len(active), "continue", dtype=object)
        decision[(rel <= target_rel) & (n >= MIN_REPS)] = "precise"
        if n + BLOCK > MAX_REPS:
            decision[decision == "continue"] = "max_reps"
        elif n >= MIN_REPS:
            for i in np.flatnonzero(decision == "continue"):
                needed = sequential.reps_to_reach(values[active[i], :, :n], target_rel, ALPHA)
                if needed is None or needed > MAX_REPS:
                    decision[i] = "futile"
        stop = decision != "continue"
        done = active[stop]
        out.lo[done], out.hi[done], out.reps[done] = lo[stop], hi[stop], n
        out.decision[done] = decision[stop]
        active = active[~stop]
        if not active.size:
            break
    return out


def summary(case: Case, rule: str, outcome: Outcome) -> dict:
    """One row of the benchmark's table."""
    n = len(outcome.lo)
    cover = outcome.coverage(case.median)
    row = {"case": case.name, "rule": rule, "experiments": n, "coverage": cover,
           "se": math.sqrt(cover * (1 - cover) / n),
           "median_stop": float(np.median(outcome.reps))}
    for d in ("precise", "futile", "max_reps"):
        row[d] = float(np.mean(outcome.decision == d))
    return row
