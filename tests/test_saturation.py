"""Client saturation: every cell's client processes, their busy share and event-loop lag, on
synthetic runs with a known answer."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic as syn

from slotbench.checks import run_checks, saturation, trap_modules
from slotbench.checks.decision import headline_decision
from slotbench.workflow import config as sbconfig

QUIET = {"client_processes": 2, "client_busy": 0.12, "client_busy_process": 0,
         "client_lag_p95_s": 0.0009, "client_lag_process": 1}


def cells_with_client(requests, **per_arm):
    """The synthetic cells with a quiet client, and per arm (``arm4={...}``) other values."""
    cells = syn.make_cells(requests).assign(**QUIET)
    for key, values in per_arm.items():
        at = cells["arm"] == int(key.removeprefix("arm"))
        for column, value in values.items():
            cells.loc[at, column] = value
    return cells


def verdict_of(cells, requests, cfg=None):
    settings = sbconfig.check_settings(cfg or syn.config())
    found, details = saturation.check(syn.tables(requests, cells=cells, cfg=cfg), settings)
    (verdict,) = found
    return verdict.record(), details


@pytest.fixture(scope="module")
def requests():
    return syn.make_requests(reps=3)


def test_a_busy_client_process_excludes_its_arm_and_is_named(requests):
    cells = cells_with_client(requests, arm4={"client_busy": 0.95, "client_busy_process": 2,
                                              "client_processes": 3})
    v, details = verdict_of(cells, requests)
    assert v["assessable"] and v["fired"] and v["verdict"] == "yes"
    assert v["effect"] == "exclude" and v["arms"] == [4]
    assert v["cells"] == [f"embedded/run1/rep{r}/arm4" for r in (1, 2, 3)]
    assert v["sentence"] == (
        "Client saturated: 95% of a core in process 2 at parallel-4 (3 of 3 cells), so that arm "
        "gets no headline; give the client more processes (client.processes) or cores "
        "(client.cpus)."
    )
    assert v["threshold"] == 0.85 and v["config_key"] == "checks.client_busy_share"
    four = v["evidence"]["arms"]["4"]
    assert (four["cells"], four["cells_saturated"], four["busy"], four["busy_process"],
            four["processes"]) == (3, 3, 0.95, 2, 3)
    assert v["evidence"]["arms"]["2"]["cells_saturated"] == 0
    assert "process 2" in v["evidence"]["why"]["4"]
    table = details["client_saturation"]
    assert list(table.columns) == saturation.ARM_COLUMNS and len(table) == 3
    assert table.set_index("arm")["saturated"].to_dict() == {1: False, 2: False, 4: True}


def test_a_saturated_serial_arm_takes_every_arms_headline(requests):
    """Every ratio is taken against serial-1 of the same rep: a client that could not keep up
    there moves every arm's speedup, so no arm keeps its headline."""
    cells = cells_with_client(requests, arm1={"client_busy": 0.99, "client_busy_process": 0})
    v, _ = verdict_of(cells, requests)
    assert v["fired"] and v["arms"] == [1, 2, 4]
    assert "99% of a core in process 0 at serial-1" in v["sentence"]
    assert "every ratio is taken against the serial arm, so no arm gets a headline" in v["sentence"]
    assert v["cells"] == [f"embedded/run1/rep{r}/arm1" for r in (1, 2, 3)]


def test_a_late_event_loop_excludes_its_arm(requests):
    cells = cells_with_client(requests, arm2={"client_lag_p95_s": 0.05, "client_lag_process": 1})
    cells.loc[(cells["arm"] == 2) & (cells["rep"] == 2), "client_lag_p95_s"] = 0.001
    v, _ = verdict_of(cells, requests)
    assert v["fired"] and v["effect"] == "exclude" and v["arms"] == [2]
    assert "loop lag p95 50.0 ms in process 1 at parallel-2 (2 of 3 cells)" in v["sentence"]
    assert v["cells"] == ["embedded/run1/rep1/arm2", "embedded/run1/rep3/arm2"]


def test_both_bounds_and_several_arms_are_named_together(requests):
    cells = cells_with_client(
        requests, arm2={"client_busy": 0.9, "client_busy_process": 0},
        arm4={"client_busy": 0.97, "client_busy_process": 1, "client_lag_p95_s": 0.02,
              "client_lag_process": 1},
    )
    v, _ = verdict_of(cells, requests)
    assert v["arms"] == [2, 4]
    assert v["sentence"].startswith(
        "Client saturated: 90% of a core in process 0 at parallel-2 (3 of 3 cells); 97% of a "
        "core in process 1 and loop lag p95 20.0 ms in process 1 at parallel-4 (3 of 3 cells), "
        "so those arms get no headline;"
    )


def test_a_client_that_kept_up_says_how_far_from_the_bounds(requests):
    v, _ = verdict_of(cells_with_client(requests), requests)
    assert v["assessable"] and not v["fired"] and v["effect"] == "none" and v["arms"] == []
    assert v["sentence"] == ("The client kept up: at most 12% of a core busy (process 0), loop "
                             "lag p95 at most 0.9 ms (process 1).")
    assert v["summary"].startswith("client kept up: ")


def test_the_bounds_come_from_the_config_and_are_strict(requests):
    at_bound = cells_with_client(requests, arm4={"client_busy": 0.85, "client_lag_p95_s": 0.01})
    assert not verdict_of(at_bound, requests)[0]["fired"]
    strict = syn.config(checks__client_busy_share=0.10, checks__client_loop_lag_s=0.0005)
    v, _ = verdict_of(cells_with_client(requests), requests, strict)
    assert v["fired"] and v["arms"] == [1, 2, 4]
    assert v["evidence"]["thresholds"] == {"checks.client_busy_share": 0.10,
                                           "checks.client_loop_lag_s": 0.0005}


@pytest.mark.parametrize("how", ["no columns", "all null"])
def test_raw_files_without_the_client_record_are_not_assessable(requests, how):
    cells = syn.make_cells(requests)
    if how == "all null":
        cells = cells.assign(**{c: np.nan for c in saturation.CLIENT_COLUMNS})
    v, details = verdict_of(cells, requests)
    assert not v["assessable"] and not v["fired"] and v["verdict"] == "not assessable"
    assert v["effect"] == "none" and v["arms"] == []
    assert "predate the per-process client record" in v["sentence"]
    assert details["client_saturation"]["cells_recorded"].eq(0).all()


def test_cells_without_a_record_are_counted_as_not_assessed(requests):
    cells = cells_with_client(requests)
    cells.loc[cells["rep"] == 1, saturation.CLIENT_COLUMNS] = np.nan  # rep 1 is an older file
    v, _ = verdict_of(cells, requests)
    assert v["assessable"] and not v["fired"]
    assert v["sentence"].endswith(
        "; 3 of 9 cells predate the per-process client record (not assessed).")


@pytest.mark.slow  # a synthetic run's report
def test_the_headline_decision_excludes_the_arm_and_the_report_says_so(requests):
    cells = cells_with_client(requests, arm4={"client_busy": 0.95, "client_busy_process": 2})
    cfg = syn.config()
    verdicts, details = run_checks(syn.tables(requests, cells=cells, cfg=cfg),
                                   sbconfig.check_settings(cfg))
    assert "client_saturation" in details
    decision = headline_decision([v.record() for v in verdicts])["embedded"]
    assert decision["status"] == "allowed" and list(decision["excluded_arms"]) == ["4"]
    assert "client that could not keep up" in decision["excluded_arms"]["4"]
    assert any(w["trap"] == "client_saturation" and "process 2" in w["text"]
               for w in decision["warnings"])

    md, _, _, _ = syn.rendered(requests, cells=cells)
    table = md.split("**Per-arm results**")[1].split("_Ratios")[0]
    assert "| parallel-4 (not a headline) |" in table and "| parallel-2 |" in table
    assert "Two-way concurrency" in md and "Four-way concurrency" not in md
    row = syn.trap_row(md, saturation.TITLE)
    assert row[1] == "yes" and row[2] == "85% (checks.client_busy_share)"
    assert "95% of a core in process 2 at parallel-4" in row[3]


def test_the_trap_is_found_by_looking():
    assert saturation in trap_modules()
    assert saturation.TRAP == "client_saturation" and saturation.TABLES == ("client_saturation",)


# --- the fingerprint's CPU frequency governor (a powersave governor slows the client too) -----


def test_the_fingerprint_records_each_cpus_governor_and_flags_powersave(tmp_path, monkeypatch):
    import os

    from slotbench.measure.fingerprint import cpu_governor

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 5}, raising=False)
    for cpu, governor in ((0, "performance"), (1, "performance"), (2, "powersave"),
                          (3, "powersave"), (4, "powersave"), (5, "performance")):
        (tmp_path / f"cpu{cpu}/cpufreq").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}/cpufreq/scaling_governor").write_text(governor + "\n")
    assert cpu_governor(str(tmp_path)) == {
        "governor": "performance, powersave",
        "by_governor": {"performance": "0-1,5", "powersave": "2-3"},  # cpu4: not ours
        "powersave": True,
    }
    assert cpu_governor(str(tmp_path / "absent")) == {
        "governor": "not exposed", "by_governor": {"not exposed": "0-3,5"}, "powersave": None,
    }
