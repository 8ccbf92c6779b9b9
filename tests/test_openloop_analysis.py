"""The open loop's numbers (slotbench.analysis.openloop), its figures (slotbench.figures.openloop) and its
report section (slotbench.report.openloop), on synthetic cells and requests with known answers:
the goodput of a known share, a capacity between two rates, none without slo.goodput, and no
section (the same bytes) without rate arms."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import synthetic as syn
from slotbench import report
from slotbench.analysis import analyse, openloop as ratearms
from slotbench.core.cells import arm_id, arm_rate, cell_label
from slotbench.figures import openloop as figures_open
from slotbench.provenance import cellsets, ids as provenance
from slotbench.report import openloop as report_openloop
from slotbench.report.blocks import Figure, Sources, Table
from slotbench.workflow.config import resolve

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TARGET, RUN, REPS = "t", "run1", (1, 2, 3)
RATES = (1.0, 2.0, 4.0)
N = 10  # requests per cell
SLO = {"ttft_s_max": 0.5, "user_tps_min": 20.0, "goodput": 0.95}
PNG = b"\x89PNG\r\n\x1a\n"


def rate_arm(rate: float) -> int:
    return arm_id({"rate": rate})


def make_cells(targets=(TARGET,), rates=RATES) -> pd.DataFrame:
    """Serial-1 and parallel-4 plus one rate arm per rate in every rep; a rate arm's TTFT
    percentiles, achieved rate and requests in flight grow with its rate."""
    rows = []
    for target in targets:
        for rep in REPS:
            arms = [1, 4, *(rate_arm(r) for r in rates)]
            for position, arm in enumerate(arms):
                rate = arm_rate(arm) if arm < 0 else float("nan")
                load = rate if arm < 0 else float(arm)
                rows.append({
                    "target": target, "run": RUN, "rep": rep, "arm": arm, "position": position,
                    "n_requests": N, "suspect_requests": 0, "agg_tps": 100.0 * load + rep,
                    "user_tps": 50.0 - rep, "ttft_s": 0.10 * load + 0.01 * rep,
                    "ttft_p95_s": 0.20 * load + 0.01 * rep, "ttft_p99_s": 0.30 * load + 0.01 * rep,
                    "offered_rate": rate, "achieved_rate": 0.9 * rate + 0.01 * rep,
                    "in_flight": 0.5 * load if arm < 0 else float(arm),
                    "raw_file": f"results/raw/{target}/{RUN}/rep{rep}.json",
                    "raw_sha256": f"{rep:064x}", "control": False,
                })
    return pd.DataFrame(rows)


def make_requests(cells: pd.DataFrame, misses) -> pd.DataFrame:
    """N requests per rate-arm cell; ``misses(rep, rate)`` gives how many of them miss the TTFT
    level (2 s from their planned arrival) and how many then miss the per-user rate (5 tok/s)."""
    rows = []
    for c in cells[cells["arm"] < 0].itertuples(index=False):
        ttft_miss, rate_miss = misses(c.rep, arm_rate(c.arm))
        for i in range(N):
            planned = i / arm_rate(c.arm)
            slow = ttft_miss <= i < ttft_miss + rate_miss
            rows.append({
                "target": c.target, "run": c.run, "rep": c.rep, "arm": c.arm,
                "position": c.position, "request": i, "output_tokens": 16,
                "gen_s": 16 / 5.0 if slow else 16 / 50.0, "t_planned_s": planned,
                "t_sent_s": planned + 0.001,
                "t_first_s": planned + (2.0 if i < ttft_miss else 0.1), "control": False,
            })
    return pd.DataFrame(rows)


def known_share(rep, rate):
    """rate 1: 3, 2 and 1 of 10 requests miss in reps 1-3 (goodput 24/30 = 0.8); rate 2 meets
    every level; rate 4: half the requests miss TTFT in every rep."""
    if rate == 1.0:
        return {1: (3, 0), 2: (2, 0), 3: (0, 1)}[rep]
    return (5, 0) if rate == 4.0 else (0, 0)


def assessed(slo=SLO, misses=known_share, cells=None) -> dict:
    cells = make_cells() if cells is None else cells
    ratios = analyse.cell_ratios(analyse.headline_cells(cells))
    return ratearms.assess(ratios, make_requests(cells, misses), slo, 500, 0.95, 0)


def arms_of(record: dict, target: str = TARGET) -> dict:
    return {r["rate"]: r for r in record["targets"][target]["arms"]}


# --- the numbers --------------------------------------------------------------------------------


def test_goodput_is_the_share_of_requests_meeting_every_level():
    one = arms_of(assessed())[1.0]
    assert (one["requests"], one["requests_good"]) == (30, 24)
    assert one["goodput"] == pytest.approx(0.8)
    # an interval over reps: the reps' own shares are 0.7, 0.8 and 0.9
    assert 0.7 <= one["goodput_lo"] < 0.8 < one["goodput_hi"] <= 0.9
    assert one["verdict"] == ratearms.MISSES  # 0.95 is above the whole interval
    # judged on TTFT alone, rep 3's slow request meets: 25 of 30
    ttft_only = arms_of(assessed({"ttft_s_max": 0.5, "goodput": 0.95}))[1.0]
    assert ttft_only["requests_good"] == 25 and ttft_only["goodput"] == pytest.approx(25 / 30)


def test_a_request_without_a_first_token_or_a_generation_time_misses():
    cells = make_cells(rates=(1.0,))
    requests = make_requests(cells, lambda rep, rate: (0, 0))
    requests.loc[0, "t_first_s"] = np.nan
    requests.loc[1, "gen_s"] = 0.0
    per = ratearms.request_goodput(requests, SLO)
    assert not per["good"].iloc[0] and not per["good"].iloc[1] and per["good"].iloc[2:].all()
    # the TTFT counts from the planned arrival, not from the send
    assert per["ttft_s"].iloc[2] == pytest.approx(0.1)


def test_the_arm_numbers_are_medians_over_its_cells_with_intervals():
    record = assessed()
    four = arms_of(record)[4.0]
    assert four["arm"] == -4000 and four["name"] == "rate-4/s" and four["n_cells"] == 3
    assert four["offered_rate"] == 4.0
    assert four["achieved_rate"] == pytest.approx(3.62)
    assert four["ttft_p95"] == pytest.approx(0.82) and four["ttft_p99"] == pytest.approx(1.22)
    assert four["ttft_p95_lo"] <= four["ttft_p95"] <= four["ttft_p95_hi"]
    assert four["in_flight"] == pytest.approx(2.0) and four["agg_tps"] == pytest.approx(402.0)
    assert four["speedup"] == pytest.approx(4.0, rel=0.02)  # against serial-1 of the same rep
    assert four["cells"] == [cell_label(TARGET, RUN, rep, -4000) for rep in REPS]
    # the effective-concurrency axis holds every arm, closed loop first
    axis = record["targets"][TARGET]["axis"]
    assert [(r["name"], r["open"]) for r in axis] == [
        ("serial-1", False), ("parallel-4", False), ("rate-1/s", True), ("rate-2/s", True),
        ("rate-4/s", True)]
    assert axis[1]["in_flight"] == 4.0


def test_capacity_lies_between_two_measured_rates():
    cap = assessed(misses=lambda rep, rate: (5, 0) if rate == 4.0 else (0, 0))
    cap = cap["targets"][TARGET]["capacity"]
    assert cap["rate"] == 2.0 and cap["next_rate"] == 4.0
    assert cap["next_verdict"] == ratearms.MISSES and cap["between"] == [2.0, 4.0]
    assert cap["level"] == 0.95


def test_capacity_is_none_when_the_lowest_rate_misses_and_never_skips_a_rate():
    record = assessed()  # rate 1 misses, rate 2 meets: 2 is not a capacity
    cap = record["targets"][TARGET]["capacity"]
    assert cap["rate"] is None and cap["next_rate"] == 1.0 and cap["between"] is None
    assert arms_of(record)[2.0]["verdict"] == ratearms.MEETS


def test_capacity_beyond_the_largest_rate_and_an_undetermined_next():
    every = assessed(misses=lambda rep, rate: (0, 0))["targets"][TARGET]["capacity"]
    assert every["rate"] == 4.0 and every["next_rate"] is None and every["between"] is None
    # rate 4: one rep of three misses half -> an interval reaching both sides of 0.9
    mixed = assessed({**SLO, "goodput": 0.9},
                     misses=lambda rep, rate: (5, 0) if rate == 4.0 and rep == 1 else (0, 0))
    cap = mixed["targets"][TARGET]["capacity"]
    assert cap["rate"] == 2.0 and cap["next_verdict"] == ratearms.UNDETERMINED
    assert cap["between"] is None


def test_no_capacity_without_slo_goodput_or_without_a_level():
    record = assessed({"ttft_s_max": 0.5})
    target = record["targets"][TARGET]
    assert target["capacity"] is None and target["capacity_reason"] == ratearms.NO_GOODPUT_LEVEL
    assert record["slo"]["goodput"] is None
    assert arms_of(record)[1.0]["goodput"] == pytest.approx(25 / 30)  # still measured
    assert arms_of(record)[1.0]["verdict"] is None
    bare = assessed({"goodput": 0.9})["targets"][TARGET]
    assert bare["capacity"] is None and bare["capacity_reason"] == ratearms.NO_SERVICE_LEVEL
    assert bare["arms"][0]["goodput"] is None


def test_every_target_gets_a_record_empty_without_rate_arms():
    cells = pd.concat([make_cells(), make_cells(("closed",), rates=())], ignore_index=True)
    record = assessed(cells=cells)
    closed = record["targets"]["closed"]
    assert closed == {"arms": [], "axis": [], "capacity": None,
                      "capacity_reason": ratearms.NO_RATE_ARMS}
    assert ratearms.has_rate_arms(record)
    assert not ratearms.has_rate_arms({"targets": {"closed": closed}})


def test_entry_point_writes_openloop_json(tmp_path):
    cells = make_cells()
    cells.to_parquet(tmp_path / "cells.parquet", index=False)
    make_requests(cells, known_share).to_parquet(tmp_path / "requests.parquet", index=False)
    out = {k: str(tmp_path / f"{k}.{ext}") for k, ext in
           (("ratios", "parquet"), ("summary", "csv"), ("capacity", "json"), ("openloop", "json"))}
    smk = SimpleNamespace(
        input=SimpleNamespace(cells=str(tmp_path / "cells.parquet"),
                              requests=str(tmp_path / "requests.parquet")),
        params=SimpleNamespace(n_boot=100, ci=0.95, seed=0, prices={},
                               slo=resolve({"slo": SLO})["slo"]),
        log=[str(tmp_path / "analyse.log")], output=SimpleNamespace(**out),
    )
    runpy.run_path(str(SCRIPTS / "analyse.py"), init_globals={"snakemake": smk})
    record = json.loads(Path(out["openloop"]).read_text())
    assert record["schema"] == ratearms.SCHEMA
    assert arms_of(record)[1.0]["requests_good"] == 24
    # the concurrency capacity keeps to the concurrency levels
    capacity = json.loads(Path(out["capacity"]).read_text())
    assert all(r["arm"] > 0 for r in capacity["targets"][TARGET]["arms"])


# --- figures ------------------------------------------------------------------------------------

OVERLOAD = {"trap": "overload", "fired": True, "target": TARGET, "arms": [-4000],
            "effect": "exclude"}


@pytest.mark.slow  # figures and reports of synthetic runs
def test_figures_draw_with_rate_arms_and_mark_overloaded_arms(tmp_path):
    record = json.loads(json.dumps(assessed()))  # as read back from openloop.json
    sources = figures_open.make_open(record, tmp_path, verdicts=[OVERLOAD])
    assert set(sources) == set(figures_open.FIGURE_IDS)
    rate_cells = [cell_label(TARGET, RUN, rep, arm) for rep in REPS for arm in (-1000, -2000,
                                                                                  -4000)]
    for fid, src in sources.items():
        assert (tmp_path / src["file"]).read_bytes().startswith(PNG)
        assert src["shown"] is True and src["section"] == report_openloop.FIGURE_SECTION
        assert set(rate_cells) <= set(src["cells"]) and src["raw_sha256"]
    assert cell_label(TARGET, RUN, 1, 4) in sources["concurrency_axis"]["cells"]
    assert cell_label(TARGET, RUN, 1, 4) not in sources["latency_load"]["cells"]
    assert ratearms.overloaded([OVERLOAD, {**OVERLOAD, "fired": False, "arms": [-1000]}]) == {
        TARGET: {-4000}}


def test_figures_without_rate_arms_are_placeholders_not_shown(tmp_path):
    record = assessed(cells=make_cells(rates=()))
    sources = figures_open.make_open(record, tmp_path, files={"latency_load": "ll.png"})
    assert sources["latency_load"]["file"] == "ll.png"
    for src in sources.values():
        assert src["shown"] is False and src["cells"] == []
        assert (tmp_path / src["file"]).read_bytes().startswith(PNG)


# --- the report section -------------------------------------------------------------------------


def section_blocks(record, verdicts=(), sources=None):
    index = provenance.CellIndex(make_cells())
    return report_openloop.blocks(record, list(verdicts), sources or {}, {}, index, "95%")


def test_section_table_sentence_and_provenance():
    record = assessed(misses=lambda rep, rate: (5, 0) if rate == 4.0 else (0, 0))
    blocks = section_blocks(record)
    tables = [b for b in blocks if isinstance(b, Table)]
    assert len(tables) == 1 and tables[0].anchor == "openloop/t"
    assert tables[0].row_ids == [f"openloop/t/arm-{a}" for a in (1000, 2000, 4000)]
    follow = blocks[blocks.index(tables[0]) + 1]
    assert isinstance(follow, Sources) and follow.prov == "openloop/t" and follow.hashes
    assert cell_label(TARGET, RUN, 1, 1) in follow.cells  # the ratios' serial denominators
    rows = {r[0]: r for r in tables[0].rows}
    assert rows["rate-4/s"][-1].startswith("50.0% [50.0%, 50.0%] (15/30)")
    sentence = next(b.text for b in blocks if getattr(b, "kind", "") == "headline")
    assert sentence.startswith("Serves 2 requests/s offered (rate-2/s, achieved")
    assert "The limit lies between 2 and 4 requests/s; nothing between them was measured." in (
        sentence)
    entries = cellsets.expand(provenance.build_record(
        [r for b in blocks if isinstance(b, Sources) for r in b.refs],
        provenance.CellIndex(make_cells()), None))
    assert {"openloop/t", "openloop/t/capacity", "openloop/t/arm-4000"} <= set(entries["entries"])
    row = entries["entries"]["openloop/t/arm-4000"]
    assert {c["role"] for c in row["cells"]} == {"arm", "serial-baseline"}


def test_an_overloaded_arm_quotes_no_percentile():
    blocks = section_blocks(assessed(misses=lambda rep, rate: (0, 0)), [OVERLOAD])
    table = next(b for b in blocks if isinstance(b, Table))
    rows = {r[0]: r for r in table.rows}
    assert rows["rate-4/s"][3:6] == ["overloaded"] * 3
    assert "overloaded" not in rows["rate-2/s"]
    assert "Overloaded (the overload check" in table.note and "rate-4/s" in table.note
    sentence = next(b.text for b in blocks if getattr(b, "kind", "") == "headline")
    assert "the limit lies beyond 4 requests/s" in sentence
    assert "The overload check marked rate-4/s overloaded" in sentence


def test_no_capacity_sentence_says_why():
    blocks = section_blocks(assessed({"ttft_s_max": 0.5}))
    sentence = next(b.text for b in blocks if getattr(b, "kind", "") == "headline")
    assert sentence.startswith("No capacity in requests/s: slo.goodput is not set")
    first = section_blocks(assessed())
    sentence = next(b.text for b in first if getattr(b, "kind", "") == "headline")
    assert sentence.startswith("No measured rate keeps at least 95% of requests meeting")
    assert "even rate-1/s, the lowest rate measured, misses it" in sentence


@pytest.mark.slow  # figures and reports of synthetic runs
def test_the_section_shows_its_figures_and_the_figures_section_does_not(tmp_path):
    record = json.loads(json.dumps(assessed()))
    sources = figures_open.make_open(record, tmp_path)
    blocks = section_blocks(record, sources=sources)
    assert [b.fig_id for b in blocks if isinstance(b, Figure)] == list(figures_open.FIGURE_IDS)
    assert report_openloop.general_figures(sources | {"ttft": {"file": "ttft.png"}}) == {
        "ttft": {"file": "ttft.png"}}


@pytest.mark.slow  # figures and reports of synthetic runs
def test_no_section_and_the_same_report_without_rate_arms(tmp_path):
    requests = syn.make_requests()
    data = syn.run(requests)
    before = report.render(data)
    ratios = analyse.cell_ratios(analyse.headline_cells(data.cells))
    data.openloop = json.loads(json.dumps(ratearms.assess(ratios, requests, SLO, 100, 0.95, 0)))
    assert data.openloop["targets"][syn.TARGET]["arms"] == []
    placeholders = figures_open.make_open(data.openloop, tmp_path)
    data.figures_sources = {**data.figures_sources, **placeholders}
    after = report.render(data)
    assert after[0] == before[0] and after[1] == before[1]
    assert provenance.dumps(after[2]) == provenance.dumps(before[2])
    assert "Open loop" not in after[0]
