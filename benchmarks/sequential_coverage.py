"""Coverage under optional stopping: how often the interval at the stop holds the true median
when the interval's own width decides the stop (``reps: auto``), for the confidence-sequence
hull of slotbench.core.sequential and for a percentile bootstrap re-checked at every look.

The simulation is tests/sequential_sim.py's (the one tests/test_sequential.py runs with 2,000
experiments a case): 2 runs, blocks of 3 reps per run, 6 to 60 reps per run, ratios from a
normal, a lognormal and a bimodal mixture. Besides the table of both rules it prints how many
reps each target needs with the true distribution's quantiles (what the futility projection
estimates from the reps so far), how many of the chosen rule's stops were futility calls at the
first look allowed to make one, the bootstrap's coverage at a fixed count (no stopping), and the
naive rule at half the target, where its narrow intervals are rarer and so chosen by chance.

    .venv/bin/python benchmarks/sequential_coverage.py [--experiments N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it: the simulation's helper
sys.path.insert(0, str(REPO / "scripts"))

import sequential_sim as sim  # noqa: E402

FIXED = (6, 60)  # reps per run at which the bootstrap's fixed-count coverage is shown
TIGHTER = 0.5  # the naive rule again at this share of each case's target


def _covered(outcome: sim.Outcome, median: float) -> np.ndarray:
    return (outcome.lo <= median) & (median <= outcome.hi)


def rows(experiments: int) -> tuple[list[dict], list[dict]]:
    """The table's rows (each case, each rule) and each case's figures beside them."""
    table, extra = [], []
    for case in sim.CASES:
        values = sim.draws(case, experiments)
        naive = sim.naive(values, case.target_rel, seed=case.seed + 100)
        chosen = sim.chosen(values, case.target_rel)
        for rule, outcome in (("naive", naive), ("chosen", chosen)):
            row = sim.summary(case, rule, outcome)
            precise, covered = outcome.decision == "precise", _covered(outcome, case.median)
            row["target_rel"] = case.target_rel
            row["misses"] = int((~covered).sum())
            row["coverage_precise"] = float(covered[precise].mean()) if precise.any() else None
            table.append(row)
        tight = sim.naive(values, TIGHTER * case.target_rel, seed=case.seed + 300)
        tight_precise = tight.decision == "precise"
        rng = np.random.default_rng(case.seed + 200)
        fixed = {}
        for n in FIXED:
            lo, hi = sim.bootstrap(values[:, :, :n].reshape(experiments, -1), rng)
            fixed[n] = float(np.mean((lo <= case.median) & (case.median <= hi)))
        extra.append({
            "case": case.name, "median": case.median, "target_rel": case.target_rel,
            "true_reps_needed": case.reps_needed(case.target_rel),
            "chosen_futile": float(np.mean(chosen.decision == "futile")),
            "chosen_futile_at_min_reps": float(np.mean((chosen.decision == "futile")
                                                       & (chosen.reps == sim.MIN_REPS))),
            "bootstrap_fixed": fixed,
            "naive_tighter": {
                "target_rel": TIGHTER * case.target_rel,
                "coverage": tight.coverage(case.median),
                "precise": float(tight_precise.mean()),
                "coverage_precise": float(_covered(tight, case.median)[tight_precise].mean())},
        })
    return table, extra


def markdown(table: list[dict], extra: list[dict]) -> str:
    pct = "{:.1%}".format
    lines = ["| case | target | rule | experiments | coverage | MC SE | misses "
             "| coverage, precise stops | median stop (reps/run) | precise | futile | max_reps |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in table:
        cp = "—" if r["coverage_precise"] is None else f"{r['coverage_precise']:.4f}"
        lines.append(f"| {r['case']} | ±{r['target_rel']:.0%} | {r['rule']} | {r['experiments']} "
                     f"| {r['coverage']:.4f} | {r['se']:.4f} | {r['misses']} | {cp} "
                     f"| {r['median_stop']:g} | {pct(r['precise'])} | {pct(r['futile'])} "
                     f"| {pct(r['max_reps'])} |")
    lines += ["", "| case | true median | reps/run the target needs (true quantiles) "
              f"| chosen: futile | chosen: futile at {sim.MIN_REPS} reps/run |",
              "| --- | --- | --- | --- | --- |"]
    for e in extra:
        lines.append(f"| {e['case']} | {e['median']:.6f} | {e['true_reps_needed']} "
                     f"| {pct(e['chosen_futile'])} | {pct(e['chosen_futile_at_min_reps'])} |")
    lines += ["", "| case | "
              + " | ".join(f"bootstrap coverage, fixed {n} reps/run" for n in FIXED)
              + " | naive at half the target | coverage | precise | coverage, precise stops |",
              "| --- | " + " | ".join("---" for _ in FIXED) + " | --- | --- | --- | --- |"]
    for e in extra:
        t = e["naive_tighter"]
        lines.append(f"| {e['case']} | "
                     + " | ".join(f"{e['bootstrap_fixed'][n]:.4f}" for n in FIXED)
                     + f" | ±{t['target_rel']:.1%} | {t['coverage']:.4f} | {pct(t['precise'])} "
                     f"| {t['coverage_precise']:.4f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiments", type=int, default=10_000, help="per case (default 10000)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    start = time.perf_counter()
    table, extra = rows(args.experiments)
    print(markdown(table, extra))
    print(f"\n{time.perf_counter() - start:.0f} s; nominal 0.95, 3 MC SE at this size: "
          f"{3 * math.sqrt(0.95 * 0.05 / args.experiments):.4f}")
    if args.json:
        args.json.write_text(json.dumps({"table": table, "extra": extra}, indent=1) + "\n")


if __name__ == "__main__":
    main()
