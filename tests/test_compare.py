"""compare: B against A per target, arm and metric, with verdicts that refuse when they must."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from e2e_helpers import results_dir
from slotbench.analysis import compare
from slotbench.core import experiments
from slotbench.core.fmt import fmt_signed_pct, missing
from slotbench.report import compare as compare_doc

FP = {"client_host.cpu_model": "AMD EPYC", "client_host.cores": 2, "model.sha256": "abc",
      "config.measurement.num_predict": 32, "prompt_tokens": 120, "server.slots": 4}


def ratios(speedup4=1.5, reps=8, noise=0.03, seed=0, target="t", rate=1.0):
    rng = np.random.default_rng(seed)
    rows = []
    for rep in range(reps):
        for arm, speedup, user in ((1, 1.0, 50.0), (4, speedup4, 50.0 * speedup4 / 4)):
            f = rng.lognormal(0, noise, 2)
            rows.append({"target": target, "run": "run1", "rep": rep, "arm": arm,
                         "speedup": speedup * (f[0] if arm > 1 else 1), "user_ratio": f[1] / 4,
                         "ttft_ratio": 3.0 * f[0], "efficiency": speedup * f[0] / arm,
                         "gen_gain": speedup * f[1], "agg_tps": rate * 40 * speedup * f[0],
                         "user_tps": rate * user * f[1],
                         "raw_file": f"results/raw/{target}/run1/rep{rep}.json",
                         "raw_sha256": f"h{seed}-{rep}"})
    return pd.DataFrame(rows)


def side(name, frame, status="allowed", **fp):
    return compare.Side(name, frame, {"t": {"status": status}}, {"t": FP | fp})


def verdicts(result, arm=4):
    return {r["metric"]: r["verdict"] for r in result["targets"]["t"]["rows"] if r["arm"] == arm}


def test_two_results_of_one_engine_show_no_detectable_change_anywhere():
    result = compare.compare(side("A", ratios(seed=1)), side("B", ratios(seed=2)), n_boot=500)
    rows = result["targets"]["t"]["rows"]
    assert rows and {r["verdict"] for r in rows} == {compare.NO_CHANGE}
    assert result["targets"]["t"]["refusal"] is None
    assert result["targets"]["t"]["differences"] == {}


def test_a_slower_engine_is_called_slower_with_an_interval_that_excludes_zero_and_its_slots():
    b = side("B", ratios(speedup4=1.0, seed=2), **{"server.slots": 1})
    result = compare.compare(side("A", ratios(seed=1)), b, n_boot=500)
    rec = result["targets"]["t"]
    row = next(r for r in rec["rows"] if r["arm"] == 4 and r["metric"] == "speedup")
    assert row["verdict"] == compare.SLOWER and row["diff_hi"] < 0 < row["a"] - row["b"]
    assert row["ratio"] == pytest.approx(1 / 1.5, rel=0.05)
    assert verdicts(result)["ttft_ratio"] == compare.NO_CHANGE  # same TTFT ratio on both sides
    assert rec["differences"] == {"server.slots": [4, 1]} and rec["refusal"] is None
    assert row["cells_a"][0] == "t/run1/rep0/arm4" and len(row["raw_b"]) == 8
    faster = compare.compare(b, side("A", ratios(seed=1)), n_boot=500)
    assert verdicts(faster)["speedup"] == compare.FASTER


@pytest.mark.parametrize("why, a, b", [
    ("A's headline was refused", {"status": "refused"}, {}),
    ("the fingerprints differ in config.measurement.num_predict",
     {}, {"config.measurement.num_predict": 64}),
    ("the fingerprints differ in model.sha256", {}, {"model.sha256": "def"}),
])
def test_a_verdict_refuses_when_a_headline_was_refused_or_the_measurement_differs(why, a, b):
    status = a.pop("status", "allowed")
    result = compare.compare(side("A", ratios(seed=1), status, **a),
                             side("B", ratios(speedup4=1.0, seed=2), **b), n_boot=200)
    rec = result["targets"]["t"]
    assert why in rec["refusal"]
    assert {r["verdict"] for r in rec["rows"]} == {None}


OTHER_CPU = {"client_host.cpu_model": "Apple M2", "client_host.cores": 8}


def test_a_client_cpu_refuses_only_where_the_server_ran_on_the_client_host():
    """The client host's CPU defines the measurement of a server that ran on it; with the
    server on another machine it is the laptop's, named, not refused (the server's is unknown)."""
    here = compare.compare(side("A", ratios(seed=1)), side("B", ratios(seed=2), **OTHER_CPU),
                           n_boot=200)["targets"]["t"]
    assert here["guarded"] == ["client_host.cpu_model", "client_host.cores"]
    assert "the fingerprints differ in client_host.cpu_model" in here["refusal"]
    remote = {"server_host.same_as_client": "False"}
    away = compare.compare(side("A", ratios(seed=1), **remote),
                           side("B", ratios(seed=2), **remote, **OTHER_CPU),
                           n_boot=200)["targets"]["t"]
    assert away["refusal"] is None and away["guarded"] == []
    assert away["differences"] == {"client_host.cores": [2, 8],
                                   "client_host.cpu_model": ["AMD EPYC", "Apple M2"]}
    moved = compare.compare(side("A", ratios(seed=1), **{"server_host.same_as_client": "True"}),
                            side("B", ratios(seed=2), **remote), n_boot=200)["targets"]["t"]
    assert moved["guarded"] == ["server_host.same_as_client"]


def test_old_fingerprint_names_are_read_as_todays_and_so_are_declared_ones():
    old = {k.replace("client_host.", "host."): v for k, v in FP.items()}
    a = compare.Side("A", ratios(seed=1), {"t": {"status": "allowed"}}, {"t": old})
    b = compare.Side("B", ratios(seed=2), {"t": {"status": "allowed"}},
                     {"t": old | {"host.cpu_model": "Apple M2"}})
    rec = compare.compare(a, b, n_boot=200)["targets"]["t"]
    assert rec["guarded"] == ["client_host.cpu_model"]
    declared = compare.compare(a, b, n_boot=200, declared=("host.cpu_model",))["targets"]["t"]
    assert declared["refusal"] is None
    assert declared["differences"] == {"client_host.cpu_model": ["AMD EPYC", "Apple M2"]}


def test_a_fingerprint_read_from_disk_says_where_its_server_ran_old_or_new(tmp_path):
    from slotbench.measure.fingerprint import current_fields

    old = {"host": {"cpu_model": "AMD EPYC"}, "config": {"target": {
        "managed": False, "url": "http://gpu-box.example:8080"}}}
    assert current_fields(old)["client_host.cpu_model"] == "AMD EPYC"
    assert current_fields(old)["server_host.same_as_client"] == "False"
    loopback = old | {"config": {"target": {"managed": False, "url": "http://127.0.0.2:8080"}}}
    assert current_fields(loopback)["server_host.same_as_client"] == "True"
    new = {"client_host": {"cpu_model": "x"}, "server_host": {"same_as_client": False}}
    assert current_fields(new)["server_host.same_as_client"] == "False"


def test_a_declared_difference_is_named_and_does_not_refuse():
    result = compare.compare(side("A", ratios(seed=1)),
                             side("B", ratios(seed=2), **{"model.sha256": "q8"}), n_boot=200,
                             declared=("model.sha256",))
    rec = result["targets"]["t"]
    assert rec["refusal"] is None and rec["differences"] == {"model.sha256": ["abc", "q8"]}


def test_the_written_comparison_names_the_verdicts_and_traces_the_cells(tmp_path):
    sides = (side("A", ratios(seed=1)), side("B", ratios(speedup4=1.0, seed=2), **{"server.slots": 1}))
    result = compare.compare(*sides, n_boot=200)
    md, html, js, png = compare_doc.write(result, sides, tmp_path)
    text = md.read_text()
    assert "| parallel-4 | speedup |" in text and "B slower" in text and "server.slots: A 4; B 1" in text
    assert "<table" in html.read_text() and png.stat().st_size > 5000
    record = json.loads(js.read_text())
    assert record["targets"]["t"]["rows"][0]["cells_a"]


@pytest.mark.slow  # a simulation: about 5 s
def test_too_few_reps_can_never_claim_a_change_and_many_metrics_do_not_make_one_likely():
    """3 reps against 3: the exact rank-sum test's smallest p is 0.1, so even a complete
    separation cannot be claimed: "too few reps to decide", never "no detectable change"; 6
    against 6 can detect it, after Holm over the rows."""
    from slotbench.core import stats

    assert stats.rank_sum_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert stats.rank_sum_min_p(3, 3) == pytest.approx(0.1)
    assert stats.rank_sum_p(range(6), range(6, 12)) == pytest.approx(2 / 924)
    assert stats.rank_sum_min_p(6, 6) == stats.rank_sum_p(range(6), range(6, 12))
    # 5 against 5 reaches 0.0079, below 0.05 but not below 0.05 / 16: Holm over 16 rows needs 6
    assert stats.reps_to_decide(16, 0.05) == 6 and stats.reps_to_decide(1, 0.05) == 4
    few = compare.compare(side("A", ratios(reps=3, seed=1)),
                          side("B", ratios(speedup4=1.0, reps=3, seed=2)), n_boot=200)
    rows = few["targets"]["t"]["rows"]
    assert {r["verdict"] for r in rows} == {compare.TOO_FEW}
    assert {r["reps_to_decide"] for r in rows} == {stats.reps_to_decide(len(rows), 0.05)}
    # the interval is still given: a 1.5x against 1.0x speedup at 3 reps excludes 0
    speedup = next(r for r in rows if r["arm"] == 4 and r["metric"] == "speedup")
    assert speedup["diff_hi"] < 0
    md = "\n".join(str(b) for b in compare_doc.document(few))
    assert "too few reps to decide (about 6 reps a side would)" in md
    five = compare.compare(side("A", ratios(reps=5, seed=1)),
                           side("B", ratios(speedup4=1.0, reps=5, seed=2)), n_boot=200)
    assert verdicts(five)["speedup"] == compare.TOO_FEW
    enough = compare.compare(side("A", ratios(reps=6, seed=1)),
                             side("B", ratios(speedup4=1.0, reps=6, seed=2)), n_boot=200)
    assert verdicts(enough)["speedup"] == compare.SLOWER
    # the same engine, compared 40 times at 8 reps a side: Holm keeps false claims rare
    false_claims = sum(
        any(r["verdict"] != compare.NO_CHANGE for r in compare.compare(
            side("A", ratios(seed=2 * k)), side("B", ratios(seed=2 * k + 1)),
            n_boot=200)["targets"]["t"]["rows"])
        for k in range(40))
    assert false_claims <= 4, false_claims


def test_absolute_rates_of_a_busy_side_are_not_compared_but_its_ratios_are():
    busy = side("B", ratios(speedup4=1.0, seed=2))
    busy.busy["t"] = "3 reps of 8 shared the machine"
    result = compare.compare(side("A", ratios(seed=1)), busy, n_boot=300)
    got = {(r["arm"], r["metric"]): r["verdict"] for r in result["targets"]["t"]["rows"]}
    assert got[(4, "agg_tps")] == got[(1, "user_tps")] == compare.BUSY
    assert got[(4, "speedup")] == compare.SLOWER  # a within-rep ratio still compares
    assert result["targets"]["t"]["busy"] == {"B": "3 reps of 8 shared the machine"}
    md = "\n".join(str(b) for b in compare_doc.document(result))
    assert "B was measured on a busy machine (3 reps of 8 shared the machine)" in md


def _results_dir(root, frame, sha, experiment=None):
    """A finished result as compare reads it, in the checkout ``root``: in the experiment's
    folder results/<experiment>/, or (None) directly in results/ as before experiments had
    their own folders. Returns the result's folder."""
    folder = root / "results" if experiment is None else results_dir(root, experiment)
    (folder / "analysis").mkdir(parents=True)
    (folder / "checks").mkdir(parents=True)
    (folder / "fingerprint/t").mkdir(parents=True)
    frame.to_parquet(folder / "analysis/ratios.parquet")
    (folder / "checks/headline.json").write_text(json.dumps({"t": {"status": "allowed"}}))
    (folder / "fingerprint/t/run1.json").write_text(json.dumps(
        {"target": "t", "run": "run1", "model": {"sha256": sha}}))
    return folder


@pytest.mark.parametrize("declare, refused", [([], True), (["model.sha256"], False)])
def test_the_compare_rule_passes_its_declared_fields_on(tmp_path, declare, refused):
    """snakemake compare --config compare_with=A compare_declare=model.sha256: the rule script
    declares the field, so Q4 against Q8 compares instead of refusing."""
    import runpy
    from pathlib import Path
    from types import SimpleNamespace

    a = _results_dir(tmp_path, ratios(seed=1), "q4", "q4")
    b = _results_dir(tmp_path, ratios(seed=2), "q8", "q8")
    out = b / "compare"
    sm = SimpleNamespace(
        input=SimpleNamespace(ratios=str(b / "analysis/ratios.parquet")),
        output=SimpleNamespace(md=str(out / "compare.md")),
        params=SimpleNamespace(compare_with=str(a), declare=declare, n_boot=200, ci=0.95,
                               seed=0),
        log=[str(tmp_path / "compare.log")])
    script = Path(__file__).resolve().parents[1] / "scripts/compare.py"
    runpy.run_path(str(script), init_globals={"snakemake": sm})
    rec = json.loads((out / "compare.json").read_text())["targets"]["t"]
    assert (rec["refusal"] is not None) == refused
    assert "model.sha256" in (rec["guarded"] if refused else rec["differences"])


def test_the_command_and_the_rule_take_one_set_of_defaults():
    """The command's resamples, level and seed are what the compare rule passes on a default
    config (analysis.bootstrap, analysis.ci, seed): the same inputs give the same intervals."""
    from slotbench.workflow.config import resolve

    cfg = resolve({})
    assert compare.defaults() == {"n_boot": cfg["analysis"]["bootstrap"],
                                  "ci": cfg["analysis"]["ci"], "seed": cfg["seed"]}
    a, b = side("A", ratios(seed=1)), side("B", ratios(seed=2))
    assert compare.compare(a, b) == compare.compare(a, b, **compare.defaults())


def test_absolute_rates_measured_at_another_speed_are_confounded_with_time_but_ratios_compare():
    """The same engine, B measured when the machine ran 41% slower (every rate, serial too):
    the absolute rates say "confounded with time" and name the move; the within-rep ratios,
    which did not move, find no change. A fingerprint difference that could change the serial
    rate (the model) is named as one possible explanation of the move, beside time, and the
    rates stay confounded: nothing here tells the two apart. One of slots alone is not named."""
    a = side("A", ratios(seed=1))
    result = compare.compare(a, side("B", ratios(seed=2, rate=0.59)), n_boot=300)
    rec = result["targets"]["t"]
    got = {(r["arm"], r["metric"]): r["verdict"] for r in rec["rows"]}
    assert {v for (_, m), v in got.items() if m in compare.ABSOLUTE} == {compare.CONFOUNDED}
    assert {v for (_, m), v in got.items() if m not in compare.ABSOLUTE} == {compare.NO_CHANGE}
    assert rec["drift"]["confounded"] and rec["drift"]["move"] == pytest.approx(-0.41, abs=0.03)
    assert rec["drift"]["text"].startswith("serial-1 −4") and "no host contention" in rec["drift"]["text"]
    md = "\n".join(str(b) for b in compare_doc.document(result))
    assert "confounded with time: serial-1 −4" in md
    assert "no fingerprint difference" not in md and "may explain the move too" not in md
    slots = compare.compare(a, side("B", ratios(seed=2, rate=0.59), **{"server.slots": 1}), n_boot=300)
    assert slots["targets"]["t"]["drift"]["confounded"]
    assert slots["targets"]["t"]["drift"]["may_explain"] == []
    model = compare.compare(a, side("B", ratios(seed=2, rate=0.59), **{"model.sha256": "q8"}),
                            n_boot=300, declared=("model.sha256",))
    drift = model["targets"]["t"]["drift"]
    assert drift["confounded"] and drift["may_explain"] == ["model.sha256"]
    assert verdicts(model)["agg_tps"] == compare.CONFOUNDED
    assert verdicts(model)["speedup"] == compare.NO_CHANGE
    md = "\n".join(str(b) for b in compare_doc.document(model))
    assert ("the difference in model.sha256 may explain the move too, and this comparison "
            "cannot tell which") in md
    # the same engine at the same speed: within the spread, nothing confounded
    same = compare.compare(a, side("B", ratios(seed=2)), n_boot=300)["targets"]["t"]["drift"]
    assert same["assessable"] and not same["beyond_spread"] and not same["confounded"]
    # a busy side keeps its own wording; too few serial cells cannot be assessed
    busy = side("B", ratios(seed=2, rate=0.59))
    busy.busy["t"] = "2 reps of 8 shared the machine"
    assert verdicts(compare.compare(a, busy, n_boot=200))["agg_tps"] == compare.BUSY
    two = compare.compare(side("A", ratios(reps=2, seed=1)), side("B", ratios(reps=2, seed=2)),
                          n_boot=200)["targets"]["t"]["drift"]
    assert two == {"assessable": False, "why": "fewer than 3 serial cells on a side "
                   "(MIN_SERIAL_CELLS = 3, see docs/method.md#constants)"}


def test_an_absolute_change_the_serial_arms_own_move_could_give_is_confounded_with_time():
    """The same engine measured twice, B a little slower (serial −4%, within both sides'
    spread, and a consistent −9% at 4-way that the rank-sum test detects): the serial arm's
    interval from A to B reaches −15%, so the machine alone could give the 4-way change, and
    its absolute rates say "confounded with time", by name; the ratios compare. A 4-way change
    far beyond the serial arm's reach is still called. A fingerprint difference that could move
    the serial arm (the server's version) does not clear the confound: it is named beside
    time."""
    spread = np.array([0.90, 0.94, 0.97, 0.99, 1.01, 1.03, 1.06, 1.10])
    tight = np.array([0.99, 0.995, 0.998, 1.0, 1.0, 1.002, 1.005, 1.01])

    def frame(serial, four, seed):
        f = ratios(seed=seed)
        for arm, values in ((1, serial), (4, four)):
            at = f["arm"] == arm
            f.loc[at, "agg_tps"] = values
            f.loc[at, "user_tps"] = values / arm
        return f

    a = side("A", frame(50 * spread, 75 * tight, 1))
    for four, expected in ((0.91, compare.CONFOUNDED), (0.60, compare.SLOWER)):
        b = side("B", frame(48 * spread[::-1], 75 * four * tight[::-1], 2))
        result = compare.compare(a, b, n_boot=500)
        rec = result["targets"]["t"]
        assert not rec["drift"]["confounded"] and not rec["drift"]["beyond_spread"]
        rows = {(r["arm"], r["metric"]): r for r in rec["rows"]}
        four_way = rows[(4, "agg_tps")]
        assert four_way["p"] < 0.001 and four_way["diff_hi"] < 0
        # the serial arm's interval reaches the 4-way change (0.91), or falls short of it (0.60)
        reach = rec["drift"]["change_lo"] <= four_way["diff_hi"] / four_way["a"]
        assert reach == (expected == compare.CONFOUNDED), (rec["drift"], four_way)
        assert rows[(4, "agg_tps")]["verdict"] == rows[(4, "user_tps")]["verdict"] == expected
        assert rows[(4, "speedup")]["verdict"] != compare.CONFOUNDED
        md = "\n".join(str(blk) for blk in compare_doc.document(result))
        named = "Confounded with time: parallel-4 aggregate tok/s, parallel-4 per-user tok/s."
        assert (named in md) == (expected == compare.CONFOUNDED), md
    declared = side("B", frame(48 * spread[::-1], 75 * 0.91 * tight[::-1], 2),
                    **{"server.version": "b5678"})
    version = compare.compare(a, declared, n_boot=500)
    rec = version["targets"]["t"]
    assert rec["drift"]["may_explain"] == ["server.version"]
    assert verdicts(version)["agg_tps"] == verdicts(version)["user_tps"] == compare.CONFOUNDED
    four_way = next(r for r in rec["rows"] if r["arm"] == 4 and r["metric"] == "agg_tps")
    assert four_way["within_serial"] and four_way["may_explain"] == ["server.version"]
    md = "\n".join(str(blk) for blk in compare_doc.document(version))
    assert ("so the machine alone could give the change; the difference in server.version "
            "could too, and this comparison cannot tell which") in md


T0 = 1_780_000_000.0  # when A's first rep started (unix s)


def slowing(start, per_minute, speedup4=1.5, seed=0, rep_s=15.0, reps=8):
    """A side measured from ``start`` on a machine that slows by ``per_minute`` of its first
    rate every minute: each rep's absolute rates scaled by the machine's speed when the rep
    started, its within-rep ratios untouched."""
    frame = ratios(speedup4=speedup4, seed=seed, reps=reps)
    frame["t_start_unix"] = start + frame["rep"] * rep_s + (frame["arm"] > 1) * rep_s / 2
    speed = 1 - per_minute * (frame["t_start_unix"] - T0) / 60
    for col in compare.ABSOLUTE:
        frame[col] = frame[col] * speed
    return frame


def table_verdicts(md: str) -> dict:
    """(arm, metric label) -> the verdict cell of each row of compare.md's table."""
    out = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 9 and cells[0].startswith(("serial-", "parallel-")):
            out[(cells[0], cells[1])] = cells[7]
    return out


def test_identical_servers_measured_minutes_apart_on_a_slowing_machine_are_never_plain_slower(
        tmp_path):
    """Two identical servers (two URLs), B measured 4 min after A on a machine losing 6% of its
    speed a minute: every absolute rate fell by about a fifth, the ratios did not move. No
    absolute rate may say "B slower" or "B faster" without the time between the measurements
    and the serial arm's move in its own row, and the URL difference is one possible
    explanation of the move, beside time, not the explanation."""
    url = {"config.target.url": "http://127.0.0.1:8081"}
    a = side("A", slowing(T0, 0.06, seed=1), **url)
    b = side("B", slowing(T0 + 240, 0.06, seed=2), **{"config.target.url": "http://127.0.0.1:8082"})
    result = compare.compare(a, b, n_boot=300)
    md, _, js, _ = compare_doc.write(result, (a, b), tmp_path)
    rec = json.loads(js.read_text())["targets"]["t"]
    assert rec["differences"] == {"config.target.url": ["http://127.0.0.1:8081",
                                                        "http://127.0.0.1:8082"]}
    assert rec["time_gap_s"] == pytest.approx(240)
    assert rec["drift"]["may_explain"] == ["config.target.url"] and rec["drift"]["confounded"]
    assert "explained_by" not in rec["drift"]
    absolute = [r for r in rec["rows"] if r["metric"] in compare.ABSOLUTE]
    ratio_rows = [r for r in rec["rows"] if r["metric"] not in compare.ABSOLUTE]
    assert len(absolute) == 4 and len(ratio_rows) == 5
    for row in absolute:
        # the rank test and the interval alone would say "B slower" on every one of them
        assert row["p"] < 0.001 and row["diff_hi"] < 0, row
        assert row["verdict"] == compare.CONFOUNDED, row
        assert row["time_gap_s"] == pytest.approx(240)
        assert row["serial_move"] == pytest.approx(-0.24, abs=0.03)
        assert row["serial_move_lo"] < row["serial_move"] < row["serial_move_hi"] < 0
        assert row["may_explain"] == ["config.target.url"]
    # the ratios, taken within each rep, keep the verdicts they have with no drift at all
    still = compare.compare(side("A", ratios(seed=1)), side("B", ratios(seed=2)), n_boot=300)
    unmoved = {(r["arm"], r["metric"]): r["verdict"] for r in still["targets"]["t"]["rows"]}
    assert {(r["arm"], r["metric"]): r["verdict"] for r in ratio_rows} == {
        k: v for k, v in unmoved.items() if k[1] not in compare.ABSOLUTE}
    assert {r["verdict"] for r in ratio_rows} == {compare.NO_CHANGE}
    assert not any("time_gap_s" in r or "serial_move" in r for r in ratio_rows)
    text = md.read_text()
    cells = table_verdicts(text)
    move = absolute[0]
    assert cells[("parallel-4", "aggregate tok/s")] == (
        "confounded with time; measured 4.0 min after A, while the serial arm moved "
        f"{fmt_signed_pct(move['serial_move'])} [{fmt_signed_pct(move['serial_move_lo'])}, "
        f"{fmt_signed_pct(move['serial_move_hi'])}]: the machine alone could give the "
        "change, or the difference in config.target.url may; this comparison cannot tell which")
    assert cells[("serial-1", "aggregate tok/s")].startswith(
        "confounded with time; measured 4.0 min after A: the machine alone")
    for (arm, label), verdict in cells.items():
        if label in ("aggregate tok/s", "per-user tok/s"):
            assert "measured 4.0 min after A" in verdict, verdict
        else:
            assert verdict == compare.NO_CHANGE, (arm, label, verdict)
    assert not any(v.startswith(("B slower", "B faster")) for v in cells.values())
    assert "B was measured 4.0 min after A" in text
    assert ("the difference in config.target.url may explain the move too, and this comparison "
            "cannot tell which") in text
    assert "no fingerprint difference explains" not in text


def test_a_slower_server_measured_later_is_slower_with_the_time_in_its_row(tmp_path):
    """A one-slot B, 4 min after A on a machine slowing 0.5% a minute: its 4-way rates fell far
    beyond the serial arm's move and are "B slower", each with the time and the move in its
    row, in compare.json and compare.md alike; its speedup is "B slower" with no caveat."""
    a = side("A", slowing(T0, 0.005, seed=1))
    b = side("B", slowing(T0 + 240, 0.005, speedup4=1.0, seed=2), **{"server.slots": 1})
    result = compare.compare(a, b, n_boot=300)
    md, _, js, _ = compare_doc.write(result, (a, b), tmp_path)
    rec = json.loads(js.read_text())["targets"]["t"]
    assert not rec["drift"]["confounded"] and rec["drift"]["may_explain"] == []
    rows = {(r["arm"], r["metric"]): r for r in rec["rows"]}
    called = [r for r in rec["rows"] if r["verdict"] in (compare.FASTER, compare.SLOWER)]
    assert {(r["arm"], r["metric"]) for r in called} >= {(4, "agg_tps"), (4, "user_tps"),
                                                          (4, "speedup")}
    for row in called:
        if row["metric"] in compare.ABSOLUTE:
            assert row["time_gap_s"] == pytest.approx(240) and row["serial_move"] is not None
            assert row["serial_move_lo"] <= row["serial_move"] <= row["serial_move_hi"]
        else:
            assert "time_gap_s" not in row
    cells = table_verdicts(md.read_text())
    serial = rows[(1, "agg_tps")]
    assert cells[("parallel-4", "aggregate tok/s")] == (
        f"B slower; measured 4.0 min after A, while the serial arm moved "
        f"{fmt_signed_pct(serial['serial_move'])} [{fmt_signed_pct(serial['serial_move_lo'])}, "
        f"{fmt_signed_pct(serial['serial_move_hi'])}]: the machine may have moved, not the server")
    assert cells[("parallel-4", "speedup")] == compare.SLOWER
    for (_, label), verdict in cells.items():
        absolute = label in ("aggregate tok/s", "per-user tok/s")
        assert ("measured 4.0 min after A" in verdict) == absolute, (label, verdict)


def test_a_side_is_an_experiments_name_its_folder_or_a_result_from_before(tmp_path, monkeypatch):
    """compare A B: a name with no slash that is not a path is results/<name>/ of this checkout;
    a folder is read as it is, an old results/ (or the checkout above it) too; anything else is
    one line listing the experiments there are."""
    monkeypatch.setattr(experiments, "REPO", tmp_path)  # "this checkout"
    monkeypatch.chdir(tmp_path.parent)  # where no np4 or np8 lies
    a = _results_dir(tmp_path, ratios(seed=1), "q4", "np4")
    _results_dir(tmp_path, ratios(seed=2), "q4", "np8")
    old = _results_dir(tmp_path / "before", ratios(seed=3), "q4")
    by_name = compare.load_side("np4")
    by_folder = compare.load_side(a)
    assert by_name.name == "np4" and by_name.ratios.equals(by_folder.ratios)
    assert by_name.fingerprint == by_folder.fingerprint
    assert by_name.fingerprint["t"]["model.sha256"] == "q4"
    for where in (old, tmp_path / "before"):  # an old results/, and the checkout above it
        assert compare.load_side(where).ratios.equals(ratios(seed=3))
    with pytest.raises(ValueError, match=r"^nonesuch: neither a path nor an experiment in "
                                         r".*\(experiments there: np4, np8\)$"):
        compare.load_side("nonesuch")
    with pytest.raises(ValueError, match=r"holds the experiments np4, np8; name one"):
        compare.load_side(tmp_path)  # a checkout with two experiments: which?
    assert compare_doc.main_compare(["np4", "np8", "--out", str(tmp_path / "out"),
                                    "--bootstrap", "200"]) == 0
    assert json.loads((tmp_path / "out/compare.json").read_text())["targets"]["t"]["rows"]


def test_compare_reads_an_archive_made_before_experiments_had_their_own_folders(capsys):
    """tests/data/smoke-archive-ddd678b.tar.gz holds results/analysis/… directly."""
    from pathlib import Path

    older = Path(__file__).parent / "data" / "smoke-archive-ddd678b.tar.gz"
    side_ = compare.load_side(older)
    assert set(side_.ratios["target"]) == {"embedded"} and "embedded" in side_.decision
    assert side_.fingerprint["embedded"]["prompt_tokens"]


def test_a_side_that_is_not_there_is_one_line(tmp_path, capsys):
    rc = compare_doc.main_compare([str(tmp_path / "nowhere"), "nonesuch"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "neither a path nor an experiment" in err, err


def test_two_results_with_no_target_in_common_are_one_line_and_exit_1(monkeypatch, tmp_path,
                                                                       capsys):
    """compare pairs targets by name: an embedded run against `slotbench run --url`'s target
    has nothing to pair, and says so rather than write an empty comparison."""
    sides = {"smoke": side("smoke", ratios(seed=1, target="embedded")),
             "mine": side("mine", ratios(seed=2, target="llamacpp-127-0-0-1-8080"))}
    monkeypatch.setattr(compare_doc, "load_side", sides.__getitem__)
    assert compare_doc.main_compare(["smoke", "mine", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "compare: smoke and mine have no target in common (smoke: embedded; mine: "
        "llamacpp-127-0-0-1-8080)")
    assert not (tmp_path / "out").exists()


# --- energy per token and cost per million tokens: rates like any other ----------------------


def test_energy_per_token_is_judged_like_a_rate_and_a_side_without_a_price_is_not_assessable():
    a, b = ratios(seed=1), ratios(seed=2)
    rng = np.random.default_rng(3)
    for frame, joules in ((a, 2.0), (b, 2.6)):  # B draws 30% more energy per output token
        frame["tokens_out"] = 800.0
        frame["energy_j"] = 800.0 * joules * rng.lognormal(0, 0.02, len(frame))
    sa = compare.Side("A", a, {"t": {"status": "allowed"}}, {"t": FP}, prices={"t": 1.2})
    sb = compare.Side("B", b, {"t": {"status": "allowed"}}, {"t": FP}, prices={"t": None})
    result = compare.compare(sa, sb, n_boot=500)
    found = {(r["arm"], r["metric"]): r for r in result["targets"]["t"]["rows"]}
    for arm in (1, 4):
        energy = found[(arm, "j_per_token")]
        assert energy["verdict"] == compare.SLOWER, energy  # lower is better: B is worse
        assert energy["diff_lo"] > 0 and energy["b"] / energy["a"] == pytest.approx(1.3, rel=0.05)
        assert "time_gap_s" in energy  # it carries the time confound like any absolute rate
        cost = found[(arm, "usd_per_mtok")]
        assert cost["verdict"] == compare.NOT_ASSESSABLE and "no usd_per_hour on B" in cost["why"]
        assert not missing(cost["a"]) and missing(cost["b"]) and missing(cost["diff"])
    # the document says why, never a verdict
    md = "\n".join(str(b) for b in compare_doc.document(result))
    assert "not assessable (no usd_per_hour on B)" in md


def test_without_energy_or_price_on_either_side_there_is_no_cost_row():
    result = compare.compare(side("A", ratios(seed=1)), side("B", ratios(seed=2)), n_boot=200)
    assert not {r["metric"] for r in result["targets"]["t"]["rows"]} & set(compare.COSTS)


def test_a_lower_is_better_rate_inside_the_serial_arms_move_is_confounded_with_time():
    row = {"metric": "j_per_token", "a": 2.0, "diff_lo": 0.1, "diff_hi": 0.3}  # +5% to +15%
    drift = {"change_lo": -0.2, "change_hi": -0.04}  # the machine slowed 4% to 20%
    assert compare.within_serial(row, drift)
    assert not compare.within_serial(row | {"metric": "agg_tps"}, drift)


def test_the_price_is_read_from_each_sides_resolved_config(tmp_path):
    frame = ratios(seed=1).assign(tokens_out=800.0, energy_j=1600.0)
    folder = _results_dir(tmp_path / "a", frame, "x")
    (folder / "config.resolved.yaml").write_text(
        "experiment: a\ntargets:\n- name: t\n  usd_per_hour: 3.6\n")
    loaded = compare.load_side(folder)
    assert loaded.prices == {"t": 3.6}
    costs = compare.with_costs(loaded.ratios, loaded.prices)
    assert costs["usd_per_mtok"].to_numpy() == pytest.approx(1e6 / 1000 / costs["agg_tps"])
    assert costs["j_per_token"].to_numpy() == pytest.approx(2.0)
