"""How far gen_gain exceeds the speedup, arm by arm, in the capacity test's sweep (the real
embedded llama-server with 2 slots, arms [1, 2, 4, 8], 2 reps, 16 tokens: SWEEP in
tests/test_e2e_capacity.py), run several times, each in a fresh copy of this checkout.

gen_gain counts generation windows and the speedup the wall clock, so the two differ even in an
arm that never queues. The test holds the queued arms (4, 8) to the 2-way arm of their own run;
this measures the spread that bound has to allow, on a quiet machine and under a 1-CPU burner.

    .venv/bin/python benchmarks/gen_gain_excess.py [--runs N] [--burner] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it: the doubles in tests/doubles/

from e2e_helpers import copy_repo  # noqa: E402
from test_e2e_capacity import SWEEP  # noqa: E402


def one_run(root: Path, i: int, burner: bool) -> dict[int, float]:
    """gen_gain / speedup per arm (medians over the reps) of one sweep."""
    work = copy_repo(root / f"run{i}")
    (work / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    burn = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if burner else None
    try:
        proc = subprocess.run([str(REPO / ".venv/bin/snakemake"), "--cores", "1", "--configfile",
                               "sweep.yaml"], cwd=work, capture_output=True, text=True,
                              env=os.environ | {"SLOTBENCH_CACHE": str(root / "cache")})
    finally:
        if burn:
            burn.kill()
    if proc.returncode != 0:
        sys.exit(f"gen_gain_excess: run {i} failed:\n{proc.stderr[-3000:]}")
    # sweep.yaml names no experiment: the default's folder, results/article/
    summary = pd.read_csv(work / "results/article/analysis/summary.csv").set_index("arm")
    return (summary["gen_gain"] / summary["speedup"]).round(4).to_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--burner", action="store_true", help="a busy loop beside every run")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="gen-gain-excess-") as tmp:
        for i in range(args.runs):
            excess = one_run(Path(tmp), i, args.burner)
            relative = {arm: round(excess[arm] / excess[2], 4) for arm in excess if arm > 2}
            runs.append({"excess": excess, "relative_to_2way": relative})
            print(f"run {i + 1}: gen_gain / speedup {excess}; queued arms over 2-way {relative}",
                  flush=True)
    for arm in sorted(runs[0]["excess"]):
        values = [r["excess"][arm] for r in runs]
        rel = [r["relative_to_2way"][arm] for r in runs if arm in r["relative_to_2way"]]
        line = f"arm {arm}: gen_gain / speedup {min(values):.2f}-{max(values):.2f}"
        print(line + (f", over the 2-way arm's {min(rel):.2f}-{max(rel):.2f}" if rel else ""))
    if args.json:
        args.json.write_text(json.dumps({"burner": args.burner, "sweep": SWEEP, "runs": runs},
                                        indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
