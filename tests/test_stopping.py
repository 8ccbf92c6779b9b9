"""reps: auto without Snakemake: the config's stopping block, the reps the looks grow to, each
look's decision and the trail of looks decided again from the cells, the sequential intervals
the analysis publishes and the report's Stopping section. tests/test_stopping_run.py runs it
through the workflow against scripted servers; tests/test_sequential.py holds the statistics."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

import synthetic
from slotbench.analysis.analyse import BOOTSTRAPPED, headline_ratios, sequential_summary, summarise
from slotbench.checks import stopping as checks_stopping
from slotbench.core import sequential
from slotbench.report.blocks import Paragraph, Table
from slotbench.report.stopping import blocks as stopping_blocks
from slotbench.workflow import config as sbconfig
from slotbench.workflow import stopping

CHECKS = {"checks": {"rotation_threshold": 0.10, "deviance_threshold": 0.05},
          "analysis": {"bootstrap": 200, "ci": 0.95}, "seed": 1}


def auto_settings(**over) -> dict:
    cfg = sbconfig.resolve({"reps": "auto", "arms": [1, 2, 4]} | over)
    return stopping.settings(cfg)


# --- the config -------------------------------------------------------------------------------


def test_a_fixed_config_is_as_it_was_and_auto_fills_its_stopping_block():
    fixed = sbconfig.resolve({})
    assert fixed["reps"] == 10 and "stopping" not in fixed
    assert stopping.settings(fixed) is None and sbconfig.rep_ids(fixed) == list(range(1, 11))
    auto = sbconfig.resolve({"reps": "auto"})
    assert auto["stopping"] == {"min_reps": 5, "max_reps": 30, "max_minutes": 60}
    # min_reps up, max_reps down to whole blocks of 3 (arms 1, 2, 4)
    s = auto_settings(stopping={"min_reps": 4, "max_reps": 29})
    assert (s["block"], s["min_reps"], s["max_reps"]) == (3, 6, 27)
    assert s["precision"] == 0.05 and s["ci"] == 0.95
    cfg = sbconfig.resolve({"reps": "auto", "stopping": {"max_reps": 29}})
    assert sbconfig.rep_ids(cfg) == list(range(1, 28))  # every rep it may measure


@pytest.mark.parametrize("over, line", [
    ({"reps": "auto", "stopping": {"min_reps": 12, "max_reps": 9}},
     r"`stopping.min_reps`: 12 is more than stopping.max_reps \(9\)"),
    ({"reps": "auto", "stopping": {"max_reps": 2}},
     r"`stopping.max_reps`: 2 is less than one rotation block \(3 reps, one per arm\)"),
    ({"reps": "auto", "stopping": {"max_minutes": 0}},
     r"`stopping.max_minutes`: 0 must be greater than 0"),
    ({"reps": "auto", "stopping": {"max_minutes": -5}},
     r"`stopping.max_minutes`: -5 must be greater than 0"),
    ({"reps": 4, "stopping": {"max_reps": 9}},
     r"`stopping`: it applies only with reps: auto, and reps is 4"),
    ({"reps": "auto", "stopping": {"min_reps": 10, "max_reps": 11}},
     r"`stopping.min_reps`: 10 rounds up to 12 reps \(whole blocks of 3\), more than the 9"),
    ({"reps": "auto", "prompt": {"nonce_digits": 4}, "stopping": {"max_reps": 200}},
     r"`stopping.max_reps`: 200 reps do not fit the nonce"),
    ({"reps": "sometimes"}, r"`reps`: 'sometimes' is not a whole number or 'auto'"),
])
def test_a_bad_stopping_value_is_one_line(over, line):
    with pytest.raises(sbconfig.ConfigError) as err:
        sbconfig.resolve({"arms": [1, 2, 4]} | over)
    text = str(err.value)
    assert text.startswith("invalid configuration (nothing was sent to any server): config key ")
    assert len(text.splitlines()) == 1
    assert re.search(line, text), text


def test_paired_is_refused_with_auto():
    cfg = {"reps": "auto", "design": "paired", "targets": [
        {"name": "a", "backend": "llamacpp", "url": "http://127.0.0.1:1"},
        {"name": "b", "backend": "llamacpp", "url": "http://127.0.0.1:2"}]}
    with pytest.raises(sbconfig.ConfigError, match=r"`reps`: auto is not available with design: "
                       r"paired .*give a number of reps"):
        sbconfig.resolve(cfg)


# --- the reps the looks grow to ---------------------------------------------------------------


class NotYet(Exception):
    """What Snakemake raises for a checkpoint not yet made."""


def test_the_reps_grow_look_by_look_until_one_stops():
    said = {1: "continue", 2: "continue", 3: "precise"}
    asked = []

    def decision_of(look):
        asked.append(look)
        return said[look]

    assert stopping.decided_reps(3, decision_of, 30) == list(range(1, 10))
    assert asked == [1, 2, 3]
    # a look not made yet: Snakemake's exception goes through, so the checkpoint is added
    def not_yet(look):
        if look > 2:
            raise NotYet(look)
        return "continue"

    with pytest.raises(NotYet):
        stopping.decided_reps(3, not_yet, 30)
    # never past max_reps: the look that would reach it is not even asked
    asked.clear()
    assert stopping.decided_reps(3, decision_of, 6) == list(range(1, 7)) and asked == [1]
    # reps measured already are used whatever a look says: it starts at the last whole look
    asked.clear()
    assert stopping.decided_reps(3, decision_of, 30, measured=3) == list(range(1, 10))
    assert asked == [3]
    assert stopping.look_reps(2, 3) == [1, 2, 3, 4, 5, 6]


def test_measured_looks_counts_whole_blocks_of_every_run():
    have = {1, 2, 3, 4, 5, 7}
    assert stopping.measured_looks(3, have.__contains__, 30) == 1
    assert stopping.measured_looks(2, have.__contains__, 30) == 2
    assert stopping.measured_looks(3, lambda rep: True, 9) == 3  # never past max_reps


def test_the_looks_key_follows_the_settings_and_the_code(tmp_path):
    code = tmp_path / "look.py"
    code.write_text("x = 1\n")
    s = auto_settings()
    key = stopping.looks_key(s, CHECKS, [str(code)])
    assert key == stopping.looks_key(dict(s), dict(CHECKS), [str(code)]) and len(key) == 12
    assert key != stopping.looks_key(s | {"precision": 0.02}, CHECKS, [str(code)])
    code.write_text("x = 2\n")
    assert key != stopping.looks_key(s, CHECKS, [str(code)])


# --- the looks --------------------------------------------------------------------------------


def cells_of(reps: int, runs=("run1", "run2"), **kw) -> pd.DataFrame:
    return pd.concat([synthetic.make_cells(synthetic.make_requests(run=run, reps=reps, **kw))
                      for run in runs], ignore_index=True)


def trail_of(cells: pd.DataFrame, **over) -> pd.DataFrame:
    return checks_stopping.trail(headline_ratios(cells), cells, auto_settings(**over), CHECKS)


def test_the_trail_decides_every_look_again_the_same_way():
    cells = cells_of(15)
    trail = trail_of(cells)
    assert list(trail.columns) == checks_stopping.COLUMNS
    # 5 looks of 3 reps; each: 2 parallel arms × 5 headline ratios
    assert sorted(trail["look"].unique()) == [1, 2, 3, 4, 5]
    assert (trail.groupby("look").size() == 10).all()
    assert list(trail.groupby("look")["reps_per_run"].first()) == [3, 6, 9, 12, 15]
    decided = trail.groupby("look")["look_decision"].first()
    # the sequence excludes nothing up to 8 reps a run (alpha / 2): no precise stop before 9
    assert list(decided[:2]) == ["continue", "continue"]
    assert (trail.loc[trail["look"] <= 2, "rel"] == math.inf).all()
    assert decided[3] == "precise"  # the synthetic wiggle is within 2%: precise once bounded
    # every row's interval is the confidence sequence of its reps so far, run by run
    ratios = headline_ratios(cells)
    row = trail[(trail["look"] == 4) & (trail["arm"] == 4) & (trail["metric"] == "speedup")]
    upto = ratios[(ratios["rep"] <= 12) & (ratios["arm"] == 4)]
    by_run = [upto.loc[upto["run"] == r, "speedup"] for r in ("run1", "run2")]
    assert tuple(row[["value", "lo", "hi"]].iloc[0]) == sequential.interval(by_run, 0.05)
    # decided again from the same cells: the same bytes
    assert trail.to_csv(index=False) == trail_of(cells.sample(frac=1, random_state=3)
                                                 .sort_values(["target", "run", "rep",
                                                               "position"])
                                                 .reset_index(drop=True)).to_csv(index=False)
    # the minutes are the reps' own time, as their cells say
    assert trail.groupby("look")["minutes"].first().is_monotonic_increasing


def test_each_stop_of_a_look():
    row = {"decision": "precise"}
    s = auto_settings(stopping={"max_reps": 12, "max_minutes": 10})
    decide = checks_stopping.decide
    assert decide([row, row], [], 6, 1.0, 2.0, s) == "precise"
    # a check that cannot look (or refuses) keeps a precise set of intervals going
    assert decide([row], ["embedded: rotation bias not assessable"], 6, 1.0, 2.0, s) == "continue"
    open_row = {"decision": "continue"}
    assert decide([row, open_row], [], 12, 1.0, 4.0, s) == "max_reps"  # 12 + 3 > 12
    assert decide([row, open_row], [], 6, 3.0, 8.0, s) == "max_minutes"  # 8 + 3 > 10
    assert decide([row, {"decision": "futile"}], [], 6, 1.0, 2.0, s) == "futile"
    assert decide([row, open_row], [], 6, 1.0, 2.0, s) == "continue"


def test_a_noisy_arm_is_futile_and_its_rows_say_so(monkeypatch):
    # a 40% wiggle on parallel-4, every other rep: ±5% cannot be reached within 12 reps a run
    monkeypatch.setitem(synthetic.NOISE, 4, (0, 40))
    cells = cells_of(12)
    trail = trail_of(cells, stopping={"max_reps": 12})
    last = trail[trail["look"] == trail["look"].max()]
    assert set(last["look_decision"]) <= {"futile", "max_reps"}
    p4 = last[last["arm"] == 4]
    assert (p4["decision"] != "precise").any()
    assert (last.loc[last["arm"] == 2, "decision"] == "precise").all()


def test_the_progress_line():
    cells = cells_of(6)
    s = auto_settings()
    rows, decision, reasons = checks_stopping.look_rows(headline_ratios(cells), cells, 2, s,
                                                        CHECKS)
    line = checks_stopping.progress_line(rows, decision, 2, s, 2)
    assert line.startswith("look 2: 6 reps/run · parallel-2 ")
    assert "unbounded (target 5%)" in line and "parallel-4" in line
    assert decision == "continue" and re.search(r"≥ \d+ more reps, ≥ \d+(\.\d)? (s|min|h)$", line)
    rows9, decision9, _ = checks_stopping.look_rows(headline_ratios(cells_of(9)), cells_of(9), 3,
                                                    s, CHECKS)
    line9 = checks_stopping.progress_line(rows9, decision9, 3, s, 2)
    assert decision9 == "precise" and "parallel-2 ±" in line9 and "✓" in line9
    assert "stop: precise after" in line9


# --- what the analysis publishes and the report says -----------------------------------------


def test_the_summary_quotes_the_sequential_intervals():
    cells = cells_of(9)
    ratios = headline_ratios(cells)
    boot = summarise(ratios, 200, 0.95, 1)
    seq = sequential_summary(boot, ratios, 0.95, BOOTSTRAPPED)
    assert list(seq.columns) == list(boot.columns)
    p4 = seq[seq["arm"] == 4].iloc[0]
    grp = ratios[ratios["arm"] == 4]
    runs = [grp.loc[grp["run"] == r, "speedup"] for r in ("run1", "run2")]
    assert (p4["speedup"], p4["speedup_lo"], p4["speedup_hi"]) == sequential.interval(runs, 0.05)
    assert p4["efficiency_lo"] == pytest.approx(p4["speedup_lo"] / 4)
    assert p4["speedup"] == boot[boot["arm"] == 4].iloc[0]["speedup"]  # the same median
    # an unbounded side (6 reps a run) is no bound: null, not infinity
    few = headline_ratios(cells_of(6))
    open_ = sequential_summary(summarise(few, 200, 0.95, 1), few, 0.95, BOOTSTRAPPED)
    assert open_.loc[open_["arm"] == 4, "speedup_lo"].isna().all()


def _texts(blocks) -> str:
    return "\n".join(b.text if isinstance(b, Paragraph) else b.title if isinstance(b, Table)
                     else getattr(b, "text", "") for b in blocks)


def test_the_stopping_section_says_why_and_what_a_fixed_run_would_have_cost():
    s = auto_settings()
    trail = trail_of(cells_of(9))
    text = _texts(stopping_blocks(trail, s, {}, 2))
    assert "measured 9 reps a run in 3 looks" in text and "stopped precise" in text
    assert "A fixed run of max_reps (30 reps a run) would have taken about" in text
    assert "Not precise" not in text
    assert stopping_blocks(None, None, {}, 2) == []
    # a futile stop: said first, as a warning, with what was missed and how far
    futile = trail.copy()
    futile["look_decision"] = "futile"
    futile.loc[(futile["look"] == 3) & (futile["arm"] == 2), "decision"] = "futile"
    futile.loc[(futile["look"] == 3) & (futile["arm"] == 2), "reps_needed"] = 80
    blocks = stopping_blocks(futile, s, {"embedded": [2]}, 2)
    assert blocks[1].kind == "warning" and "stopped futile" in blocks[1].text
    text = _texts(blocks)
    assert "no headline here is claimed to meet the target" in text
    assert "embedded parallel-2 speedup" in text
    assert "at least 80 reps a run at this spread, read in its favour" in text
    assert "embedded parallel-2: its rounds split into two states" in text
    assert "more reps narrow such an interval only slowly" in text
    # a budget stop where the projection, read in its favour, asked for no more than were
    # measured: the report does not promise that many would have done
    spent = futile.copy()
    spent["look_decision"] = "max_reps"
    spent.loc[(spent["look"] == 3) & (spent["arm"] == 2), "decision"] = "max_reps"
    spent.loc[(spent["look"] == 3) & (spent["arm"] == 2), "reps_needed"] = 9
    text = _texts(stopping_blocks(spent, s, {}, 2))
    assert "9 reps a run fell short, though this spread read in its favour would reach it at 9" \
        in text
    assert "at least 9" not in text


def test_nothing_here_changes_with_numpy_seeding():
    # the looks draw nothing unseeded: the trail is the same whatever the global state
    np.random.seed(1)
    a = trail_of(cells_of(9)).to_csv(index=False)
    np.random.seed(2)
    assert trail_of(cells_of(9)).to_csv(index=False) == a
