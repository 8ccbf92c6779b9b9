"""Run established LLM benchmark tools ("peers") against the pacer and grade them by its truth.

Why: slotbench's client error (benchmarks/fidelity.py) means little without a yardstick. The
peers here (NVIDIA AIPerf, guidellm, inference-perf, genai-perf + perf_analyzer) are what
others use to measure TTFT and inter-token latency; run against tests/doubles/pacer.py, whose
truth log records when each request body was read and each token written, their errors are
known too.

Peers are never project dependencies and never run in CI: each is installed into its own
virtual environment under ``$SLOTBENCH_CACHE/peers/<peer>/venv`` (default
``~/.cache/slotbench/peers``), with the versions below, and pointed at a small local
tokenizer (benchmarks/peer_tokenizer.py) so that nothing is downloaded from a model hub.

Each peer's per-request output is joined with the truth log by the completion id the pacer
sends (``cmpl-pacer-<seq>``) or the ``X-Request-Id`` header the peer sent (AIPerf):

- TTFT error = peer's TTFT - true TTFT (body read -> first token written), per request;
- ITL error = peer's gap between chunks - the true gap between the two writes (per token where
  the peer records chunk times; per request, mean over the request's gaps, for guidellm).

    python benchmarks/peers.py install            # all peers (minutes; torch for guidellm)
    python benchmarks/peers.py run --levels 1 4 16 64
    python benchmarks/peers.py run --peers aiperf --levels 4 --json out.json
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))  # tests/, as pytest has it: the doubles in tests/doubles/
from doubles.pacer import start_subprocess  # noqa: E402
from fidelity import analyse, pct, read_truth, run_level  # noqa: E402

CACHE = Path(os.environ.get("SLOTBENCH_CACHE", Path.home() / ".cache" / "slotbench")) / "peers"
TOKENIZER = CACHE / "tokenizer"
ISL = OSL = 32
CMPL_ID = re.compile(r'"id":\s*"cmpl-pacer-(\d+)"')


@dataclass
class Peer:
    name: str
    python: str  # "3.11" or "3.12"
    pip: list[list[str]]  # pip install steps, in order
    exe: str
    notes: str = ""
    env_unset: list[str] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return CACHE / self.name

    @property
    def venv(self) -> Path:
        return self.home / "venv"

    def bin(self, name: str | None = None) -> Path:
        return self.venv / "bin" / (name or self.exe)


PEERS = {
    "aiperf": Peer(
        "aiperf", "3.11", [["aiperf==0.13.0"]], "aiperf",
        notes="works only with HF_HUB_OFFLINE unset; --tokenizer builtin would download",
        env_unset=["HF_HUB_OFFLINE"],
    ),
    "guidellm": Peer(
        "guidellm", "3.11",
        # the CPU-only torch (on this machine's local wheel store) first, or pip resolves a
        # multi-GB CUDA build for guidellm's torch requirement
        [["torch==2.13.0"], ["guidellm==0.8.1"]], "guidellm",
    ),
    "inference-perf": Peer("inference-perf", "3.12", [["inference-perf==0.7.0"]],
                           "inference-perf", notes="needs Python >= 3.12"),
    "genai-perf": Peer(
        "genai-perf", "3.11",
        # perf_analyzer (C++) ships in the tritonclient wheel; 2.50.0's needs glibc this OS
        # has. It links libcudart.so.12 (from nvidia-cuda-runtime-cu12) and libb64.so.0d
        # (Debian's libb64-0d, extracted into the peer's own directory, not installed)
        [["genai-perf==0.0.16", "tritonclient[all]==2.50.0"],
         ["nvidia-cuda-runtime-cu12==12.9.79"]], "genai-perf",
    ),
}


# --- installing ---------------------------------------------------------------------------


def find_python(version: str) -> str:
    """A working interpreter for ``version`` (pyenv shims may exist and still fail)."""
    candidates = [shutil.which(f"python{version}"), f"/usr/bin/python{version}"]
    candidates += sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}*/bin/python{version}")))
    for c in candidates:
        if c and Path(c).exists():
            ok = subprocess.run([c, "-c", "import venv"], capture_output=True)
            if ok.returncode == 0:
                return c
    raise SystemExit(f"no working python{version} found (tried {candidates})")


def _run_logged(cmd: list[str], log: Path, env=None) -> None:
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        raise SystemExit(f"failed ({rc}): {' '.join(cmd)}; see {log}")


def genai_perf_libs(peer: Peer) -> list[str]:
    """Directories perf_analyzer needs on LD_LIBRARY_PATH; fetches libb64 if missing."""
    sysroot = peer.home / "sysroot"
    lib = sysroot / "usr/lib/x86_64-linux-gnu"
    if not (lib / "libb64.so.0d").exists():
        debs = peer.home / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        if not list(debs.glob("libb64-0d_*.deb")):  # Debian's package, downloaded only
            subprocess.run(["apt-get", "download", "libb64-0d"], cwd=debs, check=True)
        deb = sorted(debs.glob("libb64-0d_*.deb"))[-1]
        subprocess.run(["dpkg", "-x", str(deb), str(sysroot)], check=True)
    cudart = glob.glob(str(peer.venv / "lib/python*/site-packages/nvidia/cuda_runtime/lib"))
    return [str(lib)] + cudart


def install(peer: Peer, force: bool = False) -> None:
    marker = peer.home / "installed.json"
    spec = {"pip": peer.pip, "python": peer.python}
    if not force and marker.exists() and json.loads(marker.read_text()) == spec:
        print(f"{peer.name}: installed ({peer.venv})")
        return
    peer.home.mkdir(parents=True, exist_ok=True)
    log = peer.home / "install.log"
    if not peer.bin("python").exists():
        _run_logged([find_python(peer.python), "-m", "venv", str(peer.venv)], log)
    for step in peer.pip:
        _run_logged([str(peer.bin("pip")), "install", "--quiet", *step], log)
    if peer.name == "genai-perf":
        genai_perf_libs(peer)
    marker.write_text(json.dumps(spec))
    print(f"{peer.name}: installed into {peer.venv} (log {log})")


def build_tokenizer(force: bool = False) -> Path:
    """The shared local tokenizer (peer_tokenizer.py), built in any installed peer venv."""
    if (TOKENIZER / "tokenizer.json").exists() and not force:
        return TOKENIZER
    venv_py = next((p.bin("python") for p in PEERS.values() if p.bin("python").exists()), None)
    if venv_py is None:
        raise SystemExit("install a peer first: the tokenizer is built with its `tokenizers`")
    corpora = sorted(glob.glob(str(CACHE / "*/venv/lib/python*/site-packages/**/shakespeare.txt"),
                               recursive=True))[:1]
    subprocess.run([str(venv_py), str(HERE / "peer_tokenizer.py"), str(TOKENIZER), *corpora],
                   check=True)
    return TOKENIZER


# --- running and parsing ------------------------------------------------------------------


def command(peer: Peer, url: str, c: int, n: int, out: Path) -> tuple[list[str], dict]:
    env = {k: v for k, v in os.environ.items() if k not in peer.env_unset}
    env.setdefault("HF_HUB_OFFLINE", "1") if "HF_HUB_OFFLINE" not in peer.env_unset else None
    env["PATH"] = f"{peer.venv / 'bin'}:{env.get('PATH', '')}"
    tok = str(TOKENIZER)
    if peer.name == "aiperf":
        return [str(peer.bin()), "profile", "--model", "pacer", "--url", url,
                "--endpoint-type", "completions", "--streaming", "--tokenizer", tok,
                "--isl", str(ISL), "--isl-stddev", "0", "--osl", str(OSL),
                "--concurrency", str(c), "--request-count", str(n), "--random-seed", "1",
                "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry",
                "--artifact-dir", str(out)], env
    if peer.name == "guidellm":
        return [str(peer.bin()), "run",
                "--backend", f"kind=openai_http,target={url},model=pacer,"
                             "request_format=/v1/completions",
                "--profile", f"kind=concurrent,streams={c}",
                "--constraint", f"kind=max_requests,count={n}",
                "--data", f"kind=synthetic_text,prompt_tokens={ISL},output_tokens={OSL}",
                "--tokenizer", f"kind=huggingface_auto,model={tok}",
                "--output", f"kind=json,path={out / 'benchmarks.json'}",
                "--disable-console-interactive"], env
    if peer.name == "inference-perf":
        dist = {"min": ISL, "max": ISL, "mean": ISL, "std_dev": 0, "total_count": max(n, 64)}
        cfg = {
            "api": {"type": "completion", "streaming": True},
            "server": {"type": "vllm", "model_name": "pacer", "base_url": url, "ignore_eos": True},
            "tokenizer": {"pretrained_model_name_or_path": tok},
            "data": {"type": "random", "input_distribution": dist,
                     "output_distribution": dist | {"min": OSL, "max": OSL, "mean": OSL}},
            "load": {"type": "concurrent", "num_workers": 1, "worker_max_concurrency": max(c, 1),
                     "stages": [{"num_requests": n, "concurrency_level": c}]},
            "report": {"request_lifecycle": {"summary": True, "per_stage": True,
                                             "per_request": True}},
            "storage": {"local_storage": {"path": str(out)}},
        }
        out.mkdir(parents=True, exist_ok=True)
        (out.parent / "inference-perf.yml").write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        return [str(peer.bin()), "--config_file", str(out.parent / "inference-perf.yml")], env
    if peer.name == "genai-perf":
        env["LD_LIBRARY_PATH"] = ":".join(genai_perf_libs(peer) + [env.get("LD_LIBRARY_PATH", "")])
        return [str(peer.bin()), "profile", "-m", "pacer", "--endpoint-type", "completions",
                "--streaming", "--url", url.removeprefix("http://"), "--tokenizer", tok,
                "--synthetic-input-tokens-mean", str(ISL), "--synthetic-input-tokens-stddev", "0",
                "--output-tokens-mean", str(OSL), "--output-tokens-stddev", "0",
                "--concurrency", str(c), "--request-count", str(n), "--random-seed", "1",
                "--artifact-dir", str(out)], env
    raise KeyError(peer.name)


def _seq(text: str) -> int | None:
    m = CMPL_ID.search(text or "")
    return int(m.group(1)) if m else None


def parse(peer: Peer, out: Path) -> dict:
    """Per-request rows {key, ttft_s, gaps_s (list) or itl_mean_s} and the peer's summary."""
    rows, summary = [], {}
    if peer.name == "aiperf":
        for line in open(next(out.rglob("profile_export.jsonl"))):
            r = json.loads(line)
            if r["metadata"].get("benchmark_phase", "profiling") != "profiling":
                continue
            m = r.get("metrics") or {}
            if "time_to_first_token" not in m:
                rows.append({"key": ("xrid", r["metadata"].get("x_request_id")), "error": True})
                continue
            rows.append({"key": ("xrid", r["metadata"]["x_request_id"]),
                         "ttft_s": m["time_to_first_token"]["value"] / 1e3,
                         "gaps_s": [g / 1e3 for g in m.get("inter_chunk_latency", {}).get("value", [])],
                         "tokens": m.get("output_token_count", {}).get("value")})
        s = json.loads(next(out.rglob("profile_export_aiperf.json")).read_text())
        summary = {"ttft_p50": s["time_to_first_token"]["p50"] / 1e3,
                   "ttft_p99": s["time_to_first_token"]["p99"] / 1e3,
                   "itl_p50": s["inter_token_latency"]["p50"] / 1e3,
                   "itl_p99": s["inter_token_latency"]["p99"] / 1e3,
                   "requests": s["request_count"]["avg"],
                   "tok_s": s["output_token_throughput"]["avg"]}
    elif peer.name == "guidellm":
        b = json.loads((out / "benchmarks.json").read_text())["benchmarks"][0]
        for r in b["requests"]["successful"]:
            rows.append({"key": ("seq", _seq(f'"id":"{r.get("response_id")}"')),
                         "ttft_s": r["time_to_first_token_ms"] / 1e3,
                         "itl_mean_s": (r.get("inter_token_latency_ms") or 0) / 1e3,
                         "tokens": r.get("output_tokens")})
        for kind in ("errored", "incomplete"):
            rows += [{"key": ("seq", _seq(f'"id":"{r.get("response_id")}"')), "error": True}
                     for r in b["requests"][kind]]
        m = b["metrics"]
        p = lambda k: m[k]["successful"]["percentiles"]  # noqa: E731
        summary = {"ttft_p50": p("time_to_first_token_ms")["p50"] / 1e3,
                   "ttft_p99": p("time_to_first_token_ms")["p99"] / 1e3,
                   "itl_p50": p("inter_token_latency_ms")["p50"] / 1e3,
                   "itl_p99": p("inter_token_latency_ms")["p99"] / 1e3,
                   "requests": m["request_totals"]["successful"],
                   "tok_s": m["output_tokens_per_second"]["successful"]["mean"]}
    elif peer.name == "inference-perf":
        for r in json.loads(next(out.rglob("per_request_lifecycle_metrics.json")).read_text()):
            info = r.get("info") or {}
            rm = info.get("response_metrics") or {}
            times = rm.get("output_token_times") or rm.get("chunk_times") or []
            if r.get("error") not in (None, "None") or not times:
                rows.append({"key": ("seq", _seq(r.get("response"))), "error": True})
                continue
            rows.append({"key": ("seq", _seq(r.get("response"))),
                         "ttft_s": times[0] - r["start_time"],
                         "gaps_s": [b - a for a, b in zip(times, times[1:])],
                         "tokens": rm.get("output_tokens"),
                         "t_start": r["start_time"], "t_tokens": times})
        s = json.loads(next(out.rglob("summary_lifecycle_metrics.json")).read_text())
        lat = s["successes"]["latency"]
        summary = {"ttft_p50": lat["time_to_first_token"]["median"],
                   "ttft_p99": lat["time_to_first_token"]["p99"],
                   "itl_p50": lat["inter_token_latency"]["median"],
                   "itl_p99": lat["inter_token_latency"]["p99"],
                   "requests": s["successes"]["count"]}
    elif peer.name == "genai-perf":
        exp = json.loads(next(out.rglob("profile_export.json")).read_text())["experiments"][0]
        for r in exp["requests"]:
            outs = r.get("response_outputs") or []
            ts = r.get("response_timestamps") or []
            tok_t = [t for t, o in zip(ts, outs) if '"text":" tok"' in o.get("response", "")]
            key = ("seq", _seq(outs[0]["response"]) if outs else None)
            if not tok_t:
                rows.append({"key": key, "error": True})
                continue
            rows.append({"key": key, "ttft_s": (tok_t[0] - r["timestamp"]) / 1e9,
                         "gaps_s": [(b - a) / 1e9 for a, b in zip(tok_t, tok_t[1:])],
                         "tokens": len(tok_t)})
        s = json.loads(next(out.rglob("profile_export_genai_perf.json")).read_text())
        summary = {"ttft_p50": s["time_to_first_token"]["p50"] / 1e3,
                   "ttft_p99": s["time_to_first_token"]["p99"] / 1e3,
                   "itl_p50": s["inter_token_latency"]["p50"] / 1e3,
                   "itl_p99": s["inter_token_latency"]["p99"] / 1e3,
                   "requests": s["request_count"]["avg"],
                   "tok_s": s["output_token_throughput"]["avg"]}
    return {"rows": rows, "summary": summary}


def grade(parsed: dict, truth_rows: list[dict]) -> dict:
    """Join the peer's requests with the truth log; errors per request and per token."""
    by_seq = {r["seq"]: r for r in truth_rows}
    by_xrid = {r["x_request_id"]: r for r in truth_rows if r.get("x_request_id")}
    ttft_err, itl_err, true_ttft, true_gap = [], [], [], []
    matched, unmatched, errors = 0, 0, 0
    seen = collections.Counter()
    for row in parsed["rows"]:
        kind, key = row["key"]
        tr = (by_seq if kind == "seq" else by_xrid).get(key)
        if row.get("error"):
            errors += 1
        if tr is None or not tr["t_tok"] or row.get("error"):
            unmatched += tr is None
            continue
        matched += 1
        seen[tr["seq"]] += 1
        tok = tr["t_tok"]
        gaps = [b - a for a, b in zip(tok, tok[1:])]
        # true TTFT from the body's arrival (the pacer's read delay is the server's, not the
        # peer's error), as fidelity.py grades slotbench; t_body for an older truth log
        ttft_err.append(row["ttft_s"] - (tok[0] - tr.get("t_arrive", tr["t_body"])))
        if "gaps_s" in row and len(row["gaps_s"]) == len(gaps):
            itl_err += [p - t for p, t in zip(row["gaps_s"], gaps)]
        elif "itl_mean_s" in row and gaps:
            itl_err.append(row["itl_mean_s"] - (tok[-1] - tok[0]) / len(gaps))
    for tr in truth_rows:
        if tr["t_tok"]:
            true_ttft.append(tr["t_tok"][0] - tr.get("t_arrive", tr["t_body"]))
            true_gap += [b - a for a, b in zip(tr["t_tok"], tr["t_tok"][1:])]
    done = [r for r in truth_rows if r.get("completed")]
    tok_s = None
    if done:
        wall = max(r["t_tok"][-1] for r in done) - min(r.get("t_arrive", r["t_body"])
                                                       for r in done)
        tok_s = sum(r["n_written"] for r in done) / wall
    s = parsed["summary"]
    return {
        "peer_requests": s.get("requests"), "peer_rows": len(parsed["rows"]),
        "truth_requests": len(truth_rows), "truth_completed": len(done),
        "matched": matched, "unmatched": unmatched, "peer_errors": errors,
        "duplicated": sum(1 for v in seen.values() if v > 1),
        "ttft_err_p50": pct(ttft_err, 0.5), "ttft_err_p99": pct(ttft_err, 0.99),
        "itl_err_p50": pct(itl_err, 0.5), "itl_err_p99": pct(itl_err, 0.99),
        "itl_err_per": "token" if any("gaps_s" in r for r in parsed["rows"]) else "request",
        "peer_ttft_p50": s.get("ttft_p50"), "true_ttft_p50": pct(true_ttft, 0.5),
        "peer_ttft_p99": s.get("ttft_p99"), "true_ttft_p99": pct(true_ttft, 0.99),
        "peer_itl_p50": s.get("itl_p50"), "true_itl_p50": pct(true_gap, 0.5),
        "peer_itl_p99": s.get("itl_p99"), "true_itl_p99": pct(true_gap, 0.99),
        "peer_tok_s": s.get("tok_s"), "true_tok_s": tok_s,
    }


# --pacer-cpu / --client-cpus: the pacer on its core, every client (slotbench's and each
# peer's, with all its processes) on the others, so that neither grades the other
PINNING: dict = {"pacer": None, "client": None}


def pacer_for(where: Path, ttft_ms: float, gap_ms: float):
    """A fresh pacer (OSL tokens per request) logging its truth into ``where``/truth.jsonl."""
    where.mkdir(parents=True, exist_ok=True)
    truth = where / "truth.jsonl"
    truth.write_text("")
    pin = ["--cpu", str(PINNING["pacer"])] if PINNING["pacer"] is not None else []
    proc, url = start_subprocess(["--ttft-ms", str(ttft_ms), "--gap-ms", str(gap_ms),
                                  "--tokens", str(OSL), "--truth-log", str(truth), *pin])
    return where, truth, proc, url


def run_one(peer: Peer, c: int, n: int, run_dir: Path, ttft_ms: float, gap_ms: float,
            timeout_s: float) -> dict:
    where, truth, proc, url = pacer_for(run_dir / f"{peer.name}-c{c}", ttft_ms, gap_ms)
    cmd, env = command(peer, url, c, n, where / "out")
    if PINNING["client"]:
        cmd = ["taskset", "-c", ",".join(map(str, PINNING["client"])), *cmd]
    t0 = time.monotonic()
    try:
        with open(where / "peer.log", "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=where,
                                timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    finally:
        time.sleep(0.3)
        proc.terminate()
        proc.wait(10)
    result = {"peer": peer.name, "concurrency": c, "requests": n, "rc": rc,
              "wall_s": time.monotonic() - t0, "command": " ".join(cmd), "dir": str(where)}
    truth_rows = [json.loads(x) for x in truth.read_text().splitlines() if x.strip()]
    try:
        result |= grade(parse(peer, where / "out"), truth_rows)
    except (StopIteration, FileNotFoundError, KeyError, IndexError, ValueError) as exc:
        tail = (where / "peer.log").read_text(errors="replace").strip().splitlines()[-8:]
        result |= {"error": f"{type(exc).__name__}: {exc}", "log_tail": tail,
                   "truth_requests": len(truth_rows)}
    return result


def run_slotbench(c: int, n: int, run_dir: Path, ttft_ms: float, gap_ms: float) -> dict:
    """slotbench's own client (the openai backend, /v1/completions, as the peers use it) at the
    same level against a pacer of its own, graded like a peer (benchmarks/fidelity.py), with
    the client processes client.processes "auto" picks for the level."""
    sys.path.insert(0, str(REPO / "scripts"))
    from slotbench.measure.backends import make_backend
    from slotbench.measure.clients import Clients
    from slotbench.core.defaults import default
    from slotbench.measure.plan import auto_processes

    cpus = PINNING["client"] or sorted(os.sched_getaffinity(0))
    processes = auto_processes(c, len(cpus), default("client.streams_per_process"))
    where, truth, proc, url = pacer_for(run_dir / f"slotbench-c{c}", ttft_ms, gap_ms)
    t0 = time.monotonic()
    try:
        target = {"name": "pacer", "managed": False, "url": url, "model": "pacer",
                  "backend": "openai", "endpoint": "completions", "keep_arrivals": True}
        if PINNING["client"]:
            os.sched_setaffinity(0, PINNING["client"])
        with Clients(make_backend(target, url, 60), target, url, 60, processes,
                     PINNING["client"]) as clients:
            # connections (as many as the level will use) and the server probe
            warm = run_level(clients, c, c, 4, ISL, 900000, processes)
            time.sleep(0.1)
            offset = len(truth.read_bytes())
            level = run_level(clients, c, n, OSL, ISL, 1, processes)
            time.sleep(0.3)
            rows, _ = read_truth(truth, offset)
    finally:
        proc.terminate()
        proc.wait(10)
    res = analyse(level, rows)
    done = [r for r in rows if r["t_tok"]]
    return {"peer": "slotbench", "concurrency": c, "requests": n,
            "rc": 0 if not (warm["errors"] or level["errors"]) else 1,
            "wall_s": time.monotonic() - t0,
            "command": f"benchmarks/fidelity.py (openai, {processes} client process(es))",
            "dir": str(where), "peer_requests": res["ok"], "peer_rows": res["requests"],
            "truth_requests": len(rows), "truth_completed": len(done),
            "matched": res["ok"] - res["lost"], "unmatched": res["lost"] + res["unexpected"],
            "peer_errors": len(level["errors"]), "duplicated": res["duplicated"],
            "ttft_err_p50": res["ttft_err_p50"], "ttft_err_p99": res["ttft_err_p99"],
            "itl_err_p50": res["itl_err_p50"], "itl_err_p99": res["itl_err_p99"],
            "itl_err_per": "token", "agg_tps_err": res["agg_tps_err"],
            "peer_ttft_p50": None, "true_ttft_p50": None, "peer_itl_p50": None,
            "true_itl_p50": res["true_gap_p50"], "peer_tok_s": None, "true_tok_s": None}


def by_level(results: list[dict]) -> str:
    """One table per concurrency level, slotbench's row first: TTFT and ITL error against the
    truth, requests lost or duplicated."""
    out = []
    for c in sorted({r["concurrency"] for r in results}):
        rows = sorted((r for r in results if r["concurrency"] == c),
                      key=lambda r: (r["peer"] != "slotbench", r["peer"]))
        out += [f"### {c} in flight", "",
                "| client | requests sent / in the truth log | lost / duplicated | "
                "TTFT err p50 ms | TTFT err p99 ms | ITL err p50 ms | ITL err p99 ms |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            if "error" in r:
                out.append(f"| {r['peer']} | –/{r.get('truth_requests')} | – | {r['error']} "
                           "| | | |")
                continue
            per = "" if r["itl_err_per"] == "token" else f" ({r['itl_err_per']})"
            out.append(
                f"| {r['peer']} | {r['peer_requests']:g} / {r['truth_completed']} | "
                f"{r['unmatched']} / {r['duplicated']} | {ms(r['ttft_err_p50'])} | "
                f"{ms(r['ttft_err_p99'])} | {ms(r['itl_err_p50'])} | "
                f"{ms(r['itl_err_p99'])}{per} |")
        out.append("")
    return "\n".join(out)


def ms(v) -> str:
    return "–" if v is None else f"{v * 1e3:.3f}"


def table(results: list[dict]) -> str:
    out = ["| peer | C | rc | requests peer/truth | matched | TTFT err p50 ms | p99 | "
           "ITL err p50 ms | p99 | ITL err per | peer TTFT p50 | true TTFT p50 | "
           "peer ITL p50 | true ITL p50 | tok/s peer/true |",
           "| --- " * 15 + "|"]
    for r in results:
        if "error" in r:
            out.append(f"| {r['peer']} | {r['concurrency']} | {r['rc']} | –/{r.get('truth_requests')}"
                       f" | – | {r['error']} |" + " |" * 9)
            continue
        tps = (f"{r['peer_tok_s']:.1f}/{r['true_tok_s']:.1f}" if r.get("peer_tok_s")
               and r.get("true_tok_s") else "–")
        out.append(
            f"| {r['peer']} | {r['concurrency']} | {r['rc']} | {r['peer_requests']}/"
            f"{r['truth_completed']} | {r['matched']} | {ms(r['ttft_err_p50'])} | "
            f"{ms(r['ttft_err_p99'])} | {ms(r['itl_err_p50'])} | {ms(r['itl_err_p99'])} | "
            f"{r['itl_err_per']} | {ms(r['peer_ttft_p50'])} | {ms(r['true_ttft_p50'])} | "
            f"{ms(r['peer_itl_p50'])} | {ms(r['true_itl_p50'])} | {tps} |")
    return "\n".join(out)


def _progress(r: dict) -> None:
    print(f"[{r['peer']} C={r['concurrency']}] rc {r['rc']} {r['wall_s']:.0f}s TTFT err p50 "
          f"{ms(r.get('ttft_err_p50'))} ms {r.get('error', '')}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("install", help="create each peer's venv and install it")
    ins.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS),
                     help="peers to install (default: all)")
    ins.add_argument("--force", action="store_true", help="reinstall even if the marker matches")
    sub.add_parser("tokenizer", help="(re)build the shared local tokenizer")
    run = sub.add_parser("run", help="run peers against the pacer and grade them")
    run.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS),
                     help="peers to run (default: all installed)")
    run.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64],
                     help="concurrency levels (default 1 4 16 64)")
    run.add_argument("--requests", type=int, default=None,
                     help="requests per level (default max(2*C, 32))")
    run.add_argument("--ttft-ms", type=float, default=50.0, help="pacer TTFT (50)")
    run.add_argument("--gap-ms", type=float, default=10.0, help="pacer inter-token gap (10)")
    run.add_argument("--timeout-s", type=float, default=900.0, help="per peer run")
    run.add_argument("--json", type=Path, help="write all results here")
    run.add_argument("--pacer-cpu", type=int, help="pin the pacer to this CPU")
    run.add_argument("--client-cpus", type=int, nargs="+",
                     help="pin every client (slotbench's processes, each peer) to these CPUs")
    run.add_argument("--no-slotbench", action="store_true",
                     help="leave out slotbench's own client (run at every level by default)")
    args = ap.parse_args(argv)

    if os.environ.get("CI"):
        print("peers.py does not run in CI (peer tools are never project dependencies)")
        return 0
    if args.cmd == "install":
        for name in args.peers:
            install(PEERS[name])
        build_tokenizer()
        return 0
    if args.cmd == "tokenizer":
        print(build_tokenizer(force=True))
        return 0
    build_tokenizer()
    PINNING.update(pacer=args.pacer_cpu, client=args.client_cpus)
    run_dir = CACHE / "runs" / time.strftime("%Y%m%d-%H%M%S")
    results = []
    peers = [PEERS[name] for name in args.peers]
    for peer in [p for p in peers if not p.bin().exists()]:
        print(f"{peer.name}: not installed; run `peers.py install --peers {peer.name}`")
    peers = [p for p in peers if p.bin().exists()]
    for c in args.levels:  # level by level, slotbench first: one run, the same pacer settings
        n = args.requests or max(2 * c, 32)
        if not args.no_slotbench:
            results.append(run_slotbench(c, n, run_dir, args.ttft_ms, args.gap_ms))
            _progress(results[-1])
        for peer in peers:
            results.append(run_one(peer, c, n, run_dir, args.ttft_ms, args.gap_ms, args.timeout_s))
            _progress(results[-1])
    print(table(results))
    print()
    print(by_level(results))
    print(f"\nrun directory: {run_dir}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
