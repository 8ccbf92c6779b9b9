"""Synthetic, format-valid raw files at any scale, made from a real run's reps.

Why: the analysis stages (consolidate, checks, analyse, figures, report) and Snakemake's own
job graph must stay fast and linear as runs accumulate, and that can only be measured on
result trees far larger than anyone measures by hand. This copies a finished workflow's
checkout files, plans and fingerprints into a new directory and writes as many reps per run as
the requested number of requests needs, each a real rep of the source (cycled) with its rep
number and nonces rewritten, through slotbench's own raw-file writer (valid JSON, a .sha256
sidecar from the bytes written). ``synthetic.yaml`` in the new directory sets ``reps`` (and
12-digit nonces, so that up to 999,999 reps have distinct ones).

    python benchmarks/synthetic_raw.py SOURCE_WORKDIR DEST --requests 100000
    cd DEST && time .venv/bin/snakemake -n --configfile synthetic.yaml   # (from the checkout)

The source is a workflow directory after a finished run (results/raw, results/plan,
results/fingerprint, results/config.resolved.yaml).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from slotbench import rawfiles  # noqa: E402

NONCE_DIGITS = 12


def checkout_files(dest: Path) -> None:
    """This checkout's tracked and untracked-but-not-ignored files, as a test copy makes them."""
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others",
                            "--exclude-standard", "-z"], capture_output=True, check=True
                           ).stdout.decode().split("\0")  # fmt: skip
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    ap.add_argument("source", type=Path, help="a workflow directory after a finished run")
    ap.add_argument("dest", type=Path, help="the new workflow directory (must not exist)")
    ap.add_argument("--requests", type=int, required=True, help="measured requests in all")
    args = ap.parse_args(argv)
    if args.dest.exists():
        raise SystemExit(f"{args.dest} exists; give a new directory")
    src = args.source / "results"
    by_run: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(src.glob("raw/*/*/rep*.json"), key=lambda p: (p.parent, len(p.name), p.name)):
        raw = json.loads(path.read_text())
        by_run.setdefault((raw["target"], raw["run"]), []).append(raw)
    if not by_run:
        raise SystemExit(f"no raw files under {src}/raw")
    per_rep = len(next(iter(by_run.values()))[0]["cells"]) * len(
        next(iter(by_run.values()))[0]["cells"][0]["requests"])
    reps = max(1, math.ceil(args.requests / (per_rep * len(by_run))))
    args.dest.mkdir(parents=True)
    checkout_files(args.dest)
    for sub in ("plan", "fingerprint"):
        shutil.copytree(src / sub, args.dest / "results" / sub)
    (args.dest / "synthetic.yaml").write_text(
        f"reps: {reps}\nprompt:\n  nonce_digits: {NONCE_DIGITS}\n")
    written = 0
    for (target, run), sources in sorted(by_run.items()):
        out_dir = args.dest / "results/raw" / target / run
        out_dir.mkdir(parents=True, exist_ok=True)
        for rep in range(1, reps + 1):
            rawfiles.write_raw_atomic(out_dir / f"rep{rep}.json",
                                      rewrite(sources[(rep - 1) % len(sources)], rep))
            written += 1
            if written % 2000 == 0:
                print(f"{written} of {reps * len(by_run)} raw files", file=sys.stderr, flush=True)
    print(f"{args.dest}: {len(by_run)} runs × {reps} reps × {per_rep} requests = "
          f"{len(by_run) * reps * per_rep} requests ({written} raw files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
