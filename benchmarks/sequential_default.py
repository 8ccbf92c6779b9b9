"""The embedded default with reps: auto (config/auto.yaml) against the fixed 2 runs × 10 reps
(config/config.yaml), in turn (interleaved: `--order fixed,auto,auto,fixed` measures each
twice, in an ABBA order, so that a machine drifting over the hour weighs on both alike), each
in a fresh copy of this checkout on the real embedded llama-server: the reps each measured,
its wall time, the half-width each reached per arm and ratio, and the sequential run's stop.

The fixed run's half-widths are its bootstrap intervals' (the sufficiency check's table), the
sequential run's its confidence sequences' (analysis/stopping.csv, the last look): the two are
different intervals, the second valid although its width decided the stop.

    .venv/bin/python benchmarks/sequential_default.py [--order fixed,auto,auto,fixed] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it

from e2e_helpers import copy_repo  # noqa: E402

RUNS = {
    "fixed": ([], "article"),
    "auto": (["--configfile", "config/auto.yaml"], "article-auto"),
}


def one(root: Path, name: str, turn: int) -> dict:
    """Run one config in a fresh copy; what it measured and how wide its intervals are."""
    args, experiment = RUNS[name]
    work = copy_repo(root / f"{turn}-{name}")
    start = time.monotonic()
    proc = subprocess.run([str(REPO / ".venv/bin/snakemake"), "--cores", "1", *args], cwd=work,
                          capture_output=True, text=True,
                          env=os.environ | {"SLOTBENCH_CACHE": str(root / "cache")})
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    out = work / "results" / experiment
    reps = sorted(p.name for p in (out / "raw").rglob("rep*.json"))
    width = pd.read_csv(out / "checks/sufficiency.csv")
    row = {"config": name, "turn": turn, "wall_s": round(wall, 1), "raw_files": len(reps),
           "widths": {f"{int(r.arm)}/{r.metric}": round(float(r.rel), 4)
                      for r in width.itertuples()}}
    if (out / "analysis/stopping.csv").exists():
        trail = pd.read_csv(out / "analysis/stopping.csv")
        last = trail[trail["look"] == trail["look"].max()]
        row |= {"looks": int(last["look"].iloc[0]), "reps_per_run": int(
            last["reps_per_run"].iloc[0]), "decision": str(last["look_decision"].iloc[0]),
            "minutes_measuring": float(last["minutes"].iloc[0]),
            "needed": {f"{int(r.arm)}/{r.metric}": (None if pd.isna(r.reps_needed)
                                                     else int(r.reps_needed))
                       for r in last.itertuples()},
            "progress": [line for line in (proc.stdout + proc.stderr).splitlines()
                         if re.match(r"look \d+: ", line)]}
    return row


def markdown(rows: list[dict]) -> str:
    keys = list(rows[0]["widths"])
    head = ["arm/ratio"] + [f"{r['turn']}. {r['config']} (±, {r['raw_files']} raw files)"
                            for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for k in keys:
        lines.append("| " + " | ".join([k] + [f"{r['widths'].get(k, float('nan')) * 100:.1f}%"
                                              for r in rows]) + " |")
    lines.append("")
    for r in rows:
        extra = (f", {r['looks']} looks, {r['reps_per_run']} reps a run, stopped "
                 f"{r['decision']}" if "decision" in r else "")
        lines.append(f"- {r['turn']}. {r['config']}: {r['wall_s'] / 60:.1f} min wall{extra}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--order", default="fixed,auto,auto,fixed",
                    help="the runs, in turn; a config may come again (default: ABBA)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    order = args.order.split(",")
    unknown = [name for name in order if name not in RUNS]
    if unknown:  # before anything is measured
        ap.error(f"--order: {', '.join(unknown)} is not one of {', '.join(RUNS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="slotbench-seq-") as tmp:
        for turn, name in enumerate(order, 1):
            print(f"{time.strftime('%H:%M:%S')} {turn}. {name} ...", file=sys.stderr, flush=True)
            rows.append(one(Path(tmp), name, turn))
            print(json.dumps(rows[-1], indent=1), file=sys.stderr, flush=True)
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
