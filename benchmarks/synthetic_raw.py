"""Synthetic, format-valid raw files at any scale, made from a real run's reps.

Why: the analysis stages (consolidate, checks, analyse, figures, report) and Snakemake's own
job graph must stay fast and linear as runs accumulate, and that can only be measured on
result trees far larger than anyone measures by hand. This copies a finished workflow's
checkout files, plans and fingerprints into a new directory and writes as many reps per run as
the requested number of requests needs, each a real rep of the source (cycled) with its rep
number and nonces rewritten, through slotbench's own raw-file writer (valid JSON, a .sha256
sidecar from the bytes written). ``synthetic.yaml`` in the new directory sets ``reps`` (and
12-digit nonces, so that up to 999,999 reps have distinct ones). A rep's requests are counted
over its cells, so a sweep whose wide arms run several rounds (``requests_per_cell`` per arm)
gets the reps the requested total needs, and the total written is the one printed.

    python benchmarks/synthetic_raw.py SOURCE_WORKDIR DEST --requests 1000000
    cd DEST && time snakemake -n --configfile benchmarks/wide_sweep.yaml synthetic.yaml

The source is a workflow directory after a finished run (its one experiment's raw/, plan/,
fingerprint/ and config.resolved.yaml in results/<experiment>/), or that experiment's folder;
the synthetic reps go to the same experiment's folder in DEST. The benchmark's is a real wide sweep on the
pacer, benchmarks/wide_sweep.yaml (benchmarks/RESULTS.md §3 has the commands). Pass the source's
config files with ``--configfile`` before synthetic.yaml.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from slotbench.core import experiments  # noqa: E402
from slotbench.measure import rawfiles  # noqa: E402

NONCE_DIGITS = 12


def checkout_files(dest: Path) -> None:
    """This checkout's tracked and untracked-but-not-ignored files, as a test copy makes them."""
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others",
                            "--exclude-standard", "-z"], capture_output=True, check=True
                           ).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def rewrite(raw: dict, rep: int) -> dict:
    """A source rep as rep ``rep``: its number, its nonces (rep digits first) and the
    experiment's nonce width changed; every measured number kept."""
    out = copy.deepcopy(raw)
    out["rep"] = rep
    out["experiment"]["prompt"]["nonce_digits"] = NONCE_DIGITS
    half = NONCE_DIGITS // 2
    for cell in out["cells"]:
        for r in cell["requests"]:
            tail = str(r.get("nonce", "0"))[-half:].rjust(half, "0")
            r["nonce"] = f"{rep:0{half}d}{tail}"
    return out


def requests_in(raw: dict) -> int:
    """Requests a rep holds: the sum over its cells (an arm's requests_per_cell may differ)."""
    return sum(len(cell["requests"]) for cell in raw["cells"])


def reps_for(by_run: dict[tuple[str, str], list[dict]], requests: int) -> int:
    """The fewest reps per run whose requests (each run cycling its source reps) reach
    ``requests`` in all."""
    cycles = [[requests_in(raw) for raw in sources] for sources in by_run.values()]
    if not any(map(sum, cycles)):
        raise SystemExit("the source reps hold no requests")
    reps, total = 0, 0
    while total < requests or reps == 0:
        total += sum(c[reps % len(c)] for c in cycles)
        reps += 1
    return reps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("source", type=Path, help="a workflow directory after a finished run")
    ap.add_argument("dest", type=Path, help="the new workflow directory (must not exist)")
    ap.add_argument("--requests", type=int, required=True, help="measured requests in all")
    args = ap.parse_args(argv)
    if args.dest.exists():
        raise SystemExit(f"{args.dest} exists; give a new directory")
    try:
        src = experiments.folder_of(args.source)  # the experiment's folder
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    # the same experiment in DEST (a result from before experiments had folders: the default)
    dest = args.dest / "results" / (src.name if src.name != "results" else experiments.name_of({}))
    by_run: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(src.glob("raw/*/*/rep*.json"), key=lambda p: (p.parent, len(p.name), p.name)):
        raw = json.loads(path.read_text())
        by_run.setdefault((raw["target"], raw["run"]), []).append(raw)
    if not by_run:
        raise SystemExit(f"no raw files under {src}/raw")
    reps = reps_for(by_run, args.requests)
    args.dest.mkdir(parents=True)
    checkout_files(args.dest)
    for sub in ("plan", "fingerprint"):
        shutil.copytree(src / sub, dest / sub)
    (args.dest / "synthetic.yaml").write_text(
        f"reps: {reps}\nprompt:\n  nonce_digits: {NONCE_DIGITS}\n")
    written, total = 0, 0
    for (target, run), sources in sorted(by_run.items()):
        out_dir = dest / "raw" / target / run
        out_dir.mkdir(parents=True, exist_ok=True)
        for rep in range(1, reps + 1):
            raw = rewrite(sources[(rep - 1) % len(sources)], rep)
            rawfiles.write_raw_atomic(out_dir / f"rep{rep}.json", raw)
            written += 1
            total += requests_in(raw)
            if written % 2000 == 0:
                print(f"{written} of {reps * len(by_run)} raw files", file=sys.stderr, flush=True)
    print(f"{args.dest}: {len(by_run)} runs × {reps} reps = {total} requests "
          f"({written} raw files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
