"""How faithfully does slotbench's own client measure a server whose truth is known?

Why: every number slotbench reports (TTFT, per-user rate, aggregate tok/s) is measured by its
client on the same 2 cores as the server. This script runs slotbench's backends (llamacpp,
ollama, openai completions and chat) against tests/doubles/pacer.py, a server that logs when each
request body arrived (the kernel's receive timestamp), when it read it and when it wrote each
token, and reports the client's error per concurrency level, the way slotbench itself drives
them (execute.py: one shared backend, a thread pool of C workers, N requests).

Joined by request id (the prompt starts "Request 000123"), per level and format:

- TTFT error: client TTFT (t_first - t_sent) - true TTFT (body arrived -> first token
  written: t_tok[0] - t_arrive, or t_body for a truth log without t_arrive); split into wire lag
  (t_sent -> body arrived in the server's socket) and receive lag (first token written -> client
  t_first).
- server read lag: t_body - t_arrive, how long the pacer took to read a body that had arrived
  (a burst's bodies are read one after another, ~3 ms for 256 on one core). The server's own
  delay, so part of the true TTFT and not of the client's error; reported to show it.
- ITL error: client chunk-arrival gaps - true write gaps (openai and ollama backends take a
  timestamp per chunk; llamacpp only for the first token, so only its gen_s is compared).
- user-rate error: output_tokens/gen_s vs the truth; agg tok/s error: client
  tokens / (last t_done - first t_sent) vs truth tokens / (last write - first body
  arrival).
- send lag: t_sent - the moment that request's worker became free (previous request returned,
  or the level's start); CPU per token: the client process's time.process_time() per token.
- lost / duplicated / unexpected requests: every request sent must appear exactly once in the
  truth log and vice versa.

    python benchmarks/fidelity.py             # levels 1 4 16 64 256, all formats
    python benchmarks/fidelity.py --quick     # levels 1 and 4
    python benchmarks/fidelity.py --scripts ../other-checkout/scripts   # another copy's backends
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it: the doubles in tests/doubles/
from doubles.pacer import start_subprocess  # noqa: E402

FORMATS = {  # name → target fields
    "llamacpp": {"backend": "llamacpp"},
    "ollama": {"backend": "ollama"},
    "openai": {"backend": "openai", "endpoint": "completions"},
    "openai-chat": {"backend": "openai", "endpoint": "chat"},
}
FILLER = "tell me a short story about a lighthouse keeper and the sea at night".split()


def pct(values, q: float):
    """The q-quantile (0..1), nearest-rank on sorted values; None when empty."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    k = min(len(vals) - 1, max(0, round(q * (len(vals) - 1))))
    return vals[k]


def prompt_for(gid: int, words: int) -> str:
    body = (FILLER * (words // len(FILLER) + 1))[: max(words - 2, 0)]
    return f"Request {gid:06d} " + " ".join(body)


def read_truth(path: Path, offset: int) -> tuple[list[dict], int]:
    with open(path) as f:
        f.seek(offset)
        text = f.read()
        end = f.tell()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows, end


def run_level(clients, concurrency: int, n: int, num_predict: int, words: int,
              first_gid: int, processes: int) -> dict:
    """N requests with C in flight, as execute.py sends a cell: the rep plan's split over
    ``processes`` client processes (slotbench.measure.clients), one event loop each."""
    from slotbench.measure.loadgen import CellFailed
    from slotbench.measure.plan import split_streams

    requests = [{"request": gid, "prompt": prompt_for(gid, words), "seed": 1}
                for gid in range(first_gid, first_gid + n)]
    by_id = {r["request"]: r for r in requests}
    shares = [s | {"requests": [by_id[i] for i in s["requests"]]}
              for s in split_streams(concurrency, list(by_id), processes)]
    errors, records, stats = [], [], []
    try:
        records, stats = clients.cell(shares, num_predict, 0.0)
    except CellFailed as exc:
        errors.append(f"request {exc.index}: {exc.error}")
    return {"records": {r["request"]: rec for r, rec in zip(requests, records)},
            "shares": shares, "stats": stats, "errors": errors,
            "cpu_s": sum(st["cpu_s"] for st in stats), "n": n, "first_gid": first_gid}


def send_lags(level: dict) -> list[float]:
    """Per request: how long after its stream was free it went out (each process's loop keeps
    its own streams; a stream is free at its previous request's end, or the cell's start)."""
    from slotbench.checks.client import _intended  # the self-check's own definition

    import numpy as np

    out = []
    for share in level["shares"]:
        recs = [level["records"][r["request"]] for r in share["requests"]
                if r["request"] in level["records"]]
        recs.sort(key=lambda rec: rec["t_sent_s"])
        if not recs:
            continue
        sent = np.array([r["t_sent_s"] for r in recs])
        done = np.array([r["t_done_s"] for r in recs])
        intended = _intended(sent, done, share["streams"])
        out += list(np.maximum(0.0, sent - intended))
    return out


def analyse(level: dict, truth_rows: list[dict]) -> dict:
    by_id = collections.defaultdict(list)
    for row in truth_rows:
        by_id[row["id"]].append(row)
    sent = {f"{gid:06d}": level["records"].get(gid)
            for gid in range(level["first_gid"], level["first_gid"] + level["n"])}
    lost = [i for i in sent if i not in by_id]
    dup = [i for i in sent if len(by_id.get(i, [])) > 1]
    unexpected = [i for i in by_id if i not in sent]
    incomplete = [r["id"] for r in truth_rows if not r.get("completed")]
    ttft_err, recv_lag, wire_lag, itl_err, rate_err, arr_lag = ([] for _ in range(6))
    read_lag = []  # the pacer's own delay reading a body that had arrived (t_body - t_arrive)
    send_lag = send_lags(level)
    pacer_late = []
    tokens_client = 0
    t_sent, t_done = [], []
    for rid, rec in sent.items():
        if rec is None:
            continue
        tokens_client += rec["output_tokens"] or 0
        t_sent.append(rec["t_sent_s"])
        t_done.append(rec["t_done_s"])
        rows = by_id.get(rid)
        if not rows or not rows[0]["t_tok"]:
            continue
        tr = rows[0]
        tok = tr["t_tok"]
        t_arrive = tr.get("t_arrive", tr["t_body"])  # the body's last byte in the socket
        true_ttft = tok[0] - t_arrive  # the server's read delay is part of its TTFT
        if rec["t_first_s"] is not None:
            ttft_err.append((rec["t_first_s"] - rec["t_sent_s"]) - true_ttft)
            recv_lag.append(rec["t_first_s"] - tok[0])
        wire_lag.append(t_arrive - rec["t_sent_s"])
        read_lag.append(tr["t_body"] - t_arrive)
        chunk_times = (rec.get("arrivals") or [])[: len(tok)]  # the token lines come first
        if len(chunk_times) == len(tok):
            arr_lag += [c - t for c, t in zip(chunk_times, tok)]
            itl_err += [(chunk_times[i] - chunk_times[i - 1]) - (tok[i] - tok[i - 1])
                        for i in range(1, len(tok))]
        if rec["gen_s"] and len(tok) > 1:
            # the per-user rate each backend reports vs the rate the truth log implies; a
            # server-timed backend uses the pacer's true gen_s (first → last write), a
            # client-timed one scales n-1 gaps to n tokens, so compare like with like
            true_gen = tok[-1] - tok[0]
            if rec["timing_source"] == "client":
                true_gen *= len(tok) / (len(tok) - 1)
            rate_err.append(true_gen / rec["gen_s"] - 1)
        pacer_late += [tok[i] - tok[i - 1] for i in range(1, len(tok))]
    ok = [r for r in truth_rows if r["id"] in sent and r["t_tok"]]
    tokens_truth = sum(r["n_written"] for r in ok)
    agg_err = truth_tps = None
    if ok and t_sent:
        truth_wall = (max(r["t_tok"][-1] for r in ok)
                      - min(r.get("t_arrive", r["t_body"]) for r in ok))
        client_wall = max(t_done) - min(t_sent)
        agg_err = (tokens_client / client_wall) / (tokens_truth / truth_wall) - 1
        truth_tps = tokens_truth / truth_wall
    return {
        "requests": len(sent), "ok": sum(1 for v in sent.values() if v is not None),
        "errors": level["errors"][:3], "lost": len(lost), "duplicated": len(dup),
        "unexpected": len(unexpected), "incomplete": len(incomplete),
        "ttft_err_p50": pct(ttft_err, 0.5), "ttft_err_p90": pct(ttft_err, 0.9),
        "ttft_err_p99": pct(ttft_err, 0.99),
        "recv_lag_p50": pct(recv_lag, 0.5), "recv_lag_p99": pct(recv_lag, 0.99),
        "wire_lag_p50": pct(wire_lag, 0.5), "wire_lag_p99": pct(wire_lag, 0.99),
        "read_lag_p50": pct(read_lag, 0.5), "read_lag_p99": pct(read_lag, 0.99),
        "arrival_lag_p50": pct(arr_lag, 0.5), "arrival_lag_p99": pct(arr_lag, 0.99),
        "itl_err_p50": pct(itl_err, 0.5), "itl_err_p99": pct(itl_err, 0.99),
        "rate_err_p50": pct(rate_err, 0.5), "agg_tps_err": agg_err,
        "send_lag_p50": pct(send_lag, 0.5), "send_lag_p99": pct(send_lag, 0.99),
        "cpu_us_per_token": level["cpu_s"] / tokens_client * 1e6 if tokens_client else None,
        "busy_max": max((st["busy"] or 0 for st in level["stats"]), default=None),
        "lag_p95_max": max((st["lag_p95_s"] or 0 for st in level["stats"]), default=None),
        "processes": len(level["stats"]),
        "true_gap_p50": pct(pacer_late, 0.5), "true_gap_p99": pct(pacer_late, 0.99),
        "tokens_client": tokens_client, "tokens_truth": tokens_truth, "truth_tps": truth_tps,
    }


COLUMNS = [  # (header, key, scale, format)
    ("ok/sent", None, None, None),
    ("lost", "lost", 1, "d"), ("dup", "duplicated", 1, "d"), ("unexp", "unexpected", 1, "d"),
    ("TTFT err p50 ms", "ttft_err_p50", 1e3, ".3f"), ("p99", "ttft_err_p99", 1e3, ".3f"),
    ("recv lag p50 ms", "recv_lag_p50", 1e3, ".3f"), ("p99", "recv_lag_p99", 1e3, ".3f"),
    ("wire lag p50 ms", "wire_lag_p50", 1e3, ".3f"), ("p99", "wire_lag_p99", 1e3, ".3f"),
    ("server read lag p50 ms", "read_lag_p50", 1e3, ".3f"), ("p99", "read_lag_p99", 1e3, ".3f"),
    ("ITL err p50 ms", "itl_err_p50", 1e3, ".3f"), ("p99", "itl_err_p99", 1e3, ".3f"),
    ("user-rate err", "rate_err_p50", 100, ".2f%"), ("agg tok/s err", "agg_tps_err", 100, ".2f%"),
    ("send lag p50 ms", "send_lag_p50", 1e3, ".3f"), ("p99", "send_lag_p99", 1e3, ".3f"), ("CPU µs/tok", "cpu_us_per_token", 1, ".1f"),
    ("procs", "processes", 1, "d"), ("busy max", "busy_max", 100, ".0f%"),
    ("true gap p99 ms", "true_gap_p99", 1e3, ".2f"),
]


def _cell(res: dict, key, scale, fmt) -> str:
    if key is None:
        return f"{res['ok']}/{res['requests']}"
    v = res.get(key)
    if v is None:
        return "–"
    if fmt.endswith("%"):
        return f"{v * scale:{fmt[:-1]}}%"
    return f"{v * scale:{fmt}}"


def table(concurrency: int, rows: dict[str, dict]) -> str:
    out = [f"### concurrency {concurrency}", "",
           "| format | " + " | ".join(h for h, *_ in COLUMNS) + " |",
           "| --- | " + " | ".join("---" for _ in COLUMNS) + " |"]
    for name, res in rows.items():
        out.append(f"| {name} | " + " | ".join(_cell(res, *c[1:]) for c in COLUMNS) + " |")
    for name, res in rows.items():
        for e in res["errors"]:
            out.append(f"\n{name} error: {e}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64, 256],
                    help="concurrency levels (default 1 4 16 64 256)")
    ap.add_argument("--quick", action="store_true", help="concurrency 1 and 4 only")
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS),
                    help="backends/wire formats to measure (default: all)")
    ap.add_argument("--requests", type=int, default=None,
                    help="requests per level (default max(4*C, 32))")
    ap.add_argument("--tokens", type=int, default=32, help="num_predict per request (32)")
    ap.add_argument("--prompt-words", type=int, default=24, help="prompt length in words (24)")
    ap.add_argument("--ttft-ms", type=float, default=50.0, help="pacer TTFT (50)")
    ap.add_argument("--gap-ms", type=float, default=10.0, help="pacer inter-token gap (10)")
    ap.add_argument("--pacer-arg", action="append", default=[],
                    help="extra argument for pacer.py (repeatable), e.g. --pacer-arg=--no-nodelay")
    ap.add_argument("--scripts", type=Path, default=REPO / "scripts",
                    help="directory holding the slotbench package to measure (default: this "
                         "worktree's scripts/)")
    ap.add_argument("--processes", default="1",
                    help="client processes per level: a number, or auto (one per 128 streams, "
                         "at most one per client CPU), as client.processes (default 1)")
    ap.add_argument("--client-cpus", type=int, nargs="+",
                    help="pin this process and the client processes to these CPUs")
    ap.add_argument("--json", type=Path, help="write every level's results here")
    ap.add_argument("--truth-log", type=Path, help="keep the truth log here (default: temp)")
    args = ap.parse_args(argv)
    levels = [1, 4] if args.quick else args.levels

    sys.path.insert(0, str(args.scripts.resolve()))
    from slotbench.measure.backends import make_backend
    from slotbench.measure.clients import Clients
    from slotbench.core.defaults import default
    from slotbench.measure.plan import auto_processes

    if args.client_cpus:
        os.sched_setaffinity(0, args.client_cpus)
    cpus = len(os.sched_getaffinity(0))
    per = default("client.streams_per_process")
    procs = {c: (auto_processes(c, cpus, per) if args.processes == "auto"
                 else int(args.processes)) for c in levels}

    tmp = tempfile.TemporaryDirectory()
    truth = args.truth_log or Path(tmp.name) / "truth.jsonl"
    truth.write_text("")
    proc, url = start_subprocess(["--ttft-ms", str(args.ttft_ms), "--gap-ms", str(args.gap_ms),
                                  "--truth-log", str(truth), *args.pacer_arg])
    print(f"pacer at {url} (ttft {args.ttft_ms} ms, gap {args.gap_ms} ms, "
          f"{args.tokens} tokens); backends from {args.scripts}; pid {os.getpid()}", flush=True)
    all_results = {}
    load0 = tuple(round(x, 2) for x in os.getloadavg())
    offset = 0
    gid = 1
    try:
        for name in args.formats:
            target = {"name": "pacer", "backend": FORMATS[name]["backend"], "managed": False,
                      "url": url, "model": "pacer", "keep_arrivals": True,
                      **FORMATS[name]}
            backend = make_backend(target, url, 60)
            with Clients(backend, target, url, 60, max(procs.values()),
                         args.client_cpus) as clients:
                # warm-up, as a rep's: a connection for every stream of the widest level (and
                # the openai backend's server probe); not measured
                wide = max(levels)
                warm = run_level(clients, wide, wide, 4, args.prompt_words, 900000 + gid,
                                 max(procs.values()))
                gid += wide
                if warm["errors"]:
                    raise SystemExit(f"{name} warm-up failed: {warm['errors'][0]}")
                time.sleep(0.1)
                offset = len(truth.read_bytes())
                _levels(clients, args, levels, procs, name, truth, all_results, gid)
                gid += sum(args.requests or max(4 * c, 32) for c in levels)
    finally:
        proc.terminate()
        proc.wait(10)
    _report(args, levels, all_results, load0)
    return 0


def _levels(clients, args, levels, procs, name, truth, all_results, gid) -> None:
    offset = len(truth.read_bytes())
    for c in levels:
        n = args.requests or max(4 * c, 32)
        level = run_level(clients, c, n, args.tokens, args.prompt_words, gid, procs[c])
        gid += n
        time.sleep(0.2)  # the pacer logs a request right after its last write
        rows, offset = read_truth(truth, offset)
        res = analyse(level, rows)
        all_results.setdefault(c, {})[name] = res
        print(f"[{name} C={c}] ok {res['ok']}/{res['requests']} TTFT err p50 "
              f"{(res['ttft_err_p50'] or 0) * 1e3:.3f} ms, {res['processes']} process(es), "
              f"CPU {res['cpu_us_per_token'] or 0:.1f} µs/token", file=sys.stderr, flush=True)


def _report(args, levels, all_results, load0) -> None:
    print(f"\nload average before/after: {load0} / {tuple(round(x, 2) for x in os.getloadavg())}")
    print()
    for c in levels:
        print(table(c, all_results.get(c, {})))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "results": all_results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
