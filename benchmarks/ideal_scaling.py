"""The whole pipeline against a server that scales perfectly: what speedup does slotbench report?

Why: on a server that gives every stream the same rate whatever the concurrency, the true
speedup at N streams is N and the per-user rate does not move. A client that cannot keep up
reports less (35.3x at 64 and 45.2x at 256 streams with the old threaded client). This runs
``snakemake`` on a fresh copy of the checkout against tests/doubles/pacer.py (pinned to one CPU,
the pipeline to the other, so neither grades the other) and prints, per arm, the speedup and
per-user change the report gives, their error against the truth, the client self-check and
each arm's client processes, busy share and loop lag.

    python benchmarks/ideal_scaling.py                       # arms 1 16 64 256, 100 tok/s per stream
    python benchmarks/ideal_scaling.py --gap-ms 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it: the doubles in tests/doubles/
from doubles.pacer import start_subprocess  # noqa: E402


def copy_checkout(dest: Path) -> Path:
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--arms", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--gap-ms", type=float, default=10.0, help="every stream's gap (10: 100 tok/s)")
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--pacer-cpu", type=int, default=0)
    ap.add_argument("--pipeline-cpus", default="1", help="taskset list for the pipeline (1)")
    ap.add_argument("--processes", default="auto", help="client.processes (auto)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        work = copy_checkout(Path(tmp) / "work")
        truth = Path(tmp) / "truth.jsonl"
        per_cell = {a: (4 if a == 1 else a) for a in args.arms}
        (work / "ideal.yaml").write_text(
            f"targets:\n  - {{name: ideal, backend: llamacpp, url: URL}}\n"
            f"arms: {args.arms}\nrequests_per_cell: {per_cell}\nreps: {args.reps}\nruns: 1\n"
            f"num_predict: {args.tokens}\nwarmup_predict: 1\nrequest_timeout_s: 120\n"
            f"client: {{processes: {args.processes}}}\n"
        )
        pacer, url = start_subprocess(["--cpu", str(args.pacer_cpu), "--ttft-ms",
                                       str(args.ttft_ms), "--gap-ms", str(args.gap_ms),
                                       "--truth-log", str(truth)])
        cfg = work / "ideal.yaml"
        cfg.write_text(cfg.read_text().replace("URL", url))
        t0 = time.monotonic()
        try:
            proc = subprocess.run(["taskset", "-c", args.pipeline_cpus, str(REPO / ".venv/bin/python"),
                                   "-m", "snakemake", "--cores", "1", "--configfile", "ideal.yaml"],
                                  cwd=work, capture_output=True, text=True)
        finally:
            pacer.terminate()  # its summary line goes to stderr
            pacer.wait(10)
        wall = time.monotonic() - t0
        if proc.returncode:
            print(proc.stdout[-3000:] + proc.stderr[-3000:])
            return 1
        import pandas as pd

        results = work / "results/article"  # ideal.yaml names no experiment: the default's
        summary = pd.read_csv(results / "analysis/summary.csv").set_index("arm")
        cells = pd.read_parquet(results / "cells.parquet")
        verdicts = {v["trap"]: v for f in (results / "checks").glob("*.json")
                    if f.name != "headline.json" for v in json.loads(f.read_text())}
        rows = []
        for arm in args.arms:
            c = cells[cells["arm"] == arm]
            s = summary.loc[arm]
            rows.append({"arm": arm, "speedup": None if arm == 1 else float(s["speedup"]),
                         "speedup_err": None if arm == 1 else float(s["speedup"]) / arm - 1,
                         "user_change": None if arm == 1 else float(s["user_ratio"]) - 1,
                         "agg_tps": float(s["agg_tps"]), "ttft_s": float(s["ttft_s"]),
                         "processes": int(c["client_processes"].max()),
                         "busy_max": float(c["client_busy"].max()),
                         "lag_p95_max_s": float(c["client_lag_p95_s"].max())})
    out = {"args": {k: str(v) for k, v in vars(args).items()}, "wall_s": wall, "rows": rows,
           "client": {t: verdicts[t]["sentence"] for t in ("client", "client_saturation")}}
    print("| arm | speedup | vs N | per-user change | agg tok/s | TTFT s | client processes | "
          "busiest process | loop lag p95 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        sp = "—" if r["speedup"] is None else f"{r['speedup']:.2f}×"
        err = "—" if r["speedup_err"] is None else f"{r['speedup_err']:+.2%}"
        uc = "—" if r["user_change"] is None else f"{r['user_change']:+.2%}"
        print(f"| {r['arm']} | {sp} | {err} | {uc} | {r['agg_tps']:.0f} | {r['ttft_s']:.4f} | "
              f"{r['processes']} | {r['busy_max']:.0%} | {r['lag_p95_max_s'] * 1e3:.2f} ms |")
    print(f"\nwall {wall:.0f} s")
    for sentence in out["client"].values():
        print(f"- {sentence}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
