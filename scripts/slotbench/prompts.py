"""Checks on what the server did with the prompts: equal token length, and prefix-cache hits.

Method rule 2 holds prompt length in tokens equal and gives every request its own nonce. These
checks verify both from what the server reported, so a broken plan or a server that reused a
cached prefix is named instead of booked as a concurrency effect.
"""

from __future__ import annotations

import pandas as pd

from .cells import cell_label

REQUEST_KEYS = ["target", "run", "rep", "arm", "position", "request"]
LENGTH_COLUMNS = REQUEST_KEYS + ["prompt_tokens", "modal_prompt_tokens", "cell"]
CACHE_COLUMNS = REQUEST_KEYS + ["prompt_tokens", "evaluated", "reason", "cell"]
# An Ollama prompt evaluated this much faster per token than the target's median was (mostly)
# served from cache: a re-evaluation is never 4x faster than the typical one on one server.
OLLAMA_CACHE_SPEEDUP = 4.0


def _labels(df: pd.DataFrame) -> pd.Series:
    return pd.Series(
        [cell_label(t, r, p, a) for t, r, p, a in zip(df["target"], df["run"], df["rep"], df["arm"])],
        index=df.index, dtype=object,
    )  # fmt: skip


def _measured(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests of the measured arms (the optional control arm repeats prompts on purpose)."""
    if "control" in requests:
        requests = requests[~requests["control"].fillna(False).astype(bool)]
    return requests.reset_index(drop=True)


def prompt_lengths(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests whose server-reported prompt length differs from their run's modal length."""
    req = _measured(requests).dropna(subset=["prompt_tokens"])
    if req.empty:
        return pd.DataFrame(columns=LENGTH_COLUMNS)
    modal = req.groupby(["target", "run"])["prompt_tokens"].agg(lambda s: s.mode().min())
    req = req.join(modal.rename("modal_prompt_tokens"), on=["target", "run"])
    odd = req[req["prompt_tokens"] != req["modal_prompt_tokens"]].copy()
    odd["cell"] = _labels(odd)
    return odd[LENGTH_COLUMNS].reset_index(drop=True)


def _column(req: pd.DataFrame, name: str) -> pd.Series:
    return req[name] if name in req else pd.Series(float("nan"), index=req.index)


def cache_hits(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests whose prompt was (partly) served from a prefix cache, with the evidence.

    llama.cpp says so directly (timings.cache_n > 0, or fewer prompt tokens evaluated than the
    prompt holds); Ollama does not, so there a prompt evaluated far faster per token than the
    target's median, or with no prompt evaluation reported at all, is the sign.
    """
    req = _measured(requests)
    cache_n = _column(req, "cache_n").fillna(0)
    prompt_n = _column(req, "prompt_n")
    is_ollama = _column(req, "eval_count").notna()
    ollama_ns = _column(req, "prompt_eval_duration_ns")
    per_token = ollama_ns / req["prompt_tokens"]
    typical = per_token[is_ollama].groupby(req["target"]).transform("median")
    speedup = (typical / per_token).reindex(req.index)
    rules = [
        (cache_n > 0, prompt_n,
         cache_n.map(lambda n: f"{n:.0f} prompt tokens came from the cache (cache_n)")),
        ((cache_n == 0) & (prompt_n < req["prompt_tokens"]), prompt_n,
         "fewer prompt tokens evaluated than the prompt holds"),
        (is_ollama & (ollama_ns.isna() | _column(req, "prompt_eval_count").isna()),
         _column(req, "prompt_eval_count"),
         "no prompt evaluation reported (Ollama omits zero values: served from cache)"),
        (is_ollama & (speedup > OLLAMA_CACHE_SPEEDUP), _column(req, "prompt_eval_count"),
         speedup.map(lambda x: f"prompt evaluated {x:.0f}x faster per token than this "
                               "target's median: served from cache")),
    ]  # fmt: skip
    found = []
    for mask, evaluated, reason in rules:
        mask = mask.fillna(False).astype(bool)
        if mask.any():
            hit = req[mask].assign(evaluated=evaluated[mask])
            hit["reason"] = reason[mask] if isinstance(reason, pd.Series) else reason
            found.append(hit)
    if not found:
        return pd.DataFrame(columns=CACHE_COLUMNS)
    out = pd.concat(found).drop_duplicates(subset=REQUEST_KEYS)
    out["cell"] = _labels(out)
    return out[CACHE_COLUMNS].sort_values(REQUEST_KEYS, ignore_index=True)


CONTROL_COLUMNS = ["target", "arm", "control_cells", "control_agg_tps", "measured_agg_tps",
                   "inflation", "cells", "measured_cells"]  # fmt: skip


def control_effect(control: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """How much a shared, cacheable prompt inflates throughput at the control arm's concurrency.

    Compares the control cells' median agg_tps with the measured cells of the same target and
    arm; the ratio minus one is what a benchmark without nonces would have booked as gain.
    """
    rows = []
    for (target, arm), ctrl in control.groupby(["target", "arm"], sort=True):
        measured = cells[(cells["target"] == target) & (cells["arm"] == arm)]
        c_tps, m_tps = float(ctrl["agg_tps"].median()), float(measured["agg_tps"].median())
        rows.append({
            "target": target, "arm": int(arm), "control_cells": len(ctrl),
            "control_agg_tps": c_tps, "measured_agg_tps": m_tps,
            "inflation": c_tps / m_tps - 1 if m_tps > 0 else float("nan"),
            "cells": ";".join(_labels(ctrl).sort_values()),
            "measured_cells": ";".join(_labels(measured).sort_values()),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=CONTROL_COLUMNS)
