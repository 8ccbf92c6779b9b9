"""The client checking itself: could slotbench's own timing have moved the numbers?

Two ways the client can distort a cell without any error:

- **Send lag.** An arm of concurrency N is meant to keep N requests in flight: the first N go
  out together and each later request goes out the moment a slot frees. If the client sends
  late (a busy GIL, a slow thread pool, a paused process), the server sits idle, wall_s grows
  and agg_tps falls, and the arm looks worse than the server is.
- **Client CPU.** On a small machine the client competes with the server for the same cores; a
  client that burns a lot of CPU per streamed token slows the very generation it measures.

Thresholds (config keys, quoted in docs/report.md; their defaults are the schema's):

- ``checks.send_lag_s`` (0.010): p95 send lag above 10 ms. At the embedded default's ~20 ms per
  token, 10 ms is half a token of idle server per late send; across a cell of four ~2–3 s
  requests it is well under 1% of wall_s, so a client that stays below it cannot explain
  effects of the size the report quotes (rotation threshold 10%, run-to-run noise ±15%).
- ``checks.client_cpu_share`` (0.10): client CPU time per streamed token above 10% of the cell's
  median inter-token interval (gen_s / output_tokens of its requests). Below it the client is
  a small fraction of the work per token; above it, on 2 cores, it is plausibly taking CPU
  from the server. With N streams the client is busy about N times that share.
"""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd

from slotbench.checks.base import Tables, Verdict, constant, judged, plain, setting
from slotbench.core import stats
from slotbench.core.cells import CELL_KEYS, cell_label, label_key
from slotbench.core.fmt import fmt_ms, fmt_pct

TRAP = "client"
TITLE = "Client distortion (self-check)"
ORDER = 90
TABLES = ()
CONFIG_KEY = "checks.send_lag_s"
CPU_KEY = "checks.client_cpu_share"

KEYS = CELL_KEYS + ["position"]
LAG_COLUMNS = KEYS + ["request", "send_order", "t_sent_s", "intended_s", "lag_s", "lag_raw_s"]
LAG_SUMMARY_COLUMNS = KEYS + [
    "n_requests", "lag_median_s", "lag_p95_s", "lag_max_s", "n_early", "cell",
]
CPU_COLUMNS = KEYS + [
    "tokens", "client_cpu_s", "cpu_per_token_s", "inter_token_s", "cpu_share", "cell",
]
# A request sent this much before its slot freed means more than N were in flight.
EARLY_TOLERANCE_S = 0.001


def _intended(sent: np.ndarray, done: np.ndarray, n: int) -> np.ndarray:
    """Intended send times under a FIFO pool of ``n`` workers (arrays in send order): the
    first n at the first send, request k >= n at the (k-n)-th earliest of the completions
    before it, which is the n-th latest of them (kept in a heap of the n latest; a missing
    completion sorts last, as numpy sorts NaN)."""
    intended = np.full(len(sent), sent[0] if len(sent) else np.nan)
    latest: list[tuple[bool, float]] = []
    if len(sent) > n:
        latest = [(bool(d != d), float(d)) for d in done[:n]]
        heapq.heapify(latest)
    for k in range(n, len(sent)):
        intended[k] = latest[0][1]  # the slot the k-th request waited for
        heapq.heappushpop(latest, (bool(done[k] != done[k]), float(done[k])))
    return intended


def _lag_summary(lags: pd.DataFrame, bounds: list[int]) -> pd.DataFrame:
    """Per cell (the rows between consecutive bounds of ``lags``, in key order): its lags."""
    lag, raw = lags["lag_s"].to_numpy(float), lags["lag_raw_s"].to_numpy(float)
    keys = lags[KEYS].to_numpy(dtype=object)
    summary = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        summary.append(
            {
                **dict(zip(KEYS, keys[a], strict=True)),
                "n_requests": b - a,
                "lag_median_s": stats.median(lag[a:b]),
                "lag_p95_s": stats.quantile(lag[a:b], 0.95),
                "lag_max_s": float(lag[a:b].max()),
                "n_early": int((raw[a:b] < -EARLY_TOLERANCE_S).sum()),
                "cell": cell_label(*keys[a][:4]),
            }
        )
    return pd.DataFrame(summary, columns=LAG_SUMMARY_COLUMNS)


def send_lag(requests: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per request: how long after its slot freed it was actually sent; and a per-cell summary.

    The first N requests of an arm of concurrency N are intended at the cell's first send;
    request k (send order) >= N is intended at the (k-N)-th earliest completion among the
    requests sent before it. A rate arm's request is intended at its planned arrival (the lag
    is its launch skew). lag_s = t_sent_s - intended, clipped at 0; lag_raw_s keeps the
    sign, and n_early counts requests sent more than a millisecond before any slot was free
    (more than N in flight: the arm was not what it claims).
    """
    # every cell's requests together, in send order (a request without a key is in no cell)
    used = [c for c in KEYS + ["request", "t_sent_s", "t_done_s", "t_planned_s"] if c in requests]
    req = requests[used].dropna(subset=KEYS).sort_values(KEYS + ["t_sent_s", "request"],
                                                         kind="stable", ignore_index=True)
    sent, done = req["t_sent_s"].to_numpy(float), req["t_done_s"].to_numpy(float)
    planned = req["t_planned_s"].to_numpy(float) if "t_planned_s" in req else None
    cell = req.groupby(KEYS, sort=False).ngroup().to_numpy()
    bounds = [0, *(np.flatnonzero(cell[1:] != cell[:-1]) + 1), len(req)] if len(req) else [0]
    arms = req["arm"].to_numpy()
    intended = np.empty(len(req))
    for a, b in zip(bounds[:-1], bounds[1:]):
        arm = int(arms[a])
        if arm < 0 and planned is not None:  # a rate arm: its planned arrival
            intended[a:b] = planned[a:b]
        else:
            intended[a:b] = _intended(sent[a:b], done[a:b], max(1, arm))
    raw = sent - intended
    lags = pd.DataFrame({**{k: req[k].tolist() for k in KEYS}, "request": req["request"].tolist(),
                         "send_order": req.groupby(KEYS, sort=False).cumcount().to_numpy(),
                         "t_sent_s": sent, "intended_s": intended,
                         "lag_s": np.where(raw > 0.0, raw, 0.0), "lag_raw_s": raw},
                        columns=LAG_COLUMNS)
    return lags, _lag_summary(lags, bounds)


def client_cpu_per_token(cell_cpu_s, tokens):
    """Client CPU seconds per streamed token; NaN where no tokens were streamed."""
    cpu = np.asarray(cell_cpu_s, dtype=float)
    tok = np.asarray(tokens, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(tok > 0, cpu / np.where(tok > 0, tok, 1.0), np.nan)
    if isinstance(tokens, pd.Series):
        return pd.Series(out, index=tokens.index)
    if isinstance(cell_cpu_s, pd.Series):
        return pd.Series(out, index=cell_cpu_s.index)
    return float(out) if out.ndim == 0 else out


def cpu_shares(requests: pd.DataFrame, cell_cpu: pd.DataFrame) -> pd.DataFrame:
    """Per cell: client CPU per token against the cell's median inter-token interval.

    ``cell_cpu`` has the cell keys (target, run, rep, arm) and ``client_cpu_s``: the client
    process's CPU time (all threads, e.g. time.process_time()) spent on that cell.
    """
    if "client_cpu_s" not in cell_cpu:
        raise ValueError(
            "cell_cpu needs a client_cpu_s column (client process CPU seconds per cell, "
            "keyed by target, run, rep, arm); record time.process_time() around each cell"
        )
    req = requests[KEYS + ["gen_s", "output_tokens"]].copy()
    ok = (req["gen_s"] > 0) & (req["output_tokens"] > 0)
    req["_itl"] = (req["gen_s"] / req["output_tokens"]).where(ok)
    per_cell = (
        req.groupby(KEYS, sort=True)
        .agg(tokens=("output_tokens", "sum"), inter_token_s=("_itl", "median"))
        .reset_index()
    )
    df = per_cell.merge(cell_cpu[CELL_KEYS + ["client_cpu_s"]], on=CELL_KEYS, how="inner")
    df["cpu_per_token_s"] = client_cpu_per_token(df["client_cpu_s"], df["tokens"])
    df["cpu_share"] = df["cpu_per_token_s"] / df["inter_token_s"]
    df["cell"] = [cell_label(*k) for k in df[CELL_KEYS].itertuples(index=False, name=None)]
    return df.reindex(columns=CPU_COLUMNS)


def self_check(
    requests: pd.DataFrame,
    cell_cpu: pd.DataFrame | None = None,
    *,
    lag_threshold_s: float,
    cpu_share_threshold: float,
) -> dict:
    """Whether the client could have distorted the numbers, with the evidence and a sentence.

    Fires when the p95 send lag over all requests exceeds ``lag_threshold_s``
    (checks.send_lag_s), or when any cell's client CPU per streamed token exceeds
    ``cpu_share_threshold`` (checks.client_cpu_share) times that cell's median inter-token
    interval. Without ``cell_cpu`` (or server
    generation times) the CPU half is reported as not assessed rather than passed.
    """
    lags, lag_cells = send_lag(requests)
    lag_values = lags["lag_s"].to_numpy(dtype=float)
    lag_p95 = stats.quantile(lag_values, 0.95)
    lag_fired = bool(lag_p95 > lag_threshold_s)
    worst, over_cpu = _worst_cpu(requests, cell_cpu, cpu_share_threshold)
    cpu_fired = worst is not None and bool(worst["cpu_share"] > cpu_share_threshold)
    info = {
        "distorted": lag_fired or cpu_fired,
        "lag_fired": lag_fired,
        "lag_p95_s": lag_p95,
        "lag_max_s": float(lag_values.max()) if len(lag_values) else float("nan"),
        "lag_threshold_s": float(lag_threshold_s),
        "cells_over_lag": lag_cells.loc[lag_cells["lag_p95_s"] > lag_threshold_s, "cell"].tolist(),
        "early_cells": lag_cells.loc[lag_cells["n_early"] > 0, "cell"].tolist(),
        "cpu_fired": cpu_fired,
        "cpu_assessed": worst is not None,
        "cpu_per_token_s": None if worst is None else float(worst["cpu_per_token_s"]),
        "inter_token_s": None if worst is None else float(worst["inter_token_s"]),
        "cpu_share": None if worst is None else float(worst["cpu_share"]),
        "worst_cpu_cell": None if worst is None else str(worst["cell"]),
        "cpu_share_threshold": float(cpu_share_threshold),
        "cells_over_cpu": over_cpu,
    }
    return info | {"sentence": _sentence(info)}


def _worst_cpu(requests, cell_cpu, threshold: float) -> tuple[pd.Series | None, list[str]]:
    """The cell whose client CPU per token was the largest share of its inter-token interval,
    and the cells over ``threshold``; (None, []) when no cell's share could be assessed."""
    cpu = None if cell_cpu is None or cell_cpu.empty else cpu_shares(requests, cell_cpu)
    if cpu is None or cpu["cpu_share"].notna().sum() == 0:
        return None, []
    over = cpu.loc[cpu["cpu_share"] > threshold, "cell"].tolist()
    return cpu.loc[cpu["cpu_share"].idxmax()], over


def _sentence(info: dict) -> str:
    """The self-check's finding in words, from its evidence."""
    parts = []
    lag_p95, lag_threshold_s = info["lag_p95_s"], info["lag_threshold_s"]
    over_lag, early = info["cells_over_lag"], info["early_cells"]
    cpu_share_threshold = info["cpu_share_threshold"]
    if info["lag_fired"]:
        parts.append(
            f"requests went out late: p95 send lag {fmt_ms(lag_p95)} (max "
            f"{fmt_ms(info['lag_max_s'])}) exceeds "
            f"{fmt_ms(lag_threshold_s)}, so the server had fewer requests in flight than the "
            f"arm meant (idle, unless it was queueing others anyway) in {len(over_lag)} cell(s) "
            f"(e.g. {over_lag[0] if over_lag else 'pooled'})"
        )
    if info["cpu_fired"]:
        parts.append(
            f"the client used {fmt_ms(info['cpu_per_token_s'])} of CPU per streamed token in "
            f"{info['worst_cpu_cell']}, {info['cpu_share']:.0%} of its "
            f"{fmt_ms(info['inter_token_s'])} inter-token interval (threshold "
            f"{cpu_share_threshold:.0%}), so it may have taken CPU from the server in "
            f"{len(info['cells_over_cpu'])} cell(s)"
        )
    if parts:
        sentence = (
            "The client may have distorted these numbers: " + "; ".join(parts) + ". Rerun "
            "with fewer other processes on the machine, or the client on another machine."
        )
    else:
        sentence = (
            f"The client kept up: p95 send lag {fmt_ms(lag_p95)} "
            f"(threshold {fmt_ms(lag_threshold_s)})"
            + (
                f", client CPU at most {info['cpu_share']:.1%} of an inter-token interval "
                f"(threshold {cpu_share_threshold:.0%})."
                if info["cpu_assessed"]
                else "; client CPU per token was not assessed (no per-cell CPU times or no "
                "server generation times)."
            )
        )
    if early:
        sentence += (
            f" In {len(early)} cell(s) (e.g. {early[0]}) a request went out before any slot "
            f"was free (by more than {constant(EARLY_TOLERANCE_S=EARLY_TOLERANCE_S)}): more "
            "requests were in flight than the arm's concurrency."
        )
    return sentence


LEAD = "The client may have distorted these numbers: "


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    lag_s, cpu_share = float(setting(settings, CONFIG_KEY)), float(setting(settings, CPU_KEY))
    requests = tables.measured_requests
    verdicts = []
    for target in tables.targets:
        req = requests[requests["target"] == target]
        cpu = tables.cells.loc[tables.cells["target"] == target, KEYS + ["client_cpu_s"]]
        info = self_check(req, cpu, lag_threshold_s=lag_s, cpu_share_threshold=cpu_share)
        share = info["cpu_share"]
        with_cpu = info["cpu_assessed"] and share is not None
        cpu_text = f", CPU {fmt_pct(share, 1)} of an inter-token interval" if with_cpu else ""
        lag_text = f"p95 send lag {fmt_ms(info['lag_p95_s'])}"
        if info["distorted"]:
            why = ", ".join(w for w, f in (("late sends", info["lag_fired"]),
                                           ("client CPU", info["cpu_fired"])) if f)
            summary = f"the client could have distorted these numbers ({why}): {lag_text}{cpu_text}"
            detail = info["sentence"].removeprefix(LEAD)
            warnings = [f"Warning: the client could have distorted these numbers: {detail}"]
        else:
            summary = f"client kept up: {lag_text}{cpu_text or ', CPU not assessed'}"
            warnings = []
        flagged = (
            set(info["cells_over_lag"]) | set(info["cells_over_cpu"]) | set(info["early_cells"])
        )
        verdicts.append(judged(
            TRAP, TITLE, target, info["distorted"], summary, info["sentence"], threshold=lag_s,
            config_key=CONFIG_KEY, effect="warn",
            evidence=plain(info) | {"thresholds": {CONFIG_KEY: lag_s, CPU_KEY: cpu_share},
                                    "warnings": warnings},
            cells=sorted(flagged, key=label_key),
        ))
    return verdicts, {}
