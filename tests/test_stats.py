"""The statistics every stage quotes, each written once (slotbench.core.stats): where a formula
moved here from another module, its numbers are pinned to what that module gave."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slotbench.core import stats


def test_a_cells_median_and_quantiles_in_plain_python_match_the_frame_statistics():
    """consolidation takes cell_median and cell_quantile for every cell (plain Python, cheap per
    call); they give stats.median's and stats.quantile's numbers over the finite values."""
    rng = np.random.default_rng(0)
    for n in range(40):
        finite = list(rng.lognormal(0, 2, n))
        values = finite + [None, float("nan"), float("inf")][: n % 4]
        assert stats.cell_median(values) == pytest.approx(stats.median(finite), nan_ok=True)
        for q in (0.5, 0.95, 0.99):
            expected = stats.quantile(finite, q)
            assert stats.cell_quantile(values, q) == pytest.approx(expected, rel=1e-12, nan_ok=True)
    # pinned: consolidate's median (the mean of the middle two) and openloop's quantile
    assert stats.cell_median([0.1, 0.7, None, float("nan")]) == 0.39999999999999997
    assert stats.cell_quantile([0.1, 0.7, 0.3, float("inf")], 0.95) == 0.6599999999999999
    assert math.isnan(stats.cell_median([])) and math.isnan(stats.cell_quantile([None], 0.5))


def test_the_difference_of_two_medians_and_its_bootstrap_interval():
    """compare's B − A: the medians' difference over each side's finite values, each side
    resampled on its own; pinned to what compare computed before the formula moved here."""
    a = [1.0, 1.2, 0.9, 1.1, float("nan"), 1.05]
    b = [1.5, 1.4, float("inf"), 1.6, 1.45]
    diff, lo, hi = stats.median_diff_ci(a, b, 500, 0.95, 7)
    assert (diff, lo, hi) == (0.42500000000000004, 0.27500000000000013, 0.6)
    assert diff == stats.median(b) - stats.median(a) and lo <= diff <= hi
    assert stats.median_diff_ci(a, b, 500, 0.95, 7) == (diff, lo, hi)  # the seed fixes it
    assert all(math.isnan(v) for v in stats.median_diff_ci([], b, 500, 0.95, 7))
