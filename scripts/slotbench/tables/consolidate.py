"""Raw rep files → requests and cells tables with explicit pyarrow schemas.

Every cell keeps the path and SHA-256 of the raw file it came from, so any number downstream
can be traced back to the raw cells that produced it. The SHA-256 is the one recorded when the
raw file was written (its .sha256 sidecar); a raw file that no longer matches it is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from slotbench.core.cells import OVERLAP_TOLERANCE_S, REP_KEYS, mean_at_once, most_at_once
from slotbench.core.stats import cell_median, cell_quantile
from slotbench.measure.rawfiles import (
    RAW_SCHEMA,
    RawFileChanged,
    read_json,
    sha256_file,
    verify_raw_file,
)
from slotbench.tables.crosscheck import crosscheck, exclusions
from slotbench.tables.delivery import generation_window
from slotbench.tables import telemetry
from slotbench.tables.openloop import open_metrics
from slotbench.tables.samples import HOST_SCHEMA, SAMPLE_ORDER, THERMAL_SCHEMA, samples_of

# 3: the client process columns of cells and requests; 4: how each request's text arrived
# (text_reads, last_read_chunks, most_read_chunks) and why a cell is out of the headline (excluded);
# 5: the server's telemetry (server_metrics, the cells' server_* and energy columns, id_slot);
# 6: a workload's plan of each request (planned_input_tokens, planned_output_tokens, pinned, and
# a shared prefix's prefix_group, prefix_tokens, planned_cached_tokens)
SCHEMA_VERSION = "6"

KEYS = [
    pa.field("target", pa.string(), nullable=False),
    pa.field("run", pa.string(), nullable=False),
    pa.field("rep", pa.int64(), nullable=False),
    pa.field("arm", pa.int64(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),
]

REQUESTS_SCHEMA = pa.schema(
    KEYS
    + [
        pa.field("request", pa.int64(), nullable=False),
        pa.field("nonce", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        # a workload's request (slotbench.measure.workload): the prompt and output lengths its
        # plan asked for, and whether the output was pinned to its length (else a ceiling);
        # null for the article's requests, whose prompts share their run's length
        pa.field("planned_input_tokens", pa.int64()),
        pa.field("planned_output_tokens", pa.int64()),
        pa.field("pinned", pa.bool_()),
        # a shared prefix's group, its length and the most prompt tokens the cache may serve
        pa.field("prefix_group", pa.int64()), pa.field("prefix_tokens", pa.int64()),
        pa.field("planned_cached_tokens", pa.int64()),
        # a conversation's session and turn (a later turn's prompt holds the history, so it
        # has no planned length, and the cache may serve the last turn's prompt and reply)
        pa.field("session", pa.int64()), pa.field("turn", pa.int64()),
        # the client's clock, seconds from the rep's start: sent, first token, last token, done
        pa.field("t_sent_s", pa.float64()), pa.field("t_first_s", pa.float64()),
        pa.field("t_last_s", pa.float64()), pa.field("t_done_s", pa.float64()),
        # a rate arm's request: its planned arrival, from which its TTFT counts (open loop)
        pa.field("t_planned_s", pa.float64()),
        pa.field("t_ready_s", pa.float64()),  # when the client got round to it (launch skew)
        pa.field("chunks", pa.int64()),  # chunks of generated text the client received
        # the socket reads that carried generated text, the chunks in the last of them and the
        # most in one (checks/buffering.py; null: a raw file from before they were kept)
        pa.field("text_reads", pa.int64()), pa.field("last_read_chunks", pa.int64()),
        pa.field("most_read_chunks", pa.int64()),
        pa.field("gen_s", pa.float64()),
        pa.field("done_reason", pa.string()),
        # llama.cpp server fields (null on other backends)
        pa.field("prompt_n", pa.int64()),
        pa.field("prompt_ms", pa.float64()),
        pa.field("predicted_n", pa.int64()),
        pa.field("predicted_ms", pa.float64()),
        pa.field("cache_n", pa.int64()),
        pa.field("stop_type", pa.string()),
        pa.field("id_slot", pa.int64()),  # the server slot that served it (llama-server)
        # Ollama final-chunk fields, nanoseconds as sent (null when Ollama omitted a zero)
        pa.field("eval_count", pa.int64()),
        pa.field("eval_duration_ns", pa.int64()),
        pa.field("prompt_eval_count", pa.int64()),
        pa.field("prompt_eval_duration_ns", pa.int64()),
        pa.field("load_duration_ns", pa.int64()),
        pa.field("total_duration_ns", pa.int64()),
        # OpenAI-compatible servers
        pa.field("finish_reason", pa.string()),
        pa.field("timing_source", pa.string()),
        pa.field("control", pa.bool_()),  # a request of the optional control cell
        # why the server's numbers failed the cross-check with the client (null: they held)
        pa.field("suspect_reason", pa.string()),
        pa.field("client_process", pa.int64()),  # the client process that sent it (null: older)
        pa.field("raw_file", pa.string()),
    ]
)

CELLS_SCHEMA = pa.schema(
    KEYS
    + [
        pa.field("n_requests", pa.int64()),
        # requests whose per-user rate came from client-side token arrival (no server timings)
        pa.field("n_client_timed", pa.int64()),
        # requests whose server numbers failed the cross-check: the cell is kept out of the
        # headline, the checks and the figures
        pa.field("suspect_requests", pa.int64()),
        # why the cell is kept out of the headline, the checks and the figures (null: it is
        # behind them): its own server numbers, or its rep's serial cell's (headline_cells)
        pa.field("excluded", pa.string()),
        pa.field("tokens_out", pa.int64()),
        pa.field("wall_s", pa.float64()),
        pa.field("agg_tps", pa.float64()),
        pa.field("user_tps", pa.float64()),
        pa.field("ttft_s", pa.float64()),
        pa.field("ttft_p95_s", pa.float64()),  # the p95 of the cell's request TTFTs
        pa.field("ttft_p99_s", pa.float64()),
        # a rate arm's cell (open loop, slotbench.tables.openloop): the rate offered and achieved
        # (requests/s), requests in flight (time-weighted: the effective concurrency), launch
        # skew p99 (sent - planned: how late the client sent)
        pa.field("offered_rate", pa.float64()), pa.field("achieved_rate", pa.float64()),
        pa.field("in_flight", pa.float64()), pa.field("launch_skew_p99_s", pa.float64()),
        pa.field("t_start_s", pa.float64()),
        # requests generating at once ([t_first_s, t_done_s] windows): most, time-weighted
        pa.field("gen_streams_max", pa.int64()),
        pa.field("gen_streams", pa.float64()),
        pa.field("t_start_unix", pa.float64()),
        pa.field("raw_file", pa.string()),
        pa.field("raw_sha256", pa.string()),
        pa.field("code_commit", pa.string()),
        pa.field("code_dirty", pa.bool_()),
        pa.field("server_build", pa.string()),
        pa.field("client_cpu_s", pa.float64()),  # the harness's own CPU time during the cell
        # the client processes that sent the cell: how many, the busiest one's CPU time over its
        # wall clock and the latest event loop's lag p95, with which (null: an older raw file)
        pa.field("client_processes", pa.int64()),
        pa.field("client_busy", pa.float64()), pa.field("client_busy_process", pa.int64()),
        pa.field("client_lag_p95_s", pa.float64()), pa.field("client_lag_process", pa.int64()),
        pa.field("control", pa.bool_()),
        *telemetry.CELL_FIELDS,  # the server's own evidence over the cell
    ]
)

SERVER_FIELDS = [
    "prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n", "stop_type", "id_slot",
    "eval_count", "eval_duration_ns", "prompt_eval_count", "prompt_eval_duration_ns",
    "load_duration_ns", "total_duration_ns", "finish_reason",
]
READ_FIELDS = ("text_reads", "last_read_chunks", "most_read_chunks")
PREFIX_FIELDS = ("prefix_group", "prefix_tokens", "planned_cached_tokens", "session", "turn")


class RawFileError(ValueError):
    """A raw file is not a complete slotbench rep record."""


def request_rows(raw: dict, raw_file: str) -> list[dict]:
    num_predict = (raw.get("settings") or {}).get("num_predict")
    rows, history = [], {}
    for cell in raw["cells"]:
        for req in cell["requests"]:
            server = req.get("server") or {}
            planned = dict(req.get("planned") or {})
            if planned.get("turn"):  # a later turn: the last turn's prompt and reply before it
                last = history.get((cell["position"], planned["session"]))
                planned["input_tokens"] = None
                planned["planned_cached_tokens"] = None if last is None else sum(last)
            if "turn" in planned:
                history[(cell["position"], planned["session"])] = tuple(
                    int(req[k]) if req.get(k) is not None else 0
                    for k in ("prompt_tokens", "output_tokens"))
            rows.append(
                {
                    "target": raw["target"], "run": raw["run"], "rep": raw["rep"],
                    "arm": cell["arm"], "position": cell["position"], "request": req["request"],
                    "nonce": req.get("nonce"), "prompt_tokens": req.get("prompt_tokens"),
                    "output_tokens": req.get("output_tokens"),
                    "planned_input_tokens": planned.get("input_tokens"),
                    "planned_output_tokens": planned.get("output_tokens"),
                    "pinned": planned.get("pinned"),
                    **{k: planned.get(k) for k in PREFIX_FIELDS}, "t_sent_s": req.get("t_sent_s"),
                    "t_first_s": req.get("t_first_s"), "t_last_s": req.get("t_last_s"),
                    "t_done_s": req.get("t_done_s"), "chunks": req.get("chunks"),
                    **{k: req.get(k) for k in READ_FIELDS},
                    "t_planned_s": req.get("t_planned_s"), "t_ready_s": req.get("t_ready_s"),
                    "gen_s": req.get("gen_s"), "done_reason": req.get("done_reason"),
                    **{k: server.get(k) for k in SERVER_FIELDS},
                    "timing_source": req.get("timing_source", "server"),
                    "control": bool(cell.get("control", False)),
                    "suspect_reason": crosscheck(req, planned.get("output_tokens")
                                                 or num_predict),
                    "client_process": req.get("client_process"), "raw_file": raw_file,
                }
            )
    return rows


def cell_metrics(requests: pd.DataFrame | list[dict]) -> dict:
    """The per-cell metrics of docs/method.md#metrics, from the cell's request rows (a frame or
    row dicts).

    Plain Python over the rows: at a million requests this runs for every one of ~250,000
    cells, where per-cell pandas operations cost milliseconds each."""
    rows = requests.to_dict("records") if isinstance(requests, pd.DataFrame) else requests

    def num(r, key):
        v = r.get(key)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    tokens_out = int(sum(num(r, "output_tokens") or 0 for r in rows))
    # a rate arm's request counts from its planned arrival (open loop), any other from its send
    sent = [num(r, "t_sent_s") if num(r, "t_planned_s") is None else num(r, "t_planned_s")
            for r in rows]
    done = [num(r, "t_done_s") for r in rows]
    t_start = min((v for v in sent if v is not None), default=np.nan)
    wall_s = float(max((v for v in done if v is not None), default=np.nan) - t_start)
    windows = [w for w in (generation_window(r, num) for r in rows) if w is not None]
    per_user, ttft = [], []
    for r, t0 in zip(rows, sent):
        gen, out, first = num(r, "gen_s"), num(r, "output_tokens"), num(r, "t_first_s")
        if gen is not None and gen > 0 and out is not None:
            per_user.append(out / gen)
        if first is not None and t0 is not None:
            ttft.append(first - t0)
    suspect = [r for r in rows if isinstance(r.get("suspect_reason"), str)]
    return {
        "n_requests": len(rows),
        "n_client_timed": sum(1 for r in rows if r.get("timing_source") == "client"),
        "suspect_requests": len(suspect),
        "excluded": (f"server numbers: {len(suspect)} of {len(rows)} requests disagreed with the "
                     f"client (request {suspect[0]['request']}: {suspect[0]['suspect_reason']})"
                     if suspect else None),
        "tokens_out": tokens_out,
        "wall_s": wall_s,
        "agg_tps": tokens_out / wall_s if wall_s > 0 else np.nan,
        "user_tps": cell_median(per_user),
        "ttft_s": cell_median(ttft),
        "ttft_p95_s": cell_quantile(ttft, 0.95),
        "ttft_p99_s": cell_quantile(ttft, 0.99),
        "t_start_s": float(t_start),
        # how many requests the server generated for at once: at most, and time-weighted over
        # the time any was generating (fewer than the arm when the server queues the rest)
        "gen_streams_max": most_at_once(*zip(*windows)) if windows else 0,
        # judged with one tolerance, so the time-weighted number never exceeds the most
        "gen_streams": mean_at_once(*zip(*windows), OVERLAP_TOLERANCE_S) if windows else np.nan,
    }


CLIENT_NONE = dict.fromkeys(["client_processes", "client_busy", "client_busy_process",
                             "client_lag_p95_s", "client_lag_process"])


def client_columns(cell: dict) -> dict:
    """The cell's client process columns from its raw ``client`` record: how many processes,
    the busiest (CPU over wall clock) and the latest loop (lag p95), each with its process
    number; all None for a raw file from before the per-process record."""
    procs = (cell.get("client") or {}).get("processes") or []
    out = dict(CLIENT_NONE, client_processes=len(procs) or None)
    for key, process_key, field in (("client_busy", "client_busy_process", "busy"),
                                    ("client_lag_p95_s", "client_lag_process", "lag_p95_s")):
        known = [p for p in procs if p.get(field) is not None]
        if known:
            worst = max(known, key=lambda p, f=field: p[f])
            out[key], out[process_key] = float(worst[field]), worst.get("process")
    return out


def server_build_id(server: dict) -> str:
    """One string naming the server build, so cells from different builds can be told apart."""
    name = server.get("package") or server.get("backend") or "unknown"
    version = server.get("package_version") or server.get("version") or ""
    return f"{name} {version}".strip()


def _check(raw: dict, path: str) -> None:
    if raw.get("schema") != RAW_SCHEMA or "cells" not in raw:
        raise RawFileError(f"{path} is not a {RAW_SCHEMA} rep record; delete it and rerun")


def _differences(a, b, prefix="") -> list[str]:
    """Dotted keys where two settings records differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]


def check_same_experiment(experiments: dict[str, tuple[str, dict | None]]) -> None:
    """Refuse to pool the raw files of a target that were measured under different settings.

    ``experiments`` maps raw path -> (target, the settings it recorded). The settings most of a
    target's files share are the reference; every file that differs is named with the keys.
    """
    by_target: dict[str, dict[str, dict | None]] = {}
    for path, (target, exp) in experiments.items():
        by_target.setdefault(target, {})[path] = exp
    problems = []
    for target, files in sorted(by_target.items()):
        keys = [json.dumps(e, sort_keys=True) for e in files.values()]
        reference = max(sorted(set(keys)), key=keys.count)
        ref = json.loads(reference)
        for path, exp in sorted(files.items()):
            if json.dumps(exp, sort_keys=True) == reference:
                continue
            what = (
                "records no settings (measured by an older version)"
                if exp is None
                else "was measured under other settings: " + ", ".join(_differences(ref, exp))
            )
            problems.append(f"{path} {what}")
    if problems:
        raise RawFileError(
            f"the raw files of a target were measured under different settings, so they cannot "
            f"be pooled ({len(problems)} differ from the rest):\n  "
            + "\n  ".join(problems)
            + "\nDelete those raw files and their .sha256 to re-measure them with the current "
            "config, or restore the config they were measured with."
        )


def verify_raw_files(raw_paths: list[str], sha256_paths: list[str]) -> dict[str, str]:
    """Check every raw file against the SHA-256 recorded when it was written.

    Returns raw path -> recorded SHA-256; raises RawFileChanged naming the first file that
    changed (or whose record is missing or unreadable).
    """
    sidecars = {str(p) for p in sha256_paths}
    recorded = {}
    for path in map(str, raw_paths):
        sidecar = path + ".sha256"
        if sidecar not in sidecars:
            raise RawFileChanged(f"raw file {path}: no recorded hash {sidecar} was given")
        recorded[path] = verify_raw_file(path, sidecar)
    return recorded


def consolidate_all(raw_paths: list[str], recorded: dict[str, str] | None = None) -> dict:
    """Every table consolidation writes, reading each raw file once: ``requests`` and
    ``cells`` (frames), ``thermal`` and ``host`` samples (frames), ``servers`` (what each rep
    saw of its server). ``recorded`` maps each raw path to the SHA-256 recorded when it was
    written (see verify_raw_files), else the file is hashed now."""
    req_rows, cell_rows, experiments, states = [], [], {}, []
    samples: dict[str, list] = {"thermal": [], "host": []}
    scraped: list[dict] = []
    for path in raw_paths:
        raw = read_json(path)
        _check(raw, path)
        experiments[str(path)] = (raw["target"], raw.get("experiment"))
        digest = recorded[str(path)] if recorded is not None else sha256_file(path)
        rows = request_rows(raw, str(path))
        req_rows.extend(rows)
        build_id = server_build_id(raw.get("server", {}))
        cpu = {(c["arm"], c["position"]): c.get("client_cpu_s") for c in raw["cells"]}
        client = {(c["arm"], c["position"]): client_columns(c) for c in raw["cells"]}
        by_cell: dict[tuple, list[dict]] = {}
        for row in rows:
            by_cell.setdefault((row["arm"], row["position"]), []).append(row)
        opened = {(c["arm"], c["position"]): c.get("open") for c in raw["cells"]}
        rep_samples, evidence = telemetry.rep_evidence(raw)
        scraped += rep_samples
        for (arm, position), grp in by_cell.items():
            metrics = cell_metrics(grp) | open_metrics(grp, opened.get((arm, position)))
            cell_rows.append(
                {
                    "target": raw["target"], "run": raw["run"], "rep": raw["rep"],
                    "arm": arm, "position": position, **metrics,
                    "t_start_unix": raw["origin_unix"] + metrics["t_start_s"],
                    "raw_file": str(path), "raw_sha256": digest,
                    "code_commit": raw.get("code", {}).get("commit"),
                    "code_dirty": raw.get("code", {}).get("dirty"),
                    "server_build": build_id,
                    "client_cpu_s": cpu.get((arm, position)),
                    **client.get((arm, position), CLIENT_NONE),
                    "control": any(r["control"] for r in grp),
                    **evidence(arm, position, metrics["t_start_s"], metrics["wall_s"]),
                }
            )
        for kind, into in samples.items():
            into.extend(samples_of(raw, kind))
        states.append(_state_of(raw, path))
    check_same_experiment(experiments)
    cells = pd.DataFrame(cell_rows, columns=CELLS_SCHEMA.names)
    return _ordered({
        "requests": pd.DataFrame(req_rows, columns=REQUESTS_SCHEMA.names),
        "cells": cells.assign(excluded=exclusions(cells)),
        "thermal": pd.DataFrame(samples["thermal"], columns=THERMAL_SCHEMA.names),
        "host": pd.DataFrame(samples["host"], columns=HOST_SCHEMA.names),
        "server_metrics": pd.DataFrame(scraped, columns=telemetry.SERVER_METRICS_SCHEMA.names),
        "servers": states,
        "experiments": experiments,
    })


def _ordered(tables: dict) -> dict:
    """Every table in the one order the pipeline writes it, whatever order it was read in."""
    order = ["target", "run", "rep", "position"]
    return {
        **tables,
        "requests": tables["requests"].sort_values(order + ["request"], ignore_index=True),
        "cells": tables["cells"].sort_values(order, ignore_index=True),
        "thermal": tables["thermal"].sort_values(SAMPLE_ORDER, ignore_index=True),
        "host": tables["host"].sort_values(SAMPLE_ORDER, ignore_index=True),
        "server_metrics": tables["server_metrics"].sort_values(
            SAMPLE_ORDER + ["source", "metric"], ignore_index=True, kind="stable"),
        "servers": sorted(tables["servers"], key=lambda s: (s["target"], s["run"], s["rep"])),
    }


# A block: the tables of some reps of one target and run, as consolidate_all made them, in
# files named <prefix>.<kind>; the merge pools the blocks into the pipeline's tables.
BLOCK_TABLES = {"requests": REQUESTS_SCHEMA, "cells": CELLS_SCHEMA, "thermal": THERMAL_SCHEMA,
                "host": HOST_SCHEMA, "server_metrics": telemetry.SERVER_METRICS_SCHEMA}


def write_block(tables: dict, prefix: str) -> None:
    """One block's tables as <prefix>.<table>.parquet, and <prefix>.json with what each rep saw
    of its server and the settings each raw file recorded."""
    for kind, schema in BLOCK_TABLES.items():
        write_table(tables[kind], schema, f"{prefix}.{kind}.parquet", kind)
    meta = {"servers": tables["servers"], "experiments": tables["experiments"]}
    with open(f"{prefix}.json", "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=1, sort_keys=True)


def merge_blocks(prefixes: list[str]) -> dict:
    """The tables of consolidate_all over every raw file of the blocks, from the blocks' files;
    raw files measured under different settings are refused across blocks too."""
    frames: dict[str, list] = {kind: [] for kind in BLOCK_TABLES}
    servers, experiments = [], {}
    for prefix in prefixes:
        for kind in BLOCK_TABLES:
            frames[kind].append(read_table(f"{prefix}.{kind}.parquet"))
        meta = read_json(f"{prefix}.json")
        servers += meta["servers"]
        experiments.update({path: tuple(te) for path, te in meta["experiments"].items()})
    check_same_experiment(experiments)
    tables = {kind: _concat(parts, BLOCK_TABLES[kind]) for kind, parts in frames.items()}
    return _ordered({**tables, "servers": servers, "experiments": experiments})


def _concat(parts: list[pd.DataFrame], schema: pa.Schema) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=schema.names)
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def consolidate(raw_paths: list[str], recorded: dict[str, str] | None = None) -> tuple:
    """The requests and cells tables of consolidate_all."""
    tables = consolidate_all(raw_paths, recorded)
    return tables["requests"], tables["cells"]


def headline_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells behind the headline, and the only ones the analysis, the checks and the
    figures use: those :func:`exclusions` keeps. A rep whose serial cell failed the
    cross-check leaves with all its cells."""
    return cells[exclusions(cells).isna().to_numpy()].reset_index(drop=True)


def split_control(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measured cells and control cells apart: the control arm never enters the headline."""
    control = cells["control"].fillna(False).astype(bool)
    return cells[~control].reset_index(drop=True), cells[control].reset_index(drop=True)


def _state_of(raw: dict, path) -> dict:
    return {"target": raw["target"], "run": raw["run"], "rep": raw["rep"],
            "raw_file": str(path), "server": raw.get("server", {})}


def write_table(df: pd.DataFrame, schema: pa.Schema, path: str | Path, kind: str) -> None:
    meta = {b"slotbench.schema_version": SCHEMA_VERSION.encode(), b"slotbench.table": kind.encode()}
    table = pa.Table.from_pandas(df, schema=schema.with_metadata(meta), preserve_index=False)
    pq.write_table(table, path)


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a slotbench Parquet table, refusing one written by another schema version."""
    table = pq.read_table(path)
    version = (table.schema.metadata or {}).get(b"slotbench.schema_version", b"?").decode()
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"{path} has slotbench schema version {version}, this code reads {SCHEMA_VERSION}; "
            "rerun the consolidate rule"
        )
    return table.to_pandas()
