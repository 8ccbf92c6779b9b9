"""How fast the pacer (tests/doubles/pacer.c) can stream while keeping its schedule.

A truth server must be faster than the client it grades. This runs the pacer pinned to one CPU
(``--cpu 0``) against pacer_drain.c, a tiny C client pinned to another (``--cpu 1``): N
keep-alive streams of llama.cpp ``/completion`` requests (64 tokens each, TTFT 20 ms), one
after the other for a few seconds per gap, the streams' first requests spread over one request's
length so they are not in lock-step. For each gap it reports:

- offered tok/s: N * tokens / (ttft + (tokens - 1) * gap), what a pacer without delays streams;
- achieved tok/s: tokens the truth log says were written in the steady window (after the first
  request's length, until the client stops sending), per second;
- write lateness p50/p99/max (ms): each token's write against its due time, from the truth log
  (``t_tok - due``), over the same window;
- pacer CPU s/s: the pacer's CPU time (user + system, /proc/PID/stat) per wall second over the
  run; 1.0 is the whole core. On loopback the kernel's receive path for the client's socket runs
  inside the pacer's send(), so this includes it.

    python benchmarks/pacer_capacity.py [--gaps 10 5 2.5 2] [--streams 256] [--seconds 5] \\
        [--json out.json] [--markdown out.md]

Lateness depends on what else runs on CPU 0: the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it: the doubles in tests/doubles/
from doubles.pacer import build  # noqa: E402


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def run_gap(pacer: Path, drain: Path, gap_ms: float, args, tmp: Path) -> dict:
    truth = tmp / f"truth-{gap_ms:g}.jsonl"
    cmd = (["chrt", "-f", "1"] if args.rt else []) + [str(pacer), "--port", "0", "--ttft-ms", str(args.ttft_ms), "--gap-ms", str(gap_ms),
           "--tokens", str(args.tokens), "--truth-log", str(truth), "--cpu", str(args.pacer_cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"pacer did not start: {proc.stderr.read()}")
        per_request_s = (args.ttft_ms + (args.tokens - 1) * gap_ms) / 1000.0
        cpu0, wall0 = proc_cpu_s(proc.pid), time.monotonic()
        with tempfile.TemporaryFile("w+") as out:
            client_proc = subprocess.Popen(
                [str(drain), "--url", url, "--conns", str(args.streams), "--seconds",
                 str(args.seconds), "--tokens", str(args.tokens), "--cpu", str(args.drain_cpu),
                 "--stagger-ms", str(per_request_s * 1000)], stdout=out, text=True,
            )
            _, status, usage = os.wait4(client_proc.pid, 0)
            client_proc.returncode = os.waitstatus_to_exitcode(status)
            cpu1, wall1 = proc_cpu_s(proc.pid), time.monotonic()
            if client_proc.returncode != 0:
                raise RuntimeError(f"pacer_drain exited {client_proc.returncode}")
            out.seek(0)
            client = json.loads(out.read())
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    rows = [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]
    truth.unlink()
    start = client["t_start"] + min(args.seconds / 2, per_request_s + 0.2)
    stop = client["t_stop"]
    late = sorted(t - due for r in rows for t, due in zip(r["t_tok"], r["due"])
                  if start <= t < stop)
    ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
    return {
        "gap_ms": gap_ms,
        "streams": args.streams,
        "tokens_per_request": args.tokens,
        "ttft_ms": args.ttft_ms,
        "offered_tok_s": round(args.streams * args.tokens / per_request_s),
        "achieved_tok_s": round(len(late) / (stop - start)) if stop > start else None,
        "client_tok_s": round(client["tokens_per_s"]),
        "late_p50_ms": ms(pct(late, 0.5)),
        "late_p99_ms": ms(pct(late, 0.99)),
        "late_max_ms": ms(late[-1] if late else None),
        "pacer_cpu_s_per_s": round((cpu1 - cpu0) / (wall1 - wall0), 3),
        "client_cpu_s_per_s": round((usage.ru_utime + usage.ru_stime) / (wall1 - wall0), 3),
        "requests": client["requests"],
        "incomplete": sum(not r["completed"] for r in rows),
        "client_errors": client["errors"],
        "window_s": round(stop - start, 3),
        "pacer_summary": err.strip().splitlines()[-1] if err.strip() else None,
    }


def markdown(results: list[dict]) -> str:
    head = ("| gap ms | streams | offered tok/s | achieved tok/s (truth) | lateness p50 / p99 / "
            "max ms | pacer CPU s/s | client CPU s/s |\n|---:|---:|---:|---:|---|---:|---:|\n")
    lines = [f"| {r['gap_ms']:g} | {r['streams']} | {r['offered_tok_s']:,} | "
             f"{r['achieved_tok_s']:,} | {r['late_p50_ms']} / {r['late_p99_ms']} / "
             f"{r['late_max_ms']} | {r['pacer_cpu_s_per_s']:.2f} | {r['client_cpu_s_per_s']:.2f} |"
             for r in results]
    return head + "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--gaps",
        type=float,
        nargs="+",
        default=[10, 5, 2.5, 2],
        help="inter-token gaps to run, ms (default 10 5 2.5 2)",
    )
    ap.add_argument("--streams", type=int, default=256, help="concurrent streams (256)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request (64)")
    ap.add_argument("--ttft-ms", type=float, default=20.0, help="pacer TTFT (20)")
    ap.add_argument("--seconds", type=float, default=5.0, help="run time per gap (5)")
    ap.add_argument("--pacer-cpu", type=int, default=0, help="CPU the pacer is pinned to (0)")
    ap.add_argument("--drain-cpu", type=int, default=1, help="CPU the client is pinned to (1)")
    ap.add_argument("--rt", action="store_true",
                    help="run the pacer under SCHED_FIFO priority 1 (chrt, root): separates its "
                         "own lateness from CPU time other processes take on its core")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--markdown", type=Path, help="write the table here")
    args = ap.parse_args(argv)

    pacer = build()  # tests/doubles/pacer.c
    drain = build(HERE / "pacer_drain.c", "pacer_drain")
    load0 = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for gap in args.gaps:
            res = run_gap(pacer, drain, gap, args, Path(tmp))
            results.append(res)
            print(f"gap {gap:g} ms: offered {res['offered_tok_s']:,} achieved "
                  f"{res['achieved_tok_s']:,} tok/s, late p50/p99/max {res['late_p50_ms']}/"
                  f"{res['late_p99_ms']}/{res['late_max_ms']} ms, cpu "
                  f"{res['pacer_cpu_s_per_s']:.2f} s/s", file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    table = markdown(results)
    note = (f"\npacer{' under SCHED_FIFO 1' if args.rt else ''} on CPU {args.pacer_cpu}, client on "
            f"CPU {args.drain_cpu}; {args.tokens} tokens per request, TTFT {args.ttft_ms:g} ms, "
            f"{args.seconds:g} s per gap\n"
            f"load average before / after: {tuple(round(x, 2) for x in load0)} / "
            f"{tuple(round(x, 2) for x in load1)} ({os.cpu_count()} CPUs)\n")
    print(table + note)
    if args.markdown:
        args.markdown.write_text(table + note)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "load_before": load0, "load_after": load1,
                                         "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
