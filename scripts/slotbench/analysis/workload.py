"""A workload's lengths (docs/workloads.md): per target, its workload in words, the quantiles of
the lengths its requests were planned to have and of those the server counted, beside the trace's
own (scaled) for a trace workload, and whether the outputs were pinned. The report sets them side
by side."""

from __future__ import annotations

import pandas as pd

from slotbench.measure.traces import length_quantiles
from slotbench.measure.workload import QUANTILES, describe


def _quantiles(values: pd.Series) -> dict[str, int] | None:
    values = [int(v) for v in values.dropna()]
    if not values:
        return None
    return {str(q): int(v) for q, v in length_quantiles(values, QUANTILES).items()}


def assess(requests: pd.DataFrame, plans: list[dict], workloads: dict[str, dict]) -> dict:
    """{"quantiles", "targets": {target: its workload ("kind", "workload" in words) and
    lengths}} from the measured requests (the control arm never runs with a workload), each
    run's plan and ``workloads``, each target's own (a target's, or the config's)."""
    targets = {}
    planned = requests[requests["planned_output_tokens"].notna()]
    for target, req in planned.groupby("target", sort=True):
        workload = workloads.get(str(target))
        if workload is None:  # a target of the article's workload: no planned lengths
            continue
        traces = [p["trace"] for p in plans if p.get("target") == target and p.get("trace")]
        pinned = req["pinned"].fillna(False).astype(bool)
        targets[str(target)] = {
            "kind": workload["kind"], "workload": describe(workload),
            "requests": int(len(req)),
            "pinned": "all" if pinned.all() else ("none" if not pinned.any() else "some"),
            "min_input_tokens": max((int(p.get("min_input_tokens") or 0) for p in plans
                                     if p.get("target") == target), default=None),
            "input_tokens": {"planned": _quantiles(req["planned_input_tokens"]),
                             "server": _quantiles(req["prompt_tokens"])},
            "output_tokens": {"planned": _quantiles(req["planned_output_tokens"]),
                              "server": _quantiles(req["output_tokens"])},
            "trace": traces[0] if traces else None,
        }
    return {"quantiles": [str(q) for q in QUANTILES], "targets": targets}
