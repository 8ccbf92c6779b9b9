"""The open loop's traps, on synthetic rate arms with a known answer: an overloaded rate arm
(its queue grows for the whole cell), a closed loop that understates waiting at the same request
rate, and a client that sent a rate arm's requests late (launch skew)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import synthetic as syn

from slotbench.checks import overload, run_checks, saturation, trap_modules, understatement
from slotbench.checks.base import Tables
from slotbench.checks.decision import headline_decision
from slotbench.core.cells import CELL_KEYS, arm_rate
from slotbench.tables.openloop import open_metrics
from slotbench.workflow import config as sbconfig

REPS = 4
GEN_S = 0.1


def rate_requests(arm, waits, *, reps=REPS, closed=None, skew=0.0, target=syn.TARGET):
    """The requests of a rate arm's cell in every rep: arrivals 1/rate apart after the rep's
    closed-loop cells, request k of rep r waiting ``waits(rep, k)`` for its first token (from
    its planned arrival), sent ``skew`` after it."""
    gap = 1.0 / arm_rate(arm)
    rows = []
    for rep in range(1, reps + 1):
        before = closed[closed["rep"] == rep] if closed is not None else closed
        start = float(before["t_done_s"].max()) + 0.01 if before is not None else 0.0
        position = before["position"].max() + 1 if before is not None else 0
        for k, wait in enumerate(waits(rep)):
            planned = start + k * gap
            first = planned + wait
            rows.append({
                "target": target, "run": syn.RUN, "rep": rep, "arm": arm, "position": position,
                "request": k, "nonce": f"{rep:02d}r{k:03d}", "prompt_tokens": syn.PROMPT,
                "output_tokens": syn.TOKENS, "t_planned_s": planned, "t_sent_s": planned + skew,
                "t_first_s": first, "t_done_s": first + GEN_S, "gen_s": GEN_S,
                "done_reason": "length", "timing_source": "server", "cache_n": 0,
                "prompt_n": syn.PROMPT, "control": False,
                "raw_file": syn.raw_path(target, syn.RUN, rep),
            })
    return pd.DataFrame(rows)


def cells_of(requests):
    """The cells table as consolidate builds it, open-loop columns included."""
    cells = syn.make_cells(requests)
    opened = []
    for key, grp in requests.groupby(CELL_KEYS, sort=True):
        arm = int(key[3])
        spec = {"rate": arm_rate(arm)} if arm < 0 else None
        opened.append(dict(zip(CELL_KEYS, key)) | open_metrics(grp.to_dict("records"), spec))
    return cells.merge(pd.DataFrame(opened), on=CELL_KEYS, how="left", validate="one_to_one")


def growing(per_request, wiggle=0.01):
    """Waiting that grows ``per_request`` s with each arrival (rep r's slope moved by
    ``wiggle`` × (r - 2.5), so the median slope over 4 reps is ``per_request``)."""
    return lambda rep: [0.05 + (per_request + wiggle * (rep - 2.5)) * k for k in range(10)]


def bounded(rep):
    """Waiting that comes and goes: no trend with arrival order."""
    return [0.05 + 0.02 * ((k + rep) % 3) for k in range(10)]


@pytest.fixture(scope="module")
def closed():
    return syn.make_requests(reps=REPS)


def verdicts_of(module, requests, cells=None, cfg=None):
    cfg = cfg or syn.config()
    cells = cells_of(requests) if cells is None else cells
    found, details = module.check(syn.tables(requests, cells=cells, cfg=cfg),
                                  sbconfig.check_settings(cfg))
    assert set(details) == set(module.TABLES)
    return [v.record() for v in found], details


# --- overload ---------------------------------------------------------------------------------


def test_a_queue_growing_with_every_arrival_is_overload(closed):
    requests = pd.concat([closed, rate_requests(-2000, growing(0.3), closed=closed)])
    (v,), details = verdicts_of(overload, requests)
    assert v["assessable"] and v["fired"] and v["effect"] == "exclude" and v["arms"] == [-2000]
    assert v["cells"] == [f"embedded/run1/rep{r}/arm-2000" for r in range(1, REPS + 1)]
    arm = v["evidence"]["arms"]["-2000"]
    assert arm["slope_s"] == pytest.approx(0.3)
    assert arm["slope_lo_s"] < 0.3 < arm["slope_hi_s"] and arm["slope_lo_s"] > 0
    assert arm["growth_s"] == pytest.approx(3.0) and arm["requests"] == 10
    assert v["threshold"] == 1.0 and v["config_key"] == "checks.overload_growth_s"
    lo, hi = (f"{x * 10:.1f}" for x in (arm["slope_lo_s"], arm["slope_hi_s"]))
    assert v["sentence"] == (
        "Overloaded: the server cannot sustain 2.0 req/s (rate-2/s achieved 1.3 req/s); waiting "
        f"grew by 3.0 s per 10 requests [{lo}, {hi}], so no TTFT percentile of that arm is "
        "quoted."
    )
    table = details["overload"]
    assert list(table.columns) == overload.ARM_COLUMNS
    assert table.set_index("arm")["overloaded"].to_dict() == {-2000: True}


def test_a_bounded_queue_is_not_overload_and_says_its_largest_slope(closed):
    requests = pd.concat([closed, rate_requests(-1000, bounded, closed=closed),
                          rate_requests(-2000, growing(0.02, 0.002), closed=closed)])
    (v,), _ = verdicts_of(overload, requests)
    assert v["assessable"] and not v["fired"] and v["effect"] == "none" and v["arms"] == []
    # rate-2/s grows for sure (its interval is above 0) but by 0.2 s over a cell: bounded
    two = v["evidence"]["arms"]["-2000"]
    assert two["slope_lo_s"] > 0 and two["growth_s"] == pytest.approx(0.2)
    assert v["sentence"].startswith(
        "No overload: the queue stayed bounded at every rate arm: the largest slope of waiting "
        "against arrival order, at rate-2/s, was 0.20 s per 10 requests [")
    assert v["sentence"].endswith("(0.20 s over a cell of 10 requests, within the 1.0 s bound).")


def test_a_rate_arm_with_one_cell_is_not_assessable(closed):
    requests = pd.concat([closed, rate_requests(-2000, growing(0.3), closed=closed, reps=1)])
    (v,), _ = verdicts_of(overload, requests)
    assert not v["assessable"] and v["verdict"] == "not assessable" and v["effect"] == "none"
    assert v["sentence"] == (
        "Overload is not assessable: rate-2/s is not assessable (1 cell with timed requests, 2 "
        "needed for an interval) (MIN_CELLS = 2, see docs/method.md#constants), so nothing "
        "shows whether the queue stayed bounded; run more reps.")


def test_the_growth_bound_comes_from_the_config(closed):
    requests = pd.concat([closed, rate_requests(-2000, growing(0.3), closed=closed)])
    (v,), _ = verdicts_of(overload, requests, cfg=syn.config(checks__overload_growth_s=5.0))
    assert not v["fired"] and v["threshold"] == 5.0
    assert "but its interval reaches 0" not in v["sentence"]


# --- closed-loop understatement ---------------------------------------------------------------


def paired_cells(rate_arm=-1250, achieved=1.25, ratios=(1.5, 1.6, 1.7, 1.6, 1.6)):
    """Cells of 5 reps: serial-1, a 4-way closed arm at 1.2 req/s with TTFT p95 2.5 s, a 2-way
    closed arm at 0.6 req/s, and a rate arm achieving ``achieved`` whose p95 is the ratio's."""
    rows = []
    for rep, ratio in enumerate(ratios, start=1):
        for position, (arm, n, wall, p95, rate) in enumerate([
            (1, 12, 30.0, 0.4, None), (2, 12, 20.0, 1.5, None), (4, 12, 10.0, 2.5, None),
            (rate_arm, 12, 12 / achieved, 2.5 * ratio, achieved),
        ]):
            rows.append({
                "target": syn.TARGET, "run": syn.RUN, "rep": rep, "arm": arm, "position": position,
                "n_requests": n, "wall_s": wall, "tokens_out": 64 * n, "agg_tps": 64 * n / wall,
                "user_tps": 30.0, "ttft_s": p95 / 2, "ttft_p95_s": p95, "achieved_rate": rate,
                "offered_rate": arm_rate(arm) if arm < 0 else None, "in_flight": 3.0,
                "launch_skew_p99_s": 0.001 if arm < 0 else None, "control": False,
            })
    return pd.DataFrame(rows)


def tables_of(cells, requests=None):
    empty = pd.DataFrame(columns=["target", "run", "rep", "arm", "request", "t_planned_s",
                                  "t_first_s", "control"])
    return Tables(cells=cells, requests=empty if requests is None else requests, control=empty,
                  thermal=empty, summary=empty)


def understated(cells, requests=None):
    found, details = understatement.check(tables_of(cells, requests),
                                          sbconfig.check_settings(syn.config()))
    return [v.record() for v in found], details


def test_a_closed_arm_paired_with_a_rate_arm_at_its_rate_shows_the_ratio():
    (v,), details = understated(paired_cells())
    assert v["assessable"] and v["fired"] and v["effect"] == "warn"
    four = v["evidence"]["arms"]["4"]
    assert four["pairs"] == 5 and four["ratio"] == pytest.approx(1.6)
    assert 1 < four["ratio_lo"] <= 1.6 <= four["ratio_hi"]
    assert four["closed_rate"] == pytest.approx(1.2) and four["rate_arms"] == [-1250]
    assert set(v["evidence"]["arms"]) == {"4"}  # parallel-2's 0.6 req/s is nothing near
    assert v["evidence"]["unpaired"] == {"2": 0.6}
    lo, hi = (f"{four[k]:.1f}×" for k in ("ratio_lo", "ratio_hi"))
    assert v["sentence"].startswith(
        "Closed loop understates waiting: 4-way closed loop: TTFT p95 2.5 s; arriving at random "
        f"at the same 1.2 req/s (rate-1.25/s): 4.0 s (1.6× [{lo}, {hi}]); no rate arm came "
        "within ±30% of parallel-2's 0.6 req/s. A closed loop sends")
    pairs = details["closed_loop_understatement"]
    assert list(pairs.columns) == understatement.PAIR_COLUMNS and len(pairs) == 5
    assert pairs["ratio"].tolist() == pytest.approx([1.5, 1.6, 1.7, 1.6, 1.6])
    assert "embedded/run1/rep1/arm4" in v["cells"] and "embedded/run1/rep1/arm-1250" in v["cells"]
    decision = headline_decision([v])["embedded"]
    assert decision["status"] == "allowed" and not decision["excluded_arms"]
    assert decision["warnings"][0]["text"].startswith(
        "Warning: the closed loop understates waiting: 4-way closed loop: TTFT p95 2.5 s;")


def test_a_ratio_whose_interval_reaches_1_is_quiet():
    (v,), _ = understated(paired_cells(ratios=(0.9, 1.0, 1.1, 1.0, 1.05)))
    assert v["assessable"] and not v["fired"] and v["effect"] == "none"
    assert v["sentence"].startswith("The closed loop did not understate waiting: 4-way closed "
                                    "loop: TTFT p95 2.5 s; arriving at random at the same 1.2 "
                                    "req/s (rate-1.25/s): 2.5 s (1.0× [")


def test_nothing_near_is_not_assessable_and_says_which_rates_would_pair():
    (v,), details = understated(paired_cells(rate_arm=-300, achieved=0.3))
    assert not v["assessable"] and v["verdict"] == "not assessable" and v["effect"] == "none"
    assert v["sentence"] == (
        "Closed-loop understatement is not assessable: no rate arm came within ±30% (NEAR = "
        "0.3, see docs/method.md#constants) of a closed-loop arm's achieved rate in the same "
        "rep (closed loop: parallel-2 0.6 req/s, "
        "parallel-4 1.2 req/s; rate arms achieved: rate-0.3/s 0.3 req/s); add rate arms at the "
        "closed arms' achieved rates, e.g. {rate: 0.6}, {rate: 1.2} in `arms`.")
    assert details["closed_loop_understatement"].empty


def test_an_overloaded_rate_arm_is_never_paired(closed):
    """A rate arm at the closed arm's rate whose queue grew for the whole cell: its TTFT p95
    describes the cell's length, so it is not set beside the closed loop."""
    cells = paired_cells(ratios=(1.5, 1.6, 1.7, 1.6))
    requests = rate_requests(-1250, growing(0.3))
    (v,), _ = understated(cells, requests)
    assert not v["assessable"] and v["evidence"]["overloaded"] == [-1250]
    assert v["sentence"].startswith("Closed-loop understatement is not assessable: no rate arm "
                                    "the server sustained came within ±30%")
    assert "rate-1.25/s 1.2 req/s (overloaded: never paired)" in v["sentence"]


def test_a_target_without_rate_arms_gets_no_verdict_from_either_trap(closed):
    cfg = syn.config()
    for module in (overload, understatement):
        found, details = module.check(syn.tables(closed, cfg=cfg), sbconfig.check_settings(cfg))
        assert found == [] and set(details) == set(module.TABLES)
    verdicts, details = run_checks(syn.tables(closed, cfg=cfg), sbconfig.check_settings(cfg))
    assert not {v.trap for v in verdicts} & {"overload", "closed_loop_understatement"}
    assert details["overload"].empty and details["closed_loop_understatement"].empty


# --- launch skew (client saturation) ----------------------------------------------------------


def skewed_cells(closed, skew):
    requests = pd.concat([closed, rate_requests(-20000, bounded, closed=closed, skew=skew)])
    cells = cells_of(requests).assign(client_processes=1, client_busy=0.1, client_busy_process=0,
                                      client_lag_p95_s=0.001, client_lag_process=0)
    return requests, cells


def test_a_rate_arm_sent_late_is_excluded_and_named(closed):
    requests, cells = skewed_cells(closed, 0.0352)
    assert cells.loc[cells["arm"] == -20000, "launch_skew_p99_s"].tolist() == pytest.approx(
        [0.0352] * REPS)
    (v,), details = verdicts_of(saturation, requests, cells)
    assert v["fired"] and v["effect"] == "exclude" and v["arms"] == [-20000]
    assert v["sentence"] == (
        "Client saturated: launch skew p99 35.2 ms at rate-20/s: the client sent late, so those "
        "users' waiting is the client's (4 of 4 cells), so that arm gets no headline; give the "
        "client more processes (client.processes) or cores (client.cpus).")
    assert v["cells"] == [f"embedded/run1/rep{r}/arm-20000" for r in range(1, REPS + 1)]
    assert v["evidence"]["thresholds"]["checks.launch_skew_s"] == 0.010
    assert "launch skew p99 35.2 ms" in v["evidence"]["why"]["-20000"]
    row = details["client_saturation"].set_index("arm").loc[-20000]
    assert row["cells_late"] == REPS and row["launch_skew_p99_s"] == pytest.approx(0.0352)


def test_a_rate_arm_sent_on_time_keeps_its_headline_and_says_its_skew(closed):
    requests, cells = skewed_cells(closed, 0.0021)
    (v,), _ = verdicts_of(saturation, requests, cells)
    assert not v["fired"]
    assert v["sentence"].endswith(", launch skew p99 at most 2.1 ms (rate-20/s).")


# --- the report and the traps found by looking ------------------------------------------------


def test_an_overloaded_rate_arm_is_not_a_headline_in_the_per_arm_table(closed):
    requests = pd.concat([closed, rate_requests(-2000, growing(0.3), closed=closed),
                          rate_requests(-1000, bounded, closed=closed)])
    cells = cells_of(requests)
    md, _, _, data = syn.rendered(requests, cells=cells)
    decision = data.decision["embedded"]
    assert list(decision["excluded_arms"]) == ["-2000"]
    assert "rate-2/s is overloaded" in decision["excluded_arms"]["-2000"]
    table = md.split("**Per-arm results**")[1].split("_Ratios")[0]
    assert "| rate-2/s (not a headline) |" in table and "| rate-1/s |" in table
    row = syn.trap_row(md, overload.TITLE)
    assert row[1] == "yes" and row[2] == "1000.0 ms (checks.overload_growth_s)"
    assert re.search(r"rate-2/s \(waiting grew 3\.0 s over a cell\)", row[3])
    assert "Overloaded: the server cannot sustain 2.0 req/s" in md


def test_the_traps_are_found_by_looking():
    modules = trap_modules()
    assert overload in modules and understatement in modules
    assert modules.index(overload) < modules.index(understatement)
    assert overload.TRAP == "overload" and overload.TABLES == ("overload",)
    assert understatement.TRAP == "closed_loop_understatement"
    assert understatement.TABLES == ("closed_loop_understatement",)
