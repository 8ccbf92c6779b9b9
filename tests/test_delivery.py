"""Buffered streams: the rule that reads how a request's text arrived (slotbench.tables.delivery), the
check that names them (checks/buffering.py), and what they must not do to the other numbers:
blame the server's slots, or report more requests generating at once than ever were."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from slotbench.checks import buffering, serialisation
from slotbench.core.cells import OVERLAP_TOLERANCE_S, mean_at_once, most_at_once
from slotbench.measure.backends.base import RequestRecord
from slotbench.tables.consolidate import cell_metrics, headline_cells
from slotbench.tables.crosscheck import exclusions
from slotbench.tables.delivery import buffered, request_buffered
from synthetic import make_requests, tables


def test_the_reads_a_stream_arrived_in_are_counted_as_they_came():
    rec = RequestRecord(t_sent=0.0)
    for t in (0.01, 0.02, 0.03, 0.5, 0.5, 0.5, 0.5):  # three reads of one token, then a burst
        rec.text_arrived(t)
    assert (rec.t_first, rec.t_last) == (0.01, 0.5)
    assert (rec.text_reads, rec.last_read_chunks, rec.most_read_chunks) == (4, 4, 4)
    raw = rec.to_raw(0.0)
    assert (raw["text_reads"], raw["last_read_chunks"], raw["most_read_chunks"]) == (4, 4, 4)


@pytest.mark.parametrize("chunks, reads, most, expected", [
    (16, 16, 1, False),  # token by token
    (16, 14, 2, False),  # two tokens read together now and then
    (16, 1, 16, True),  # everything in one read at the end
    (16, 9, 8, True),  # the first eight held for a delayed ACK, then one a read (Nagle)
    (16, 13, 3, False),  # three at once: a late read, not yet a burst
    (3, 1, 3, False),  # too short to judge
    (None, None, None, False),  # a raw file from before the reads were kept
])
def test_a_request_is_buffered_when_its_text_came_in_bursts(chunks, reads, most, expected):
    row = {"chunks": chunks, "text_reads": reads, "most_read_chunks": most}
    assert request_buffered(row) is expected
    assert bool(buffered(pd.DataFrame([row]))[0]) is expected


def _buffered(requests: pd.DataFrame, which) -> pd.DataFrame:
    """Streamed token by token, except the requests ``which`` picks: in one read at the end."""
    held = requests.apply(which, axis=1)
    tokens = requests["output_tokens"]
    return requests.assign(chunks=tokens, text_reads=tokens.where(~held, 1),
                           last_read_chunks=tokens.where(held, 1),
                           most_read_chunks=tokens.where(held, 1))


def test_the_check_fires_on_buffered_streams_and_unquotes_time_to_first_token():
    requests = _buffered(make_requests(reps=3), lambda r: r["request"] > 0)
    (v,), _ = buffering.check(tables(requests), {})
    assert v.fired and v.effect == "warn" and v.evidence["unquoted_metrics"] == ["ttft"]
    assert v.summary == ("the stream was buffered between the server and the client (27 of 36 "
                         "requests delivered up to 64 tokens in one read, 27 of them in their "
                         "last read)")
    # a per-user rate timed by the client is a burst's too
    client = requests.assign(timing_source="client")
    (v,), _ = buffering.check(tables(client), {})
    assert v.evidence["unquoted_metrics"] == ["ttft", "user"]


def test_a_stream_read_token_by_token_or_a_hiccup_does_not_fire():
    quiet = _buffered(make_requests(reps=3), lambda r: False)
    (v,), _ = buffering.check(tables(quiet), {})
    assert v.assessable and not v.fired
    hiccup = _buffered(make_requests(reps=3), lambda r: (r["rep"], r["arm"], r["request"])
                       == (1, 2, 1))
    (v,), _ = buffering.check(tables(hiccup), {})
    assert not v.fired and v.evidence == {"requests": 36, "buffered": 1}


def test_without_the_reads_the_check_is_not_assessable():
    (v,), _ = buffering.check(tables(make_requests(reps=3)), {})
    assert not v.assessable and v.verdict == "not assessable"


def test_buffered_cells_are_not_read_as_a_serialised_server():
    # four slots, but the client saw every parallel request's text only when it was over:
    # their [first, done] windows no longer overlap
    requests = make_requests(reps=3, slots=4)
    late = requests["arm"] > 1
    requests.loc[late, "t_done_s"] += 0.01 * requests.loc[late, "request"]  # bursts in turn
    requests.loc[late, "t_first_s"] = requests.loc[late, "t_done_s"] - 0.001
    assert serialisation.check(tables(requests), {})[0][0].fired  # read naively: "serialised"
    held = _buffered(requests, lambda r: r["arm"] > 1)
    (v,), _ = serialisation.check(tables(held), {})
    assert not v.fired and not v.assessable
    assert "buffered between the server and the client" in v.sentence


def test_a_buffered_request_is_generating_when_the_server_says_it_was():
    # two requests generating together for a second; the second's text arrived at its end
    rows = [{"request": 0, "t_sent_s": 0.0, "t_first_s": 0.1, "t_done_s": 1.1, "gen_s": 1.0,
             "output_tokens": 50, "chunks": 50, "text_reads": 50, "most_read_chunks": 1},
            {"request": 1, "t_sent_s": 0.0, "t_first_s": 1.099, "t_done_s": 1.1, "gen_s": 1.0,
             "output_tokens": 50, "chunks": 50, "text_reads": 1, "most_read_chunks": 50}]
    metrics = cell_metrics(rows)
    assert metrics["gen_streams_max"] == 2
    assert metrics["gen_streams"] == pytest.approx(2.0)


def test_generating_at_once_never_exceeds_its_most():
    rng = random.Random(31)
    for _ in range(2000):
        n = rng.randint(1, 6)
        starts = [rng.choice([0.0, 0.001, 0.004, 0.5]) + rng.random() * 0.02 for _ in range(n)]
        ends = [s + rng.choice([0.0, 0.002, 0.006, 0.02, 0.3]) for s in starts]
        most = most_at_once(starts, ends)
        mean = mean_at_once(starts, ends, OVERLAP_TOLERANCE_S)
        assert mean != mean or mean <= most + 1e-9, (starts, ends, mean, most)


def test_every_excluded_cell_says_why_and_headline_cells_are_the_rest():
    cells = pd.DataFrame({
        "target": "t", "run": "run1", "rep": [1, 1, 2, 2], "arm": [1, 2, 1, 2],
        "suspect_requests": [1, 0, 0, 2],
        "excluded": ["server numbers: 1 of 4 requests disagreed with the client (request 0: x)",
                     None, None, "server numbers: 2 of 4 requests disagreed (request 1: y)"],
    })
    why = exclusions(cells)
    assert why[0].startswith("server numbers: 1 of 4")
    assert why[1].startswith("its rep's serial cell") and why[1].endswith("(request 0: x)")
    assert why[2] is None and why[3].startswith("server numbers: 2 of 4")
    assert headline_cells(cells)[["rep", "arm"]].values.tolist() == [[2, 1]]
