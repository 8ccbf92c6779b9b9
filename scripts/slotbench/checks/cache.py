"""Trap: a measured request served (partly) from a prefix cache.

A cached prefix skips prefill, so its arm does less work than the others and looks faster than
the server is. llama.cpp says so directly (timings.cache_n > 0, or fewer prompt tokens evaluated
than the prompt holds); Ollama does not, so there a prompt evaluated far faster per token than
the target's median, or with no prompt evaluation reported at all, is the sign.

A shared-prefix workload (docs/workloads.md) means some hits: a request that follows another of
its group in a cell may find their shared prefix in the cache, and any request may find its
start (the BOS, its mark and its rep's digits of its nonce) cached from the slot's last prompt.
Its plan says the most prompt tokens the cache may serve (``planned_cached_tokens``): a hit
within that is measured, as each arm's share of the shared prefix served from the cache, and
only a hit beyond it is flagged. On Ollama, which does not say how many tokens the cache served,
a planned request's speed is not read as a hit.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, constant, judged, records
from slotbench.core import stats
from slotbench.core.cells import arm_name, label_series
from slotbench.core.fmt import count, fmt_pct

TRAP = "cache"
TITLE = "Prefix-cache hits"
ORDER = 50
TABLES = ("cache_hits",)

REQUEST_KEYS = ["target", "run", "rep", "arm", "position", "request"]
CACHE_COLUMNS = REQUEST_KEYS + ["prompt_tokens", "evaluated", "reason", "cell"]
# An Ollama prompt evaluated this much faster per token than the target's median was (mostly)
# served from cache: a re-evaluation is never 4x faster than the typical one on one server.
OLLAMA_CACHE_SPEEDUP = 4.0


def _column(req: pd.DataFrame, name: str) -> pd.Series:
    return req[name] if name in req else pd.Series(float("nan"), index=req.index)


def cache_hits(requests: pd.DataFrame) -> pd.DataFrame:
    """Measured requests whose prompt was (partly) served from a prefix cache, with the evidence."""
    if "control" in requests:
        requests = requests[~requests["control"].fillna(False).astype(bool)]
    req = requests.reset_index(drop=True)
    cache_n = _column(req, "cache_n").fillna(0)
    prompt_n = _column(req, "prompt_n")
    is_ollama = _column(req, "eval_count").notna()
    ollama_ns = _column(req, "prompt_eval_duration_ns")
    per_token = ollama_ns / req["prompt_tokens"]
    typical = per_token[is_ollama].groupby(req["target"]).transform(stats.median)
    speedup = (typical / per_token).reindex(req.index)
    planned = _column(req, "planned_cached_tokens")
    served = pd.concat([cache_n, req["prompt_tokens"] - prompt_n], axis=1).max(axis=1)
    within = planned.notna() & (served <= planned)  # a hit the workload means
    rules = [
        (cache_n > 0, prompt_n,
         cache_n.map(lambda n: f"{n:.0f} prompt tokens came from the cache (cache_n)")),
        ((cache_n == 0) & (prompt_n < req["prompt_tokens"]), prompt_n,
         "fewer prompt tokens evaluated than the prompt holds"),
        (is_ollama & (ollama_ns.isna() | _column(req, "prompt_eval_count").isna()),
         _column(req, "prompt_eval_count"),
         "no prompt evaluation reported (Ollama omits zero values: served from cache)"),
        (is_ollama & planned.isna() & (speedup > OLLAMA_CACHE_SPEEDUP),
         _column(req, "prompt_eval_count"),
         speedup.map(lambda x: f"prompt evaluated {x:.0f}x faster per token than this "
                               "target's median: served from cache")),
    ]
    found = []
    for mask, evaluated, reason in rules:
        mask = mask.fillna(False).astype(bool) & ~within
        if mask.any():
            hit = req[mask].assign(evaluated=evaluated[mask])
            hit["reason"] = reason[mask] if isinstance(reason, pd.Series) else reason
            found.append(hit)
    if not found:
        return pd.DataFrame(columns=CACHE_COLUMNS)
    out = pd.concat(found).drop_duplicates(subset=REQUEST_KEYS)
    out["cell"] = label_series(out)
    return out[CACHE_COLUMNS].sort_values(REQUEST_KEYS, ignore_index=True)


def planned_hit_rates(requests: pd.DataFrame) -> dict[int, float]:
    """Per arm, the share of the tokens a workload means the cache to serve that it served: a
    shared prefix, to the requests that followed another of their group in the cell; a
    conversation's history, to its later turns ({} for other workloads)."""
    if "planned_cached_tokens" not in requests:
        return {}
    prefix = _column(requests, "prefix_tokens")
    later_turn = _column(requests, "turn").fillna(0) > 0
    expected = prefix.where(prefix.notna() & (requests["planned_cached_tokens"] >= prefix),
                            requests["planned_cached_tokens"].where(later_turn))
    meant = requests[expected.notna() & (expected > 0)]
    if meant.empty:
        return {}
    expected = expected[meant.index]
    served = meant["cache_n"].fillna(0).clip(upper=expected)
    sums = pd.DataFrame({"arm": meant["arm"], "served": served,
                         "expected": expected}).groupby("arm").sum()
    return {int(a): float(r["served"] / r["expected"]) for a, r in sums.iterrows()}


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    requests = tables.measured_requests
    table = cache_hits(requests)
    verdicts = []
    for target in tables.targets:
        n_req = int((requests["target"] == target).sum())
        rows = table[table["target"] == target].sort_values(["run", "rep", "position", "request"])
        rates = planned_hit_rates(requests[requests["target"] == target])
        if rows.empty:
            beyond = "beyond the workload's plan " if rates else ""
            summary = f"no cache hits {beyond}in {count(n_req, 'measured request')}"
        else:
            first, k = rows.iloc[0], len(rows)
            summary = (
                f"{count(k, 'request')} of {n_req} served (partly) from a prefix cache (e.g. "
                f"{first['cell']} request {int(first['request'])}: {first['reason']})"
            )
        if rates:
            what = "the history" if "turn" in requests and requests["turn"].notna().any() \
                else "the shared prefix"
            summary += (f"; {what} came from the cache for "
                        + ", ".join(f"{fmt_pct(r)} of its tokens at {arm_name(a)}"
                                    for a, r in rates.items()) + " (planned, measured)")
        sentence = f"Prefix cache: {summary}."
        if _column(requests[requests["target"] == target], "eval_count").notna().any():
            sentence += (f" An Ollama prompt evaluated more than {OLLAMA_CACHE_SPEEDUP:g}x faster "
                         "per token than the target's median counts as served from the cache "
                         f"({constant(OLLAMA_CACHE_SPEEDUP=OLLAMA_CACHE_SPEEDUP)}).")
        verdicts.append(judged(
            TRAP, TITLE, target, len(rows), summary, sentence,
            evidence={"measured_requests": n_req, "rows": records(rows),
                      **({"planned_hit_rate": {str(a): r for a, r in rates.items()}}
                         if rates else {})},
            cells=sorted(set(rows["cell"])),
        ))
    return verdicts, {"cache_hits": table}
