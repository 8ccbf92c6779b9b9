"""A cell's open-loop numbers: the rate offered and achieved, the requests in flight, and how late
the client sent (launch skew).

A rate arm's requests arrive on a planned schedule (plan.arrival_offsets) whether or not earlier
ones are done; each request's TTFT and latency count from its planned arrival (consolidate's
cell_metrics). The time-weighted number of requests in flight, from each request's start (its
planned arrival, or its send in a closed loop) to its end, is the cell's effective concurrency:
it puts a rate arm on the concurrency axis beside the closed-loop arms, and it is computed for
every cell so the two can be compared.
"""

from __future__ import annotations

import math

from slotbench.core.cells import mean_at_once
from slotbench.core.stats import cell_quantile

def _num(r: dict, key: str):
    v = r.get(key)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def open_metrics(rows: list[dict], spec: dict | None) -> dict:
    """Per cell (its request rows, and the rate arm's spec from the raw cell, or None): the
    offered rate (requests/s, as planned), the achieved rate (completions per second from the
    first completion to the last), the requests in flight
    (time-weighted) and the launch skew p99 (when the client got round to each request, after
    its planned arrival; a request held by max_in_flight waits after that, and that wait is the
    user's, not skew); NaN where a closed-loop cell has no such number."""
    starts, ends, skews = [], [], []
    for r in rows:
        planned, sent, done = _num(r, "t_planned_s"), _num(r, "t_sent_s"), _num(r, "t_done_s")
        start = planned if planned is not None else sent
        if start is not None and done is not None:
            starts.append(start)
            ends.append(done)
        # launch skew: how late the client got round to it (a wait for the cap is not skew)
        ready = _num(r, "t_ready_s")
        ready = sent if ready is None else ready
        if planned is not None and ready is not None:
            skews.append(ready - planned)
    in_flight = mean_at_once(starts, ends) if starts else math.nan
    if spec is None:
        return {"offered_rate": math.nan, "achieved_rate": math.nan, "in_flight": in_flight,
                "launch_skew_p99_s": math.nan}
    # the departure rate: completions per second between the first and the last completion
    # (a stable queue's departures keep pace with its arrivals; an overloaded one's fall to the
    # service rate), free of the first request's wait that a span from its arrival would hold
    span = (max(ends) - min(ends)) if len(ends) > 1 else math.nan
    return {
        "offered_rate": float(spec["rate"]),
        "achieved_rate": (len(ends) - 1) / span if span and span > 0 else math.nan,
        "in_flight": in_flight,
        "launch_skew_p99_s": cell_quantile(skews, 0.99),
    }
