"""A server's numbers are evidence, not truth (docs/method.md#server-numbers-are-evidence).

Every request's server-reported output tokens and generation time are checked against what the
client saw of the same request: the chunks of text it received, when the first and the last of
them arrived, and how long the whole request took. A request that fails is flagged in
requests.parquet with the reason; its cell is kept out of the headline, the checks and the
figures (slotbench.checks.server_numbers names it). The tolerances:

- tokens: at most ``num_predict`` (the ceiling the request asked for); no fewer than the text
  chunks streamed minus one (a final chunk may carry no token); no more than
  ``MAX_TOKENS_PER_CHUNK`` per chunk streamed (servers may batch tokens into a chunk);
- generation time (when the server reported it): a finite positive number when more than one
  token came; no longer than the request took on the client's clock, with ``TIME_RATIO`` and
  ``TIME_SLACK_S`` for clock granularity; no shorter than ``MIN_SPAN_RATIO`` of the time the
  client saw the tokens arrive over, minus ``TIME_SLACK_S``;
- every number the server sent is finite (NaN and infinities are recorded as missing).
"""

from __future__ import annotations

import math

import pandas as pd

from slotbench.core.cells import REP_KEYS, SERIAL_ARM

MAX_TOKENS_PER_CHUNK = 16
TIME_RATIO = 1.05
TIME_SLACK_S = 0.05
MIN_SPAN_RATIO = 0.5


def _num(x) -> float | None:
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def crosscheck(req: dict, num_predict: int | None = None) -> str | None:
    """Why a request's server-reported numbers cannot be trusted, or None when they hold."""
    invalid = (req.get("server") or {}).get("invalid")
    if invalid:
        return f"the server sent numbers that are not finite ({', '.join(invalid)})"
    tokens, chunks = _num(req.get("output_tokens")), int(req.get("chunks") or 0)
    if tokens is None:
        return "the server reported no output token count"
    if tokens < 0:
        return f"the server reported {tokens:g} output tokens"
    if num_predict is not None and tokens > num_predict:
        return (
            f"the server reported {tokens:g} output tokens, more than the {num_predict} asked for"
        )
    if chunks > tokens + 1:
        return (f"the client received {chunks} chunks of text, but the server reported "
                f"{tokens:g} tokens")
    if tokens > max(1, chunks) * MAX_TOKENS_PER_CHUNK + 1:
        return (f"the server reported {tokens:g} tokens, but the client received only {chunks} "
                "chunks of text")
    if req.get("timing_source", "server") != "server":
        return None  # generation time was measured on the client: nothing to check it against
    gen = _num(req.get("gen_s"))
    if tokens > 1 and gen is None:
        return "the server reported no generation time"
    if gen is None:
        return None
    if tokens > 1 and gen <= 0:
        return f"the server reported a generation time of {gen:g} s for {tokens:g} tokens"
    sent, first, last, done = (_num(req.get(k)) for k in ("t_sent_s", "t_first_s", "t_last_s",
                                                          "t_done_s"))
    if sent is not None and done is not None and gen > (done - sent) * TIME_RATIO + TIME_SLACK_S:
        return (f"the server reported {gen:.3f} s of generation, longer than the {done - sent:.3f} "
                "s the whole request took on the client's clock")
    if first is not None and last is not None:
        span = last - first
        if gen < span * MIN_SPAN_RATIO - TIME_SLACK_S:
            return (f"the server reported {gen:.3f} s of generation, but the client saw its "
                    f"tokens arrive over {span:.3f} s")
    return None


# Why a cell is kept out of the headline (cells.parquet's `excluded`), from its requests' flags.
SERIAL_EXCLUDED = ("its rep's serial cell (the denominator of every ratio of the rep) is out of "
                   "the headline: ")


def exclusions(cells: pd.DataFrame) -> pd.Series:
    """Why each cell is kept out of the headline, or None: a cell with a request whose server
    numbers failed the cross-check with the client (:func:`crosscheck`), and every cell of a rep
    whose serial cell (the ratios' denominator) did. The one rule behind consolidate.headline_cells
    and cells.parquet's ``excluded`` column."""
    if "suspect_requests" not in cells or cells.empty:
        return pd.Series([None] * len(cells), index=cells.index, dtype=object)
    bad = cells["suspect_requests"].fillna(0) > 0
    own = (cells["excluded"] if "excluded" in cells
           else pd.Series("server numbers: a request disagreed with the client", cells.index))
    why = own.astype(object).where(bad, None)
    serial = cells[(cells["arm"] == SERIAL_ARM) & bad]
    if not serial.empty:
        keys = cells[REP_KEYS].apply(tuple, axis=1)
        lost = dict(zip(serial[REP_KEYS].apply(tuple, axis=1), why[serial.index]))
        why = why.where(bad, keys.map(lambda k: SERIAL_EXCLUDED + lost[k] if k in lost else None))
    return why.astype(object).where(why.notna(), None)
