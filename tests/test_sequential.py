"""When to stop measuring reps (slotbench.core.sequential): the boundary against exact
arithmetic, the interval's order statistics, the projection, the four decisions, Ville's
guarantee, and the coverage at the stop against a bootstrap re-checked at every look.

The simulations are seeded, so every number here is the same on every run; together they take a
few seconds (tests/sequential_sim.py; benchmarks/sequential_coverage.py runs them larger).
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

import sequential_sim as sim
from slotbench.core import sequential

INF = math.inf


def exact_set(n: int, alpha: float) -> list[int]:
    """The k with M_n(k) < 1/alpha in exact arithmetic: B(1+k, 1+n-k) = k!(n-k)!/(n+1)!, so
    M_n(k) = 2^n / ((n+1) C(n, k))."""
    bound = 1 / Fraction(alpha)
    return [k for k in range(n + 1) if Fraction(2**n, (n + 1) * math.comb(n, k)) < bound]


@pytest.mark.parametrize("alpha", [0.05, 0.025, 0.01, 0.001])
def test_the_acceptable_set_is_the_exact_one(alpha):
    """Bisection on log M_n(k) in floating point gives the set exact fractions give, an
    integer interval symmetric about n/2, for every n to 400."""
    for n in range(0, 401):
        ks = exact_set(n, alpha)
        a, b = sequential.acceptable_set(n, alpha)
        assert ks == list(range(a, b + 1)), n
        assert a + b == n


def test_few_reps_allow_every_count():
    """At alpha 0.025 (0.05 over two runs) nothing is excluded up to 8 reps: the mixture's
    largest value, 2^n / (n+1), first reaches 40 at n = 9 (512 / 10), so the interval stays
    unbounded on both sides until then."""
    assert [n for n in range(1, 20) if Fraction(2**n, n + 1) < 40] == list(range(1, 9))
    for n in range(0, 9):
        assert sequential.acceptable_set(n, 0.025) == (0, n)
    assert sequential.acceptable_set(9, 0.025) == (1, 8)
    x = np.arange(8.0)
    assert sequential.run_interval(x, 0.025) == (-INF, INF)
    assert sequential.run_interval(np.arange(9.0), 0.025) == (0.0, 8.0)


def test_the_mixture_is_the_beta_integral():
    """log M_n(k) is the integral it stands for: ∫ (2q)^k (2(1-q))^(n-k) dq over the uniform
    prior, summed here by the midpoint rule."""
    q = (np.arange(200_000) + 0.5) / 200_000
    for n, k in [(1, 0), (5, 2), (10, 0), (20, 7), (40, 20)]:
        integral = np.mean((2 * q) ** k * (2 * (1 - q)) ** (n - k))
        assert math.exp(sequential.log_mixture(n, k)) == pytest.approx(integral, rel=1e-6)


def test_the_interval_is_the_claimed_order_statistics():
    rng = np.random.default_rng(1)
    for n in (9, 10, 25, 60, 201):
        x = rng.normal(size=n)
        a, b = sequential.acceptable_set(n, 0.025)
        s = np.sort(x)
        assert sequential.run_interval(x, 0.025) == (s[a - 1], s[b])  # x_(a), x_(b+1)
    # at n = 30, alpha = 0.05: M_30(6) = 2^30 / (31 C(30, 6)) = 58.3 >= 20, M_30(7) = 17.0 < 20
    assert exact_set(30, 0.05)[0] == 7 and sequential.acceptable_set(30, 0.05) == (7, 23)
    s = rng.permutation(np.arange(30.0))
    assert sequential.run_interval(s, 0.05) == (6.0, 23.0)  # x_(7), x_(24) of 0..29


def test_the_interval_is_symmetric():
    """Mirroring the values mirrors the interval, because b_n = n - a_n."""
    rng = np.random.default_rng(2)
    runs = [rng.lognormal(0, 0.5, 40), rng.lognormal(0, 0.5, 33)]
    value, lo, hi = sequential.interval(runs, 0.05)
    m_value, m_lo, m_hi = sequential.interval([-r for r in runs], 0.05)
    assert (m_value, m_lo, m_hi) == (-value, -hi, -lo)


def test_nans_are_dropped_before_anything():
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.5, 0.1, 20), rng.normal(1.5, 0.1, 25)
    holed = [np.insert(a, [0, 5, 5], np.nan), np.append(b, [np.nan] * 4)]
    assert sequential.interval(holed, 0.05) == sequential.interval([a, b], 0.05)
    kw = dict(target_rel=0.05, alpha=0.05, min_reps=6, max_reps=60, block=3)
    assert sequential.look(holed, **kw) == sequential.look([a, b], **kw)
    assert sequential.look(holed, **kw).reps_per_run == 20
    assert sequential.projected_rel(holed, 40, 0.05) == sequential.projected_rel([a, b], 40, 0.05)


def test_the_hull_widens_when_runs_disagree():
    """Each run's interval at alpha / R, and their hull: a run that sits apart widens the
    interval instead of being averaged away; the value is the pooled median."""
    rng = np.random.default_rng(4)
    a, b = rng.normal(1.5, 0.05, 40), rng.normal(1.5, 0.05, 40)
    value, lo, hi = sequential.interval([a, b], 0.05)
    assert (lo, hi) == (min(sequential.run_interval(a, 0.025)[0],
                            sequential.run_interval(b, 0.025)[0]),
                        max(sequential.run_interval(a, 0.025)[1],
                            sequential.run_interval(b, 0.025)[1]))
    assert value == np.median(np.concatenate([a, b]))
    _, lo2, hi2 = sequential.interval([a, b + 0.3], 0.05)
    assert lo2 == lo and hi2 >= hi + 0.25
    # one run alone at the full alpha is narrower than the same run inside a pair (alpha / 2)
    one = sequential.interval([a], 0.05)
    assert one[2] - one[1] <= sequential.run_interval(a, 0.025)[1] - sequential.run_interval(
        a, 0.025)[0]
    # runs of different lengths: each at its own n (12 values: x_(1) to x_(12), the range)
    short = b[:12]
    assert sequential.run_interval(short, 0.025) == (short.min(), short.max())
    value, lo, hi = sequential.interval([a, short], 0.05)
    ends = [sequential.run_interval(a, 0.025), (short.min(), short.max())]
    assert (lo, hi) == (min(e[0] for e in ends), max(e[1] for e in ends))
    assert value == np.median(np.concatenate([a, short]))


def test_rel_is_inf_when_a_side_is_unbounded_and_nan_without_a_value():
    kw = dict(target_rel=0.05, alpha=0.05, min_reps=6, max_reps=60, block=3)
    few = sequential.look([[1.4, 1.5, 1.6], [1.5, 1.55, 1.45]], **kw)
    assert (few.lo, few.hi, few.rel) == (-INF, INF, INF)
    assert few.value == 1.5 and few.reps_per_run == 3
    # a relative width of a zero value is no number, and no count of reps makes it one
    zero = sequential.look([np.zeros(30), np.zeros(30)], **kw)
    assert zero.value == 0 and math.isnan(zero.rel) and zero.reps_needed is None
    assert zero.decision == "futile"
    empty = sequential.look([[np.nan], []], **kw)
    assert math.isnan(empty.value) and empty.reps_per_run == 0 and empty.reps_needed is None


def projected_by_hand(runs, n, alpha):
    """projected_rel's definition with np.quantile, run by run: the ends' levels a_n / (n + 1)
    and (b_n + 1) / (n + 1), each moved OPTIMISM_Z standard errors toward the middle."""
    widths = []
    for x in runs:
        a, b = sequential.acceptable_set(n, alpha / len(runs))
        if a == 0:
            return INF
        z, m = sequential.OPTIMISM_Z, len(x)
        low, high = a / (n + 1), (b + 1) / (n + 1)
        low = min(0.5, low + z * np.sqrt(low * (1 - low) / m))
        high = max(0.5, high - z * np.sqrt(high * (1 - high) / m))
        lo, hi = np.quantile(x, [low, high])
        widths.append(hi - lo)
    return max(widths) / 2 / abs(np.median(np.concatenate(runs)))


def test_the_projection_is_its_definition_and_shrinks_with_n():
    rng = np.random.default_rng(5)
    runs = [rng.normal(1.5, 0.1, 12), rng.normal(1.6, 0.1, 15)]
    for n in (1, 8, 9, 10, 12, 30, 57, 200, 1000):
        assert sequential.projected_rel(runs, n, 0.05) == pytest.approx(
            projected_by_hand(runs, n, 0.05), rel=1e-12, abs=0)
    seq = [sequential.projected_rel(runs, n, 0.05) for n in (9, 13, 20, 40, 80, 160, 320)]
    assert all(later < earlier or later == 0 for earlier, later in zip(seq, seq[1:])), seq
    assert seq[-1] == 0  # the levels met in the middle: 12 values cannot tell so narrow apart
    # unbounded exactly while the interval itself is (a_n = 0: n <= 8 at 0.025)
    assert [n for n in range(1, 30) if sequential.projected_rel(runs, n, 0.05) == INF] == list(
        range(1, 9))
    # optimistic: read from these 12 and 15 values, the projection at their own n is narrower
    # than the interval they give
    value, lo, hi = sequential.interval(runs, 0.05)
    assert sequential.projected_rel(runs, 12, 0.05) < (hi - lo) / 2 / value
    # runs whose medians disagree by 0.1, which the projection ignores: centred on the pooled
    # median, the projection at the current n is narrower than the interval itself
    runs = [rng.normal(1.5, 0.05, 30), rng.normal(1.6, 0.05, 30)]
    value, lo, hi = sequential.interval(runs, 0.05)
    assert sequential.projected_rel(runs, 30, 0.05) < 0.6 * (hi - lo) / 2 / value


def test_reps_to_reach_steps_through_every_n():
    """The first n whose projection meets the target, found a stretch at a time: the same as
    trying every n in turn, across the stretches' edges too."""
    rng = np.random.default_rng(6)
    runs = [rng.normal(1.5, 0.1, 300), rng.normal(1.5, 0.1, 310)]  # many: a small optimism
    rels = {n: sequential.projected_rel(runs, n, 0.05) for n in range(300, 3000)}
    # stretches of 64, 128, ... from the current 300; the targets met first at a stretch's
    # first n catch a step past it
    edges = [300 + 64 * (2 ** k - 1) for k in range(1, 5)]
    targets = [0.2, 0.04, 0.03, 0.02] + [rels[n] for n in edges] + [rels[n] - 1e-9 for n in edges]
    firsts = []
    for target in targets:
        expected = next((n for n, r in rels.items() if r <= target), None)
        assert sequential.reps_to_reach(runs, target, 0.05, limit=2999) == expected, target
        firsts.append(expected)
    assert len(set(firsts)) >= 5 and max(f for f in firsts if f) > edges[0]
    assert sequential.reps_to_reach(runs, 0.0001, 0.05, limit=1500) is None  # not by the limit
    few = [rng.normal(1.5, 0.1, 3), rng.normal(1.5, 0.1, 4)]
    assert sequential.reps_to_reach(few, 10.0, 0.05) == 9  # the first n with bounded ends
    longer = [rng.normal(1.5, 0.1, 20), rng.normal(1.5, 0.1, 25)]
    assert sequential.reps_to_reach(longer, 10.0, 0.05) == 20  # the current n already meets it
    assert sequential.reps_to_reach([[], [1.5]], 0.05, 0.05) is None


def test_each_decision():
    rng = np.random.default_rng(7)
    kw = dict(alpha=0.05, min_reps=6, block=3)
    tight = [rng.normal(1.5, 0.01, 30), rng.normal(1.5, 0.01, 30)]
    precise = sequential.look(tight, target_rel=0.05, max_reps=60, **kw)
    assert precise.decision == "precise" and precise.rel <= 0.05
    assert precise.reps_needed <= 30 and precise.lo < 1.5 < precise.hi
    # the same runs with too few reps for min_reps: never precise
    assert sequential.look(tight, target_rel=0.05, max_reps=60, **kw | {"min_reps": 31}
                           ).decision == "continue"
    # another block would pass max_reps: stop there even though the target is not met
    capped = sequential.look(tight, target_rel=0.0001, max_reps=32, **kw)
    assert capped.decision == "max_reps" and capped.rel > 0.0001
    # 30 + 3 = 33: one more block still fits into 33, and the projection says it can help
    # (optimistic: it reaches ±0.5% already at the current 30, where the interval is ±0.58%)
    fits = sequential.look(tight, target_rel=0.005, max_reps=33, **kw)
    assert fits.rel > 0.005 and fits.reps_needed == 30 and fits.decision == "continue"
    # a spread the target cannot meet within max_reps per run
    # (30 reps a run: a handful would be read so optimistically that nothing is out of reach)
    wide = [rng.normal(1.5, 0.5, 30), rng.normal(1.5, 0.5, 30)]
    futile = sequential.look(wide, target_rel=0.05, max_reps=60, **kw)
    assert futile.decision == "futile" and futile.reps_needed > 60
    assert sequential.look([[0.0] * 9, [0.0] * 9], target_rel=0.05, max_reps=60, **kw
                           ).reps_needed is None  # no relative width of a zero value
    # the same spread with room for the reps it needs: carry on
    going = sequential.look(wide, target_rel=0.05, max_reps=1000, **kw)
    assert going.decision == "continue" and 60 < going.reps_needed <= 1000
    # before min_reps nothing is futile, however far the target
    early = sequential.look([w[:3] for w in wide], target_rel=0.05, max_reps=60, **kw)
    assert early.decision == "continue"
    assert set(sequential.DECISIONS) == {"continue", "precise", "futile", "max_reps"}
    with pytest.raises(ValueError, match="alpha"):
        sequential.acceptable_set(10, 1.5)


def test_villes_guarantee_holds_for_binomial_walks():
    """K_n, the values below the median among the first n, is a Binomial(n, 1/2) walk; the
    share of 20,000 walks that ever leave [a_n, b_n] up to n = 200 stays within alpha."""
    rng = np.random.default_rng(8)
    walks = 20_000
    k = np.cumsum(rng.random((walks, 200)) < 0.5, axis=1)
    for alpha in (0.05, 0.025):
        a, b = np.array([sequential.acceptable_set(n, alpha) for n in range(1, 201)]).T
        left = ((k < a) | (k > b)).any(axis=1).mean()
        assert left <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / walks), (alpha, left)
        assert left > 0  # the boundary is reached at all: the test can fail


def test_the_true_medians():
    """The simulations' truths: bisection on each CDF, against the closed forms where there
    are some and a million draws of the mixture."""
    normal, lognormal, bimodal = sim.CASES
    assert normal.median == pytest.approx(1.5, abs=1e-12)
    assert lognormal.median == pytest.approx(1.5, abs=1e-12)
    assert bimodal.cdf(bimodal.median) == pytest.approx(0.5, abs=1e-12)
    # 0.2 of the mass sits near 0.9, so the median is the main mode's 0.375 quantile:
    # 1.5 + 0.03 z with Φ(z) = 0.375, z = -0.3186
    assert bimodal.median == pytest.approx(1.5 - 0.03 * 0.318639, abs=1e-6)
    draws = bimodal.draw(np.random.default_rng(9), 1_000_000)
    assert np.median(draws) == pytest.approx(bimodal.median, abs=5e-4)


EXPERIMENTS = 2000


@pytest.mark.parametrize("case", sim.CASES, ids=lambda c: c.name)
def test_coverage_at_the_stop(case):
    """2,000 sequential experiments per distribution, two runs, blocks of 3 reps, 6 to 60 reps
    per run, the stop decided by the interval's own width: the confidence sequence covers the
    true median at least 95% of the time (less 3 Monte Carlo standard errors); a percentile
    bootstrap re-checked at every look, with the same stop, covers clearly less. The target is
    one that spreads the stops over several looks, so the width does decide them."""
    values = sim.draws(case, EXPERIMENTS)
    se = math.sqrt(0.95 * 0.05 / EXPERIMENTS)
    chosen = sim.chosen(values, case.target_rel)
    stops = Counter(chosen.reps.tolist())
    assert len(stops) >= 3 and max(stops.values()) <= 2 / 3 * EXPERIMENTS, stops
    assert np.mean(chosen.decision == "precise") >= 0.2
    assert chosen.coverage(case.median) >= 0.95 - 3 * se
    # the stops the width decided hold too (a futile stop at 6 reps is unbounded, so covers)
    precise = chosen.decision == "precise"
    covered = (chosen.lo <= case.median) & (case.median <= chosen.hi)
    assert covered[precise].mean() >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / precise.sum())
    naive = sim.naive(values, case.target_rel, seed=case.seed + 100)
    assert naive.coverage(case.median) < 0.95 - 3 * se, naive.coverage(case.median)
