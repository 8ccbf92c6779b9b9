"""Trap: a stream buffered between the server and the client (docs/method.md#buffered-streams).

A proxy that buffers responses, or a server socket with Nagle's algorithm on, holds the tokens
and lets them through in bursts, often all at the end (slotbench.tables.delivery judges each request
from the reads its text arrived in). The client's time to first token is then the time to a
burst, and a per-user rate timed by the client is a burst's, not the server's. Those numbers
leave the headline; the server-timed rates and the aggregate still hold. The serialisation
check does not read buffered requests' windows, which no longer say when the server generated.
"""

from __future__ import annotations

from slotbench.checks.base import Tables, Verdict, constant, judged, not_assessable
from slotbench.core.cells import label_series
from slotbench.core.fmt import count
from slotbench.tables.delivery import BURST_CHUNKS, buffered, judged as delivery_judged

TRAP = "buffering"
TITLE = "Buffered stream (tokens held between server and client)"
ORDER = 8
TABLES = ()
ALL_CELLS = True  # judged from every request, those out of the headline too
# A target with at least this share of its judged requests buffered: its client-timed numbers
# leave the headline (a request or two in bursts is a hiccup of the machine, not a proxy).
BUFFERED_SHARE = 0.2
FIX = ("Switch buffering off where the stream passes: at an nginx proxy `proxy_buffering off;` "
       "(or the response header `X-Accel-Buffering: no`), at a gateway or load balancer its "
       "response buffering; at the server, TCP_NODELAY on its socket.")


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    req = tables.measured_requests
    verdicts = []
    for target in tables.targets:
        mine = req[req["target"] == target]
        ok = delivery_judged(mine)
        if not ok.any():
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no request recorded the reads its text arrived in",
                "No request recorded how its text arrived (raw files made before the reads were "
                f"kept, or outputs under {BURST_CHUNKS} chunks), so whether the stream was "
                "buffered on its way cannot be seen.",
            ))
            continue
        verdicts.append(_verdict(target, mine[ok], buffered(mine)[ok]))
    return verdicts, {}


def _rule() -> str:
    """What decides the verdict, as its sentence says it."""
    return (f"a request is buffered when {BURST_CHUNKS} chunks or more came in one read, and the "
            f"check fires at {BUFFERED_SHARE:.0%} of the requests "
            f"({constant(BURST_CHUNKS=BURST_CHUNKS, BUFFERED_SHARE=BUFFERED_SHARE)})")


def _verdict(target: str, judged_req, held) -> Verdict:
    n, m = int(held.sum()), len(held)
    fired = n >= 1 and n >= BUFFERED_SHARE * m
    if not fired:
        summary = f"the text arrived as it was made ({count(m, 'request')} judged, {n} in bursts)"
        return judged(TRAP, TITLE, target, False, summary,
                      f"Buffered stream: {summary}; {_rule()}.",
                      threshold=BUFFERED_SHARE,
                      evidence={"requests": m, "buffered": n})
    bursts = judged_req[held]
    most = int(bursts["most_read_chunks"].max())
    at_end = int((bursts["last_read_chunks"] >= BURST_CHUNKS).sum())
    client_timed = ("timing_source" in bursts
                    and bool((bursts["timing_source"] == "client").any()))
    unquoted = ["ttft"] + (["user"] if client_timed else [])
    summary = (f"the stream was buffered between the server and the client ({n} of {m} requests "
               f"delivered up to {most} tokens in one read, {at_end} of them in their last read)")
    what = ("time to first token and the per-user rate timed by the client" if client_timed
            else "time to first token")
    warning = (f"Warning: {summary[0].upper()}{summary[1:]}; {_rule()}. The client saw the tokens "
               f"in bursts, so its {what} measured the bursts, not the server: they are not a "
               f"headline. {FIX}")
    cells = sorted(set(label_series(bursts)))
    return judged(TRAP, TITLE, target, True, summary, warning.removeprefix("Warning: "),
                  effect="warn", threshold=BUFFERED_SHARE, cells=cells,
                  evidence={"requests": m, "buffered": n, "most_in_one_read": most,
                            "held_to_the_end": at_end,
                            "unquoted_metrics": unquoted, "warnings": [warning]})
