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
  or the level's start); CPU per token: the loop thread's time.thread_time() per token.
- lost / duplicated / unexpected requests: every request sent must appear exactly once in the
  truth log and vice versa.

    python benchmarks/fidelity.py             # levels 1 4 16 64 256, all formats
    python benchmarks/fidelity.py --quick     # levels 1 and 4
    python benchmarks/fidelity.py --scripts ../other-checkout/scripts   # another copy's backends
    python benchmarks/fidelity.py --levels 64 --formats llamacpp --telemetry 0.1 --repeat 3

With ``--telemetry SECONDS`` each level runs with and without a telemetry scraper, interleaved
(ABBA: without, with, then with, without, ...; ``--repeat`` pairs), to show what scraping costs
the client. "With" runs slotbench's own scraper as a rep does (--scraper process, the default:
ScraperProcess, a child process), or (--scraper thread) its Scraper in this process, the one
whose thread runs the load generator (as a rep with one client process once did), inside
``scraper.cell(...)`` for the whole level, every SECONDS, against scripted Prometheus exporters
(tests/doubles/exporter.py) served by another process: llama-server's own exposition
(tests/data/llamacpp-metrics.txt, 15 series) and a dcgm-exporter with its default fields for 8
GPUs (--exposition). Besides the client's errors it reports the scrapes taken, their mean wall
and CPU time, this process's CPU per token (the loop thread's, which the self-check reads,
leaves the scraper's thread out) and with/without ratios.
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
# dcgm-exporter's default fields (etc/default-counters.csv): (name, kind, value)
DCGM_FIELDS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", 1980), ("DCGM_FI_DEV_MEM_CLOCK", "gauge", 9001),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", 0), ("DCGM_FI_DEV_GPU_TEMP", "gauge", 61),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", 0), ("DCGM_FI_DEV_GPU_UTIL", "gauge", 97),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", 41), ("DCGM_FI_DEV_ENC_UTIL", "gauge", 0),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", 0), ("DCGM_FI_DEV_XID_ERRORS", "gauge", 0),
    ("DCGM_FI_DEV_FB_FREE", "gauge", 4112), ("DCGM_FI_DEV_FB_USED", "gauge", 41480),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", 542),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", 0),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", 0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", 0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", 0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", 0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", 0.93), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", 0.41),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", 0.77), ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", 2.1e8),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", 1.7e8),
]
EXPOSITIONS = ("llamacpp", "dcgm8")
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


def exposition_series(kind: str) -> dict:
    """A scripted exporter's series (tests/doubles/exporter.py): ``llamacpp``, llama-server's
    /metrics as recorded in tests/data/llamacpp-metrics.txt (its counters growing); ``dcgm8``,
    dcgm-exporter's default fields for 8 GPUs, labelled as it labels them (dcgm() gives power
    and energy)."""
    from doubles.exporter import dcgm, labelled

    if kind == "llamacpp":
        kinds, series = {}, {}
        for line in (REPO / "tests/data/llamacpp-metrics.txt").read_text().splitlines():
            if line.startswith("# TYPE "):
                _, _, name, k = line.split()
                kinds[name] = k
            elif line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                k, v = kinds.get(name, "gauge"), float(value)
                series[name] = (k, (lambda t, v=v: v + 100 * t) if k == "counter"
                                else (lambda t, v=v: v))
        return series
    series = dcgm(gpus=8)
    for name, k, value in DCGM_FIELDS:
        for gpu in range(8):
            key = labelled(name, gpu=str(gpu), UUID=f"GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc4{gpu}",
                           pci_bus_id=f"00000000:0{gpu}:00.0", device=f"nvidia{gpu}",
                           modelName="NVIDIA L40S", Hostname="gpu-node")
            series[key] = (k, lambda t, v=value: v)
    return series


def serve_exporters(kinds: list[str]) -> None:
    """In a process of its own: one Exporter per kind; prints their /metrics URLs as a JSON
    line, serves until stdin closes."""
    from doubles.exporter import Exporter

    exporters = [Exporter(exposition_series(k)).start() for k in kinds]
    print(json.dumps([e.url + "/metrics" for e in exporters]), flush=True)
    sys.stdin.read()
    for e in exporters:
        e.stop()


def start_exporters(kinds: list[str], cpus: list[int] | None):
    """The exporters in another process (as a rep's exporter is another process or machine),
    pinned to ``cpus``: (process, URLs)."""
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import fidelity; "
            f"fidelity.serve_exporters({list(kinds)!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"the exporter process ended with code {proc.wait()}")
    return proc, json.loads(line)


def timed_scraper(sources: list[str], interval_s: float):
    """slotbench's Scraper, each round of scrapes timed: wall and this thread's CPU."""
    from slotbench.measure.telemetry import Scraper

    class Timed(Scraper):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.rounds: list[tuple[str | None, float, float]] = []

        def scrape_now(self, phase=None):
            t0, c0 = time.monotonic(), time.thread_time()
            taken = super().scrape_now(phase)
            self.rounds.append((phase, time.monotonic() - t0, time.thread_time() - c0))
            return taken

    return Timed(sources, interval_s, origin=time.monotonic())


def process_scraper(sources: list[str], interval_s: float, client_cpus=None):
    """What a rep runs: slotbench's ScraperProcess, the scraper in a child process, off the
    client's CPUs where it has some."""
    from slotbench.measure.telemetry import ScraperProcess

    return ScraperProcess(sources, interval_s, origin=time.monotonic(), client_cpus=client_cpus)


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
    cpu0 = time.process_time()  # every thread of this process: the loop's, a scraper's
    try:
        records, stats = clients.cell(shares, num_predict, 0.0)
    except CellFailed as exc:
        errors.append(f"request {exc.index}: {exc.error}")
    return {"records": {r["request"]: rec for r, rec in zip(requests, records)},
            "shares": shares, "stats": stats, "errors": errors,
            "cpu_s": sum(st["cpu_s"] for st in stats),
            "process_cpu_s": time.process_time() - cpu0, "n": n, "first_gid": first_gid}


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


def processes_in(level: dict) -> int:
    return len(level["stats"]) or 1


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
        "process_cpu_us_per_token": (level["process_cpu_s"] / tokens_client * 1e6
                                     if tokens_client and processes_in(level) == 1 else None),
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
    ap.add_argument("--telemetry", type=float, metavar="SECONDS",
                    help="run each level without and with a telemetry scraper in this process "
                         "scraping every SECONDS, interleaved (default: no scraper)")
    ap.add_argument("--scraper", choices=["process", "thread"], default="process",
                    help="with --telemetry: the scraper in a child process, as a rep runs it "
                         "(ScraperProcess), or on a thread of the client's process (Scraper); "
                         "default process")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each level (with --telemetry: pairs, in ABBA order; default 1)")
    ap.add_argument("--exposition", nargs="+", choices=EXPOSITIONS, default=list(EXPOSITIONS),
                    help="with --telemetry: the exporters scraped, each its own endpoint "
                         "(default: llamacpp dcgm8)")
    ap.add_argument("--exporter-cpus", type=int, nargs="+",
                    help="with --telemetry: pin the exporters' process to these CPUs")
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

    exporter = sources = None
    if args.telemetry is not None:
        exporter, sources = start_exporters(args.exposition, args.exporter_cpus)
        print(f"exporters at {', '.join(sources)} (pid {exporter.pid}); scraped every "
              f"{args.telemetry:g} s in the 'with' runs", flush=True)
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
                _levels(clients, args, levels, procs, name, truth, all_results, gid, sources)
                gid += args.repeat * (2 if sources else 1) * sum(
                    args.requests or max(4 * c, 32) for c in levels)
    finally:
        proc.terminate()
        proc.wait(10)
        if exporter is not None:
            exporter.stdin.close()
            exporter.wait(10)
    _report(args, levels, all_results, load0)
    return 0


def _levels(clients, args, levels, procs, name, truth, all_results, gid, sources=None) -> None:
    offset = len(truth.read_bytes())
    for c in levels:
        n = args.requests or max(4 * c, 32)
        for rep in range(args.repeat):
            # ABBA: each condition as often first as second, so a drift in the machine's load
            # falls on both alike
            order = ([None] if not sources else
                     ["without", "with"] if rep % 2 == 0 else ["with", "without"])
            for condition in order:
                scraper = None
                if condition == "with":
                    scraper = (timed_scraper(sources, args.telemetry) if args.scraper == "thread"
                               else process_scraper(sources, args.telemetry,
                                                    args.client_cpus))
                    with scraper, scraper.cell(c, rep):
                        level = run_level(clients, c, n, args.tokens, args.prompt_words, gid,
                                          procs[c])
                else:
                    level = run_level(clients, c, n, args.tokens, args.prompt_words, gid,
                                      procs[c])
                gid += n
                time.sleep(0.2)  # the pacer logs a request right after its last write
                rows, offset = read_truth(truth, offset)
                res = analyse(level, rows)
                key = name
                if condition is not None:
                    res |= {"condition": condition, "repetition": rep + 1}
                    res |= _scrape_stats(scraper)
                    key = f"{name} {condition} #{rep + 1}"
                elif args.repeat > 1:
                    key = f"{name} #{rep + 1}"
                all_results.setdefault(c, {})[key] = res
                extra = ("" if scraper is None else f", {res['scrapes_during']} scrapes"
                         + ("" if res["scrape_ms_mean"] is None
                            else f" of {res['scrape_ms_mean']:.2f} ms"))
                print(f"[{key} C={c}] ok {res['ok']}/{res['requests']} TTFT err p50 "
                      f"{(res['ttft_err_p50'] or 0) * 1e3:.3f} ms, {res['processes']} "
                      f"process(es), CPU {res['cpu_us_per_token'] or 0:.1f} µs/token{extra}",
                      file=sys.stderr, flush=True)


def _scrape_stats(scraper) -> dict:
    """What the scraper did during the level (its rounds: one scrape of every source)."""
    if scraper is None:
        return {"scrapes_during": 0, "scrape_rounds": 0, "scrape_errors": 0,
                "scrape_ms_mean": None, "scrape_cpu_ms_mean": None, "scrape_cpu_s": 0.0}
    if not hasattr(scraper, "rounds"):  # a ScraperProcess: its records, no timing per round
        recs = scraper.records()
        return {"scrapes_during": sum(r["phase"] == "during" for r in recs), "scrape_rounds": 0,
                "scrape_errors": sum(1 for r in recs if r["error"]),
                "samples_per_round": sum(len(r["samples"] or []) for r in recs
                                         if r["phase"] == "before"),
                "scrape_ms_mean": None, "scrape_cpu_ms_mean": None, "scrape_cpu_s": 0.0}
    rounds = scraper.rounds
    during = [s for s in scraper.scrapes if s.phase == "during"]
    return {"scrapes_during": len(during), "scrape_rounds": len(rounds),
            "scrape_errors": sum(1 for s in scraper.scrapes if s.error),
            "samples_per_round": sum(len(s.samples or []) for s in scraper.scrapes
                                     if s.phase == "before"),
            "scrape_ms_mean": statistics.fmean(w for _, w, _ in rounds) * 1e3,
            "scrape_cpu_ms_mean": statistics.fmean(c for _, _, c in rounds) * 1e3,
            "scrape_cpu_s": sum(c for p, _, c in rounds if p == "during")}


# with/without: (header, key, scale, format)
COMPARED = [
    ("TTFT err p50 ms", "ttft_err_p50", 1e3, ".3f"), ("TTFT err p99 ms", "ttft_err_p99", 1e3, ".3f"),
    ("ITL err p99 ms", "itl_err_p99", 1e3, ".3f"), ("send lag p99 ms", "send_lag_p99", 1e3, ".3f"),
    ("agg tok/s err %", "agg_tps_err", 100, ".3f"),
    ("loop CPU µs/tok", "cpu_us_per_token", 1, ".2f"),
    ("process CPU µs/tok", "process_cpu_us_per_token", 1, ".2f"),
    ("loop lag p95 ms", "lag_p95_max", 1e3, ".3f"),
]


def comparison(concurrency: int, rows: dict[str, dict]) -> str:
    """Per format: each measure's median (and min–max) over the repetitions of each condition,
    and with/without: the ratio of the medians and their difference."""
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for key, res in rows.items():
        if "condition" in res:
            by[key.split(" ", 1)[0]][res["condition"]].append(res)
    out = [f"### concurrency {concurrency}: with vs without the scraper", "",
           "| format | measure | without: median (min–max) | with: median (min–max) | "
           "with / without | with − without |", "| --- | --- | --- | --- | --- | --- |"]
    for name, conds in by.items():
        for header, key, scale, fmt in COMPARED:
            def summary(cond):
                vals = [r[key] * scale for r in conds[cond] if r.get(key) is not None]
                if not vals:
                    return None, "–"
                med = statistics.median(vals)
                return med, f"{med:{fmt}} ({min(vals):{fmt}}–{max(vals):{fmt}})"
            (m0, s0), (m1, s1) = summary("without"), summary("with")
            ratio = f"{m1 / m0:.3f}" if m0 and m1 is not None else "–"
            diff = f"{m1 - m0:+{fmt}}" if m0 is not None and m1 is not None else "–"
            out.append(f"| {name} | {header} | {s0} | {s1} | {ratio} | {diff} |")
        withs = conds["with"]
        if withs:
            out.append(f"| {name} | scrapes during the level | – | "
                       f"{'/'.join(str(r['scrapes_during']) for r in withs)} "
                       f"({withs[0].get('samples_per_round')} samples a round; errors "
                       f"{sum(r['scrape_errors'] for r in withs)}) | – | – |")
            if all(r["scrape_ms_mean"] is not None for r in withs):  # a thread: timed
                out.append(f"| {name} | scrape round mean ms (wall / CPU) | – | "
                           + "; ".join(f"{r['scrape_ms_mean']:.2f} / "
                                       f"{r['scrape_cpu_ms_mean']:.2f}" for r in withs)
                           + " | – | – |")
    return "\n".join(out) + "\n"


def _report(args, levels, all_results, load0) -> None:
    print(f"\nload average before/after: {load0} / {tuple(round(x, 2) for x in os.getloadavg())}")
    print()
    for c in levels:
        print(table(c, all_results.get(c, {})))
    if args.telemetry is not None:
        for c in levels:
            print(comparison(c, all_results.get(c, {})))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "results": all_results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
