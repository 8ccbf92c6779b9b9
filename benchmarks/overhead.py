"""Where a pipeline run's wall time went: measured cells against everything around them.

Why: the measurement is the cells; every second outside them (Snakemake, the fingerprint, the
plan, server start, warm-up, writing raw files, analysis, figures, report) is the pipeline's
own cost. This reads a finished run's Snakemake log (job start and finish, 1 s resolution) and
its raw files (each rep's start, warm-up end, every cell's start and end, and the end, from
the monotonic clock) and splits the wall time:

- per rule: the time its jobs ran;
- inside each rep job: before the rep started (interpreter, imports, server start), warm-up,
  the measured cells, between cells, after the last cell (raw file, server stop);
- between jobs: Snakemake's own scheduling and checks.

    python benchmarks/overhead.py WORKDIR            # the newest .snakemake/log in WORKDIR
    python benchmarks/overhead.py WORKDIR --log FILE
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import re
import sys
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")


def parse_log(path: Path) -> tuple[dict, float, float]:
    """jobid → {rule, start, end} (unix seconds), and the log's first and last stamp."""
    jobs, stamp, rule, first, last = {}, None, None, None, None
    for line in path.read_text(errors="replace").splitlines():
        m = STAMP.match(line)
        if m:
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
            first = stamp if first is None else first
            last = stamp
            continue
        if m := RULE.match(line):
            rule = m.group(1)
        elif (m := JOBID.match(line)) and rule is not None:
            jobs[int(m.group(1))] = {"rule": rule, "start": stamp, "end": None}
            rule = None
        elif (m := FINISHED.match(line)) and int(m.group(1)) in jobs:
            jobs[int(m.group(1))]["end"] = stamp
    return jobs, first, last


def rep_phases(raw: dict) -> dict:
    """Seconds of one rep by phase, from its raw file (monotonic offsets from origin)."""
    cells = sorted(raw["cells"], key=lambda c: c["t_start_s"])
    measured = sum(c["t_end_s"] - c["t_start_s"] for c in cells)
    span = cells[-1]["t_end_s"] - cells[0]["t_start_s"]
    return {
        "warm-up (and cooldown)": raw["origin_unix"] - raw["started_unix"]
        + cells[0]["t_start_s"],
        "measured cells": measured,
        "between cells": span - measured,
        "after the last cell (to finished_unix)": raw["finished_unix"]
        - (raw["origin_unix"] + cells[-1]["t_end_s"]),
        "_start": raw["started_unix"],
        "_end": raw["finished_unix"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("workdir", type=Path, help="a workflow directory after a finished run")
    ap.add_argument("--log", type=Path, help="the Snakemake log (default: the newest one)")
    args = ap.parse_args(argv)
    log = args.log or max(args.workdir.glob(".snakemake/log/*.snakemake.log"), default=None)
    if log is None:
        raise SystemExit(f"no Snakemake log under {args.workdir}/.snakemake/log")
    jobs, first, last = parse_log(log)
    wall = last - first
    by_rule = collections.defaultdict(float)
    for j in jobs.values():
        if j["end"] is not None:
            by_rule[j["rule"]] += j["end"] - j["start"]
    phases = collections.defaultdict(float)
    reps = [json.loads(Path(p).read_text())
            for p in sorted(glob.glob(str(args.workdir / "results/*/raw/*/*/rep*.json")))]
    rep_starts = sorted(j["start"] for j in jobs.values() if j["rule"] == "rep")
    for raw in reps:
        for k, v in rep_phases(raw).items():
            phases[k] += v
    # the rep job's start (log, 1 s) to the rep's started_unix: interpreter, imports, server
    before = sum(max(0.0, raw["started_unix"] - max([s for s in rep_starts
                                                     if s <= raw["started_unix"] + 1] or [0]))
                 for raw in reps)
    in_jobs = sum(by_rule.values())
    rows = [("measured cells", phases["measured cells"])]
    rows += [(f"rep: {k}", phases[k]) for k in ("warm-up (and cooldown)", "between cells",
                                                "after the last cell (to finished_unix)")]
    rows.append(("rep: job start to the rep's start (Python, imports, server start)", before))
    rep_rest = by_rule.get("rep", 0.0) - sum(v for k, v in phases.items() if not k.startswith("_"))
    rows.append(("rep: the rest of the job (1 s log resolution)", rep_rest - before))
    rows += [(f"rule {r}", t) for r, t in sorted(by_rule.items()) if r != "rep"]
    rows.append(("Snakemake between jobs", wall - in_jobs))
    print(f"{log} — wall {wall:.0f} s, {len(reps)} reps, {len(jobs)} jobs\n")
    print("| where | seconds | share of the wall time |")
    print("| --- | --- | --- |")
    for name, t in rows:
        print(f"| {name} | {t:.1f} | {t / wall * 100:.1f}% |")
    print(f"\noverhead (everything but the measured cells): "
          f"{(wall - phases['measured cells']) / wall * 100:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
