"""benchmarks/synthetic_raw.py counts a rep's requests over its cells: a sweep whose wide arms
run several rounds gets the reps the requested total needs, not the first cell's count times
the cells."""

from __future__ import annotations

import importlib.util

from e2e_helpers import REPO

# a benchmark is a script, not a package: loaded from its file, as `python benchmarks/…` runs it
_spec = importlib.util.spec_from_file_location("synthetic_raw",
                                               REPO / "benchmarks/synthetic_raw.py")
synthetic_raw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic_raw)


def rep(per_arm: dict[int, int]) -> dict:
    return {"cells": [{"arm": arm, "requests": [{}] * n} for arm, n in per_arm.items()]}


def test_a_wide_sweep_needs_the_reps_its_requests_say():
    wide = rep({1: 8, 16: 32, 64: 128, 256: 512})  # 680 requests, the first cell 8
    assert synthetic_raw.requests_in(wide) == 680
    reps = synthetic_raw.reps_for({("pacer", "run1"): [wide] * 4}, 1_000_000)
    assert reps == 1471 and 1471 * 680 >= 1_000_000 > 1470 * 680


def test_the_default_shape_and_source_reps_that_differ():
    default = rep({1: 4, 2: 4, 4: 4})
    runs = {("embedded", "run1"): [default], ("embedded", "run2"): [default]}
    assert synthetic_raw.reps_for(runs, 100_000) == 4167  # 2 × 4,167 × 12 = 100,008
    # source reps are cycled: 12, 24, 12, 24 ... requests
    cycled = {("t", "run1"): [default, rep({1: 4, 2: 8, 4: 12})]}
    assert synthetic_raw.reps_for(cycled, 36) == 2 and synthetic_raw.reps_for(cycled, 37) == 3
