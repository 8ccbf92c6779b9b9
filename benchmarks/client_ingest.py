"""How many tokens/s slotbench's client ingests, per process and per added process, and what that
plans for a bigger client host.

Why: an accelerator endpoint at 256 users streams 10,000-30,000 tokens/s; the client must read
them all on time. This runs benchmarks/fidelity.py (the llamacpp format, 256 streams, 64 tokens
per request, first token at 20 ms) with the pacer pinned to one CPU and the client to the other,
at token gaps that raise the offered rate, with 1 and 2 client processes. It records the client's
CPU per token, its busiest process's busy share and the TTFT error against the pacer's truth,
and draws the plan for a host with more cores: the tokens/s the client would ingest with the
process count ``client.processes: auto`` picks (one per 128 streams, at most one per core),
taken from the one-process CPU per token and what the second process added.

    python benchmarks/client_ingest.py --json benchmarks/results/client-ingest-YYYYMMDD.json \\
        --figure benchmarks/results/client-ingest-plan.png
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the client processes' busy share the self-check accepts (checks.client_busy_share)
BUSY_BOUND = 0.85
STREAMS_PER_PROCESS = 128


def measure(gap_ms: float, processes: int, streams: int, pacer_cpu: int, client_cpu: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "f.json"
        cmd = [sys.executable, str(HERE / "fidelity.py"), "--levels", str(streams), "--formats",
               "llamacpp", "--tokens", "64", "--ttft-ms", "20", "--gap-ms", str(gap_ms),
               "--processes", str(processes), f"--pacer-arg=--cpu={pacer_cpu}",
               "--client-cpus", str(client_cpu), "--json", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        res = json.loads(out.read_text())["results"][str(streams)]["llamacpp"]
    res["gap_ms"], res["offered_tps"] = gap_ms, streams * 1000.0 / gap_ms
    return res


def plan(cpu1_us: float, cpu2_us: float, cores: list[int]) -> list[dict]:
    """Projected ingest with P processes on P cores: each busy at most BUSY_BOUND, each token
    costing the one-process figure plus what every added process added (measured at two)."""
    added = max(0.0, cpu2_us - cpu1_us)
    rows = []
    for p in cores:
        per_token = cpu1_us + added * (p - 1)
        rows.append({"processes": p, "streams_for_auto": p * STREAMS_PER_PROCESS,
                     "us_per_token": per_token,
                     "ingest_tps": p * BUSY_BOUND * 1e6 / per_token})
    return rows


def figure(rows: list[dict], measured: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot([r["processes"] for r in rows], [r["ingest_tps"] / 1e3 for r in rows], "o-",
            label=f"projected: each process ≤ {BUSY_BOUND:.0%} busy")
    for m in measured:
        ax.plot([m["processes"]], [m["ceiling_tps"] / 1e3], "s", color="C1")
    ax.plot([], [], "s", color="C1", label="from the CPU per token measured here")
    ax.axhspan(10, 30, color="0.85", label="one GPU serving 256 users (10-30k tok/s)")
    ax.set_yscale("log")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("client processes = cores (client.processes: auto gives one per 128 streams)")
    ax.set_ylabel("tokens/s the client ingests (thousands, log scale)")
    ax.set_title("slotbench's client: ingest ceiling by client processes")
    ax.set_xticks([r["processes"] for r in rows], [str(r["processes"]) for r in rows])
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--gaps", type=float, nargs="+", default=[10, 5, 2.5, 2],
                    help="token gaps in ms (default 10 5 2.5 2)")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--pacer-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--figure", type=Path)
    ap.add_argument("--replot", type=Path, help="draw the figure from an earlier --json file")
    args = ap.parse_args(argv)
    if args.replot:
        done = json.loads(args.replot.read_text())
        figure(done["plan"], done["measured"], args.figure)
        return 0
    results = []
    for processes in (1, 2):
        for gap in args.gaps:
            r = measure(gap, processes, args.streams, args.pacer_cpu, args.client_cpu)
            r["processes"] = processes
            results.append(r)
            print(f"{processes} process(es), gap {gap} ms (offered {r['offered_tps']:.0f} tok/s, "
                  f"written {r['truth_tps']:.0f}): {r['tokens_client']} tokens, CPU "
                  f"{r['cpu_us_per_token']:.2f} µs/token, recv lag p50 "
                  f"{r['recv_lag_p50'] * 1e3:.3f} p99 {r['recv_lag_p99'] * 1e3:.3f} ms, busy "
                  f"max {r['busy_max']:.0%}, TTFT err p50 {r['ttft_err_p50'] * 1e3:.3f} ms "
                  f"p99 {r['ttft_err_p99'] * 1e3:.3f} ms, lost {r['lost']} dup "
                  f"{r['duplicated']}", flush=True)
    by_p = {p: [r for r in results if r["processes"] == p] for p in (1, 2)}
    # the one-process cost where the load is highest (fixed costs spread thinnest)
    cpu = {p: min(r["cpu_us_per_token"] for r in rs) for p, rs in by_p.items()}
    measured = [{"processes": p, "us_per_token": cpu[p],
                 "ceiling_tps": p * BUSY_BOUND * 1e6 / cpu[p]} for p in (1, 2)]
    rows = plan(cpu[1], cpu[2], [1, 2, 4, 8, 16])
    print("\n| client processes (cores) | streams for which auto picks them | µs per token | "
          "projected ingest tok/s |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['processes']} | {r['streams_for_auto']} | {r['us_per_token']:.2f} | "
              f"{r['ingest_tps']:,.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "measured": measured,
                                         "plan": rows}, indent=1))
    if args.figure:
        figure(rows, measured, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
