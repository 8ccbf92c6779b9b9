"""The target matrix fanned out: config/matrix.yaml (2 endpoints x 3 slot counts = 6 targets)
run end to end once with --jobs 1 and once with --jobs 2, each in a fresh copy of this checkout,
on the real embedded llama-server. Reports both wall times, their ratio, and from the raw files
that the two endpoints' reps overlapped under --jobs 2 and one endpoint's never did.

    .venv/bin/python benchmarks/matrix_fanout.py [--reps N] [--num-predict N] [--out FILE]

Run it on an otherwise idle machine; the ratio of the two runs, measured back to back, is the
figure (absolute times depend on the machine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it: the doubles in tests/doubles/

from e2e_helpers import copy_repo  # noqa: E402


def rep_spans(work: Path) -> list[tuple[str, float, float]]:
    spans = []
    for raw in sorted((work / "results/matrix/raw").rglob("rep*.json")):  # its experiment
        data = json.loads(raw.read_text())
        spans.append((data["target"], data["started_unix"], data["finished_unix"]))
    return spans


def endpoint(target: str) -> str:
    return target.split("-")[1]  # emb-a-parallel1 -> a


def overlaps(spans, same: bool) -> int:
    """Pairs of reps that overlapped in time, of one endpoint (same) or of two."""
    n = 0
    for i, (t0, s0, e0) in enumerate(spans):
        for t1, s1, e1 in spans[i + 1:]:
            if (endpoint(t0) == endpoint(t1)) == same and s0 < e1 and s1 < e0:
                n += 1
    return n


def run(jobs: int, root: Path, override: dict) -> dict:
    work = copy_repo(root / f"jobs{jobs}")
    (work / "override.yaml").write_text(json.dumps(override))  # JSON is YAML
    cmd = [str(REPO / ".venv/bin/snakemake"), "--cores", str(jobs), "--jobs", str(jobs),
           "--configfile", "config/matrix.yaml", "override.yaml"]
    print(f"matrix_fanout: {' '.join(cmd[1:])} in {work}", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                          env=os.environ | {"SLOTBENCH_CACHE": str(root / "cache")})
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"matrix_fanout: --jobs {jobs} failed:\n{proc.stderr[-3000:]}")
    spans = rep_spans(work)
    print(f"matrix_fanout: --jobs {jobs}: {elapsed:.0f} s, {len(spans)} reps", file=sys.stderr)
    return {"jobs": jobs, "wall_s": round(elapsed, 1), "reps": len(spans),
            "targets": sorted({t for t, _, _ in spans}),
            "overlapping_pairs_across_endpoints": overlaps(spans, same=False),
            "overlapping_pairs_within_an_endpoint": overlaps(spans, same=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    today = datetime.date.today().strftime("%Y%m%d")
    parser.add_argument("--reps", type=int, default=3, help="reps per target (3)")
    parser.add_argument("--num-predict", type=int, default=32, help="tokens per request (32)")
    parser.add_argument("--out", default=f"benchmarks/results/matrix-{today}.json")
    args = parser.parse_args()
    override = {"reps": args.reps, "num_predict": args.num_predict}
    with tempfile.TemporaryDirectory(prefix="slotbench-matrix-") as tmp:
        serial, fanned = run(1, Path(tmp), override), run(2, Path(tmp), override)
    result = {"command": " ".join(["benchmarks/matrix_fanout.py", *sys.argv[1:]]),
              "date": today, "config": ["config/matrix.yaml", override], "serial": serial,
              "jobs2": fanned, "ratio": round(fanned["wall_s"] / serial["wall_s"], 3)}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
