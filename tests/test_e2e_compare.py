"""compare on real archives of the real embedded server: two smoke runs of one config show no
detectable change in the within-rep ratios (their absolute rates, if the machine drifted between
the runs, are "confounded with time"); a one-slot llama-server is found slower at 4-way, with
the slots named.

The reps are cheap, where the statistics still allow a claim. With the exact rank-sum test and
Holm over a target's 16 rows, 5 reps against 5 can never claim a change (p >= 0.0079, above
0.05 / 16), so compare says "too few reps to decide" there. The first run has 8 reps, the
others 6: 8 against 6 can reach p = 0.00067, and 6 against 6 with one rep out of order (p =
0.0043, measured at 4-way on 2 cores) could already hide the one-slot server's change, so the
side both comparisons share keeps 8. Each rep sends a short prompt (about 20 tokens, not the
smoke config's 160) for 16 tokens with ignore_eos, so every request is the same length and a
rep is mostly generation: a one-slot server still queues three of every four requests at
4-way, and the change to detect stays large."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from e2e_helpers import SMOKE, copy_repo, results_dir, snakemake

pytestmark = pytest.mark.e2e

CHEAP = {"num_predict": 16,
         "prompt": {"template": "Request {nonce}. Tell the story of a harbour town that lost its "
                                "fishing fleet and found new work."}}


def target(parallel: int) -> dict:
    return {"targets": [{"name": "embedded", "backend": "llamacpp", "managed": True,
                         "ignore_eos": True, "server": {"parallel": parallel, "threads": 2}}]}


def archived(work, cache, reps: int, parallel: int):
    """Run the smoke config with cheap reps to the end and archive it: the archive's path."""
    files = []
    for i, extra in enumerate((CHEAP, {"reps": reps}, target(parallel))):
        (work / f"override{i}.yaml").write_text(yaml.safe_dump(extra))
        files.append(f"override{i}.yaml")
    proc = snakemake(work, "archive", *SMOKE, *files, cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (tarball,) = (results_dir(work) / "archive").glob("*.tar.gz")
    return tarball


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    cache = tmp_path_factory.mktemp("compare-cache")
    a = archived(copy_repo(tmp_path_factory.mktemp("a")), cache, reps=8, parallel=4)
    again = archived(copy_repo(tmp_path_factory.mktemp("a-again")), cache, reps=6, parallel=4)
    one_slot = archived(copy_repo(tmp_path_factory.mktemp("one-slot")), cache, reps=6,
                        parallel=1)
    return a, again, one_slot


def compare(tmp_path, a, b):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "slotbench", "compare", str(a), str(b),
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"PYTHONPATH": str(a.parents[3] / "scripts")})  # a's checkout
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "compare.json").read_text())
    return proc.stdout, result["targets"]["embedded"], (out / "compare.md").read_text()


def test_two_runs_of_one_config_show_no_detectable_change(archives, tmp_path):
    a, again, _ = archives
    out, rec, md = compare(tmp_path, a, again)
    assert rec["refusal"] is None and rec["guarded"] == [], rec["refusal"]
    rows = rec["rows"]
    assert len(rows) == 16
    assert all(len(r["cells_a"]) == 8 and len(r["cells_b"]) == 6 for r in rows)
    # the within-rep ratios always compare, and find nothing. The absolute rates compare only
    # when neither side's host check saw other processes take the CPU, and the machine itself
    # ran at one speed for both: a serial rate that moved beyond both sides' spread over their
    # reps makes them all "confounded with time" (a shared 2-core machine drifts between runs),
    # and so is any one whose change the serial arm's own move could give (a CI run once found
    # 4-way 9% slower in the second run, serial −4% with an interval reaching −15%). Never
    # "B faster" or "B slower": nothing changed but the time
    drift = rec["drift"]
    assert drift["assessable"] and drift["may_explain"] == [], drift
    absolute = ("not comparable (busy host)" if rec["busy"]
                else "confounded with time" if drift["confounded"] else "no detectable change")

    def expected(row):
        if row["metric"] not in ("agg_tps", "user_tps"):
            return "no detectable change"
        return "confounded with time" if row.get("within_serial") else absolute

    assert all(r["verdict"] == expected(r) for r in rows), [drift] + [
        (r["arm"], r["metric"], r["verdict"], r["p"], r["diff_lo"], r["diff_hi"]) for r in rows]
    assert all(r["verdict"] not in ("B faster", "B slower") for r in rows)
    # every absolute rate carries when B was measured, after A, and the serial arm's move
    for r in rows:
        if r["metric"] in ("agg_tps", "user_tps"):
            assert r["time_gap_s"] > 0 and r["serial_move_lo"] <= r["serial_move_hi"], r
        else:
            assert "time_gap_s" not in r, r
    assert "server.slots" not in rec["differences"]
    assert ("embedded: 16 no detectable change" in out or rec["busy"] or drift["confounded"]
            or any(r.get("within_serial") for r in rows))
    assert "| parallel-4 | speedup |" in md


def test_a_one_slot_server_is_slower_at_four_way_and_its_slots_are_named(archives, tmp_path):
    a, _, one_slot = archives
    out, rec, md = compare(tmp_path, a, one_slot)
    assert rec["refusal"] is None, rec["refusal"]
    assert [str(v) for v in rec["differences"]["server.slots"]] == ["4", "1"]
    # the one-slot server's 4-way throughput gain and its batching are both lower, every
    # interval below zero, and at least one of the two is detected past the corrected threshold
    # (one A rep slowed by a shared machine can hold one rank test above it: 8 against 6 reps)
    gains = {r["metric"]: r for r in rec["rows"] if r["arm"] == 4
             and r["metric"] in ("speedup", "gen_gain")}
    for r in gains.values():
        assert r["diff_hi"] < 0 and r["b"] < r["a"] and r["verdict"] != "B faster", r
    assert "B slower" in {r["verdict"] for r in gains.values()}, gains
    row = gains["speedup"]
    # every number is traced to the cells of both sides, and their raw files by hash
    assert len(row["cells_a"]) == 8 and len(row["cells_b"]) == 6
    assert row["cells_b"][0].startswith("embedded/run1/rep") and len(row["raw_b"]) == 6
    assert "server.slots: A 4; B 1" in md


def test_three_reps_a_side_are_too_few_to_decide_never_no_detectable_change(archives):
    """The 4-slot and the one-slot archives cut to their first 3 reps, as two smoke runs would
    be: the exact rank-sum test's smallest p at 3 against 3 is 0.1, so however far apart the
    4-way speedups are, the verdict is "too few reps to decide", with the interval and the reps
    that would decide; never "no detectable change"."""
    from slotbench.analysis import compare as sbcompare
    from slotbench.core import stats

    a, one_slot = sbcompare.load_side(archives[0]), sbcompare.load_side(archives[2])
    for side in (a, one_slot):
        side.ratios = side.ratios[side.ratios["rep"] <= 3]
    rec = sbcompare.compare(a, one_slot)["targets"]["embedded"]
    assert rec["refusal"] is None, rec["refusal"]
    row = next(r for r in rec["rows"] if r["arm"] == 4 and r["metric"] == "speedup")
    assert len(row["cells_a"]) == len(row["cells_b"]) == 3
    assert row["verdict"] == sbcompare.TOO_FEW, row
    assert row["reps_to_decide"] == stats.reps_to_decide(len(rec["rows"]), 0.05) == 6
    assert row["diff_lo"] <= row["diff"] <= row["diff_hi"] and row["b"] < row["a"], row
    assert sbcompare.NO_CHANGE not in {r["verdict"] for r in rec["rows"]}, rec["rows"]


def test_a_one_slot_server_is_caught_serialising_by_its_own_metrics(archives):
    """The one-slot llama-server at arms 1, 2, 4: its /metrics say it decoded one sequence per
    step while the client held 2 and 4 in flight, and the check built on them fires, naming
    the arm; the four-slot server of the same config batched."""
    a, _, one_slot = archives
    (slotted,) = json.loads((one_slot.parents[1] / "checks/batching.json").read_text())
    assert slotted["fired"] and slotted["assessable"], slotted
    assert "decoded 1.00 sequence per step at parallel-4" in slotted["sentence"], slotted
    assert "serialised what the client sent in parallel" in slotted["sentence"]
    (four,) = json.loads((a.parents[1] / "checks/batching.json").read_text())
    assert four["assessable"] and not four["fired"], four
