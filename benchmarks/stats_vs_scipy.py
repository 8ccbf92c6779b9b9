"""slotbench's statistics (scripts/slotbench/core/stats.py) against scipy.stats, to decide whether
scipy should replace them.

scipy is not a dependency of slotbench: this script installs it into a venv of its own under
$SLOTBENCH_CACHE/venvs/scipy-<version> (default ~/.cache/slotbench), which also sees this
checkout's .venv (numpy, pandas), and runs the comparison there:

    .venv/bin/python benchmarks/stats_vs_scipy.py [--out benchmarks/results/stats-vs-scipy.json]

What it compares, on seeded samples with and without ties:
- the rank-sum p-value (stats.rank_sum_p) against scipy's exact permutation distribution of the
  same statistic (permutation_test, every split), against mannwhitneyu(method="exact"), and, past
  the exact limit, against mannwhitneyu(method="asymptotic") with the continuity correction;
- the percentile-bootstrap interval of a difference of medians (stats.median_diff_ci) against
  scipy.stats.bootstrap with the same number of resamples, percentile and BCa.
"""

from __future__ import annotations

import argparse
import json
import os
import site
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

SCIPY = "scipy==1.17.1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = Path(os.environ.get("SLOTBENCH_CACHE", Path.home() / ".cache" / "slotbench"))
VENV = CACHE / "venvs" / SCIPY.replace("==", "-")

# (n_a, n_b, ties): ties rounds the values to one decimal, so several share a rank
CASES = [(3, 3, False), (3, 3, True), (4, 4, True), (3, 5, True), (6, 8, False), (6, 8, True),
         (8, 6, True), (8, 8, True), (10, 10, True), (25, 25, True)]


def ensure_venv() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        base = getattr(sys, "_base_executable", None) or sys.executable
        subprocess.run([base, "-m", "venv", "--without-pip", str(VENV)], check=True)
        purelib = Path(sysconfig.get_path("purelib", "venv", vars={"base": VENV,
                                                                    "platbase": VENV}))
        purelib.mkdir(parents=True, exist_ok=True)
        (purelib / "slotbench-venv.pth").write_text(
            "".join(f"import site; site.addsitedir({p!r})\n" for p in site.getsitepackages()))
    probe = subprocess.run([str(python), "-c", "import scipy"], capture_output=True)
    if probe.returncode != 0:
        print(f"stats_vs_scipy: installing {SCIPY} into {VENV}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                        "--quiet", "--disable-pip-version-check", "--no-deps", SCIPY],
                       check=True)
    return python


def sample(rng, n: int, shift: float, ties: bool):
    values = rng.lognormal(mean=shift, sigma=0.15, size=n)
    return values.round(1) if ties else values


def compare() -> dict:
    import numpy as np
    import scipy
    from scipy import stats as sps

    sys.path.insert(0, str(REPO / "scripts"))
    from slotbench.core import stats

    rows = []
    rng = np.random.default_rng(20261203)
    for n_a, n_b, ties in CASES:
        for shift in (0.0, 0.1):
            a = sample(rng, n_a, 1.0, ties)
            b = sample(rng, n_b, 1.0 + shift, ties)
            t0 = time.perf_counter()
            ours = stats.rank_sum_p(a, b)
            t_ours = time.perf_counter() - t0
            ranks = sps.rankdata(np.concatenate([a, b]))
            centre = n_a * (n_a + n_b + 1) / 2
            row = {"n_a": n_a, "n_b": n_b, "ties": bool(len(np.unique(np.concatenate([a, b])))
                                                        < n_a + n_b),
                   "shift": shift, "slotbench_p": ours, "slotbench_s": t_ours}
            exact = stats.EXACT_SPLITS >= __import__("math").comb(n_a + n_b, n_a)
            if exact:
                t0 = time.perf_counter()
                perm = sps.permutation_test(
                    (ranks[:n_a], ranks[n_a:]),
                    lambda x, y, axis=-1: np.abs(x.sum(axis=axis) - centre),
                    permutation_type="independent", alternative="greater",
                    n_resamples=np.inf, vectorized=True)
                row["scipy_permutation_p"] = float(perm.pvalue)
                row["scipy_permutation_s"] = time.perf_counter() - t0
                row["scipy_mwu_exact_p"] = float(sps.mannwhitneyu(a, b, method="exact").pvalue)
            else:
                row["scipy_mwu_asymptotic_p"] = float(
                    sps.mannwhitneyu(a, b, method="asymptotic", use_continuity=True).pvalue)
            rows.append(row)

    boot = []
    for n, seed in ((10, 1), (20, 2)):
        a, b = sample(rng, n, 1.0, False), sample(rng, n, 1.05, False)
        est, lo, hi = stats.median_diff_ci(a, b, 2000, 0.95, seed)
        entry = {"n": n, "slotbench": [est, lo, hi]}
        for method in ("percentile", "BCa"):
            res = sps.bootstrap((a, b), lambda x, y, axis=-1: np.median(y, axis=axis)
                                - np.median(x, axis=axis), n_resamples=2000,
                                confidence_level=0.95, method=method, random_state=seed)
            entry[f"scipy_{method}"] = [est, float(res.confidence_interval.low),
                                        float(res.confidence_interval.high)]
        boot.append(entry)
    return {"scipy": scipy.__version__, "numpy": np.__version__, "rank_sum": rows,
            "bootstrap": boot}


def report(result: dict) -> str:
    lines = [f"scipy {result['scipy']}, numpy {result['numpy']}", "",
             "| n_a | n_b | ties | shift | slotbench p | scipy exact permutation p "
             "| scipy mannwhitneyu p | slotbench ms | scipy permutation ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rank_sum"]:
        mwu = r.get("scipy_mwu_exact_p", r.get("scipy_mwu_asymptotic_p"))
        kind = "exact" if "scipy_mwu_exact_p" in r else "asymptotic"
        perm = r.get("scipy_permutation_p")
        perm_ms = r.get("scipy_permutation_s")
        lines.append(
            f"| {r['n_a']} | {r['n_b']} | {'yes' if r['ties'] else 'no'} | {r['shift']} "
            f"| {r['slotbench_p']:.6f} | {'—' if perm is None else f'{perm:.6f}'} "
            f"| {mwu:.6f} ({kind}) | {1000 * r['slotbench_s']:.1f} "
            f"| {'—' if perm_ms is None else f'{1000 * perm_ms:.1f}'} |")
    lines += ["", "| n a side | slotbench percentile [lo, hi] | scipy percentile | scipy BCa |",
              "| --- | --- | --- | --- |"]
    for b in result["bootstrap"]:
        fmt = lambda v: f"[{v[1]:.4f}, {v[2]:.4f}]"  # noqa: E731
        lines.append(f"| {b['n']} | {fmt(b['slotbench'])} | {fmt(b['scipy_percentile'])} "
                     f"| {fmt(b['scipy_BCa'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the comparison here as JSON")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.inside:
        python = ensure_venv()
        cmd = [str(python), __file__, "--inside"] + (["--out", str(args.out)] if args.out else [])
        sys.exit(subprocess.run(cmd).returncode)
    result = compare()
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))


if __name__ == "__main__":
    main()
