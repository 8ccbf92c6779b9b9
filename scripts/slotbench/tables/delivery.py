"""How a stream's text reached the client: token by token, or held on the way and let through
in bursts (docs/method.md#buffered-streams).

A server streams each token as it is made. Something between it and the client can hold them:
a proxy that buffers responses (nginx's ``proxy_buffering``, an API gateway, a load balancer)
or a server socket with Nagle's algorithm on, whose small writes wait for the client's delayed
ACK. The client then sees tokens in bursts, often the first few together or all at the end: its
time to first token is the time to a burst, and the [first token, done] windows it sees no
longer say when the server generated.

Every request records the socket reads that carried its text (``text_reads``), the text
chunks in the last of them (``last_read_chunks``) and the most in one (``most_read_chunks``),
stamped as the bytes arrived. A stream read token by token carries one chunk a read, now and
then two; a request whose text came ``BURST_CHUNKS`` chunks or more in one read was buffered.
"""

from __future__ import annotations

import pandas as pd

BURST_CHUNKS = 4  # text chunks in one read that make a burst (fewer streamed: not judged)
COLUMNS = ("chunks", "text_reads", "most_read_chunks")


def held(chunks, reads, most):
    """The rule, on numbers or on arrays alike: enough chunks to judge, and a burst."""
    return (chunks >= BURST_CHUNKS) & (reads >= 1) & (most >= BURST_CHUNKS)


def request_buffered(row: dict) -> bool:
    """:func:`held` for one request's row (False where it recorded no reads)."""
    values = [row.get(c) for c in COLUMNS]
    if any(v is None or v != v for v in values):  # None or NaN
        return False
    return bool(held(*values))


def judged(requests: pd.DataFrame) -> pd.Series:
    """Whether each request's delivery can be judged: it recorded its reads (raw files made
    before they were kept did not) and streamed at least ``BURST_CHUNKS`` chunks of text."""
    if not all(c in requests for c in COLUMNS):
        return pd.Series(False, index=requests.index)
    chunks, reads = (pd.to_numeric(requests[c], errors="coerce") for c in COLUMNS[:2])
    return (chunks >= BURST_CHUNKS) & (reads >= 1)


def buffered(requests: pd.DataFrame) -> pd.Series:
    """Whether each request's text arrived in bursts (False where it cannot be judged)."""
    ok = judged(requests)
    if not ok.any():
        return ok
    chunks, reads, most = (pd.to_numeric(requests[c], errors="coerce") for c in COLUMNS)
    return ok & held(chunks, reads, most).fillna(False)


def generation_window(row: dict, num) -> tuple[float, float] | None:
    """When the server generated for a request, as the client saw it: first token to done. A
    stream buffered on its way says only when bursts arrived: its window is the server's own
    generation time up to done, or unknown when the server timed none."""
    first, done = num(row, "t_first_s"), num(row, "t_done_s")
    if first is None or done is None:
        return None
    if not request_buffered(row):
        return first, done
    gen = num(row, "gen_s")
    return None if gen is None or row.get("timing_source") == "client" else (done - gen, done)
