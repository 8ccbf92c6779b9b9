"""A server's counts and timings against what the client saw (slotbench.tables.crosscheck), and the
checks that keep what fails out of the headline (server_numbers, concurrency)."""

from __future__ import annotations

import pandas as pd
import pytest

from slotbench.checks.concurrency import reached
from slotbench.tables.crosscheck import crosscheck

GOOD = {"output_tokens": 8, "chunks": 8, "gen_s": 0.20, "timing_source": "server",
        "t_sent_s": 0.0, "t_first_s": 0.05, "t_last_s": 0.25, "t_done_s": 0.26,
        "server": {}}


def req(**changes) -> dict:
    return GOOD | changes


def test_numbers_that_agree_with_the_client_pass():
    assert crosscheck(req(), num_predict=8) is None
    # a final chunk without a token, and servers that batch tokens into chunks, are fine
    assert crosscheck(req(chunks=9), num_predict=8) is None
    assert crosscheck(req(chunks=2, output_tokens=8), num_predict=8) is None


@pytest.mark.parametrize("changes, reason", [
    ({"output_tokens": 800}, "the server reported 800 output tokens, more than the 8 asked for"),
    ({"output_tokens": 800, "chunks": 8}, "more than the 8 asked for"),
    ({"output_tokens": -3}, "the server reported -3 output tokens"),
    ({"output_tokens": None}, "the server reported no output token count"),
    ({"output_tokens": 4, "chunks": 8}, "the client received 8 chunks of text, but the server "
                                        "reported 4 tokens"),
    ({"gen_s": None}, "the server reported no generation time"),
    ({"gen_s": 0.0}, "the server reported a generation time of 0 s for 8 tokens"),
    ({"gen_s": -0.2}, "the server reported a generation time of -0.2 s"),
    ({"gen_s": 5.0}, "longer than the 0.260 s the whole request took on the client's clock"),
    ({"gen_s": 0.01}, "but the client saw its tokens arrive over 0.200 s"),
    ({"server": {"invalid": ["predicted_ms=nan"]}}, "not finite (predicted_ms=nan)"),
])
def test_numbers_that_cannot_be_right_are_flagged_with_the_reason(changes, reason):
    assert reason in crosscheck(req(**changes), num_predict=8)


def test_a_count_without_a_ceiling_is_still_bounded_by_the_chunks():
    reason = crosscheck(req(output_tokens=800), num_predict=None)
    assert reason == "the server reported 800 tokens, but the client received only 8 chunks of text"


def test_client_timed_requests_are_not_checked_against_themselves():
    assert crosscheck(req(gen_s=None, timing_source="client"), num_predict=8) is None


def _requests(arm: int, windows: list[tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"target": "t", "run": "run1", "rep": 1, "arm": arm, "position": 0,
                          "request": i, "t_sent_s": a, "t_done_s": b}
                         for i, (a, b) in enumerate(windows)])


def test_reached_counts_the_requests_in_flight_at_once():
    full = _requests(4, [(0, 1), (0, 1), (0, 1), (0, 1)])
    staggered = _requests(4, [(0, 1), (1.1, 2), (2.1, 3), (0.5, 1.05)])
    assert reached(full)[0]["reached_median"] == 4
    row = reached(staggered)[0]
    assert row["reached_median"] == 2 and row["below"] == ["t/run1/rep1/arm4"]


# --- what the pipeline does with a flagged request ------------------------------------------

import synthetic  # noqa: E402
from slotbench.analysis import analyse# noqa: E402
from slotbench.analysis.analyse import headline_cells  # noqa: E402
from slotbench.checks.base import load_tables  # noqa: E402
from slotbench.core.cells import cell_labels  # noqa: E402
from slotbench.figures import plots as figures


def flagged():
    """Synthetic requests and cells: in rep 2 one parallel-4 request is flagged, in rep 3 the
    serial cell itself."""
    req = synthetic.make_requests(reps=4)
    req["suspect_reason"] = None
    req.loc[(req["rep"] == 2) & (req["arm"] == 4) & (req["request"] == 0),
            "suspect_reason"] = "the server reported 800 output tokens"
    req.loc[(req["rep"] == 3) & (req["arm"] == 1), "suspect_reason"] = "no generation time"
    cells = synthetic.make_cells(req)
    cells["suspect_requests"] = [
        int(req[(req["rep"] == c.rep) & (req["arm"] == c.arm)]["suspect_reason"].notna().sum())
        for c in cells.itertuples()
    ]
    return req, cells


def test_a_flagged_cell_and_a_rep_whose_serial_cell_is_flagged_leave_the_headline():
    req, cells = flagged()
    kept = headline_cells(cells)
    keys = set(zip(kept["rep"], kept["arm"]))
    assert (2, 4) not in keys and (2, 1) in keys and (2, 2) in keys
    assert not any(rep == 3 for rep, _ in keys)  # no denominator, no ratios
    assert len(kept) == len(cells) - 1 - 3

    data = synthetic.run(req, cells=cells)
    (verdict,) = [v for v in data.verdicts if v["trap"] == "server_numbers"]
    assert verdict["fired"] and verdict["effect"] == "warn"
    assert "embedded/run1/rep2/arm4" in verdict["cells"] and "embedded/run1/rep3/arm1" in verdict[
        "cells"]


@pytest.mark.slow  # analysis, checks and figures of a synthetic run
def test_the_analysis_the_checks_and_the_figures_read_the_same_cells(tmp_path):
    """One definition of the cells behind the headline: a rep whose serial cell was excluded
    leaves the ratios, the checks' tables and every figure with all its cells."""
    req, cells = flagged()
    behind = set(cell_labels(headline_cells(cells)))
    assert "embedded/run1/rep3/arm2" in cell_labels(cells)
    assert not any("/rep3/" in c for c in behind) and "embedded/run1/rep2/arm4" not in behind
    ratios = analyse.headline_ratios(cells)
    assert set(cell_labels(ratios)) == behind
    # the checks read their tables from the files the checks rule is given
    paths = {"cells": tmp_path / "cells.parquet", "requests": tmp_path / "requests.parquet",
             "control": tmp_path / "control.parquet", "thermal": tmp_path / "thermal.parquet",
             "summary": tmp_path / "summary.csv"}
    cells.to_parquet(paths["cells"])
    req.to_parquet(paths["requests"])
    cells.iloc[0:0].to_parquet(paths["control"])
    synthetic.tables(req).thermal.to_parquet(paths["thermal"])
    analyse.summarise(ratios, 50, 0.95, 1).to_csv(paths["summary"], index=False)
    tables = load_tables({k: str(v) for k, v in paths.items()})
    assert set(cell_labels(tables.cells)) == behind and len(tables.all_cells) == len(cells)
    # the figures are given every cell, as the figures rule is
    sources = figures.make_all(cells, ratios, tmp_path / "figures")
    drawn = set().union(*(set(src["cells"]) for src in sources.values()))
    assert drawn == behind


def test_an_arm_that_never_reached_its_concurrency_gets_no_headline():
    req = synthetic.make_requests(reps=4)
    # the client managed only two of parallel-4's requests at once: sends spaced out
    four = req["arm"] == 4
    order = req[four].groupby(["rep"]).cumcount()
    shift = (order // 2) * (req.loc[four, "t_done_s"] - req.loc[four, "t_sent_s"]).max() * 1.5
    for col in ("t_sent_s", "t_first_s", "t_done_s"):
        req.loc[four, col] = req.loc[four, col] + shift
    md, _, _, data = synthetic.rendered(req)
    (verdict,) = [v for v in data.verdicts if v["trap"] == "concurrency"]
    assert verdict["fired"] and verdict["effect"] == "exclude" and verdict["arms"] == [4]
    assert "parallel-4 reached at most 2 requests in flight (median cell), not 4" in md
    table = md.split("**Per-arm results**")[1].split("_Ratios")[0]
    assert "| parallel-4 (not a headline) |" in table and "| parallel-2 |" in table
    assert "Two-way concurrency" in md and "Four-way concurrency" not in md
