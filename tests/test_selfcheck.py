"""The client's self-check on simulated FIFO worker pools: prompt clients pass, a client that
sends late or burns CPU per token is caught."""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd
import pytest

from slotbench.checks import client as selfcheck

ARMS = (1, 2, 4)
# the thresholds, at the schema's checks.send_lag_s and checks.client_cpu_share
LIMITS = {"lag_threshold_s": 0.010, "cpu_share_threshold": 0.10}


def simulate_cell(arm, durations, delay=0.0, t0=1.0, rep=0, position=0, target="t",
                  run="run1", tokens=45, itl=0.02, skew=0.0):
    """A FIFO pool of ``arm`` workers; each request after the first ``arm`` goes out ``delay``
    seconds after a slot frees. ``skew`` spreads the first sends (thread start-up)."""
    rows, done = [], []
    for k, duration in enumerate(durations):
        if k < arm:
            t_sent = t0 + skew * k
        else:
            t_sent = heapq.heappop(done) + delay
        t_done = t_sent + duration
        heapq.heappush(done, t_done)
        rows.append({
            "target": target, "run": run, "rep": rep, "arm": arm, "position": position,
            "request": k, "t_sent_s": t_sent, "t_first_s": t_sent + 0.05, "t_done_s": t_done,
            "output_tokens": tokens, "gen_s": tokens * itl,
        })
    return rows


def simulate(reps=3, delay=0.0, n_requests=4, seed=0, **kw):
    rng = np.random.default_rng(seed)
    rows = []
    for rep in range(reps):
        t = 0.0
        for position, arm in enumerate(ARMS[rep % 3 :] + ARMS[: rep % 3]):
            durations = rng.uniform(0.8, 1.6, n_requests)
            cell = simulate_cell(arm, durations, delay, t0=t, rep=rep, position=position, **kw)
            rows += cell
            t = max(r["t_done_s"] for r in cell) + 0.5
    return pd.DataFrame(rows)


def test_intended_times_on_a_hand_case():
    # arm 2: requests 0 and 1 at t=0; 1 finishes at 3, 0 at 5; request 2 waits for t=3,
    # request 3 for min(5, done of request 2 = 4) = 4.
    rows = [
        {"request": 0, "t_sent_s": 0.0, "t_done_s": 5.0},
        {"request": 1, "t_sent_s": 0.0, "t_done_s": 3.0},
        {"request": 2, "t_sent_s": 3.002, "t_done_s": 4.0},
        {"request": 3, "t_sent_s": 4.5, "t_done_s": 6.0},
    ]
    req = pd.DataFrame(rows).assign(target="t", run="r", rep=0, arm=2, position=1)
    lags, cells = selfcheck.send_lag(req)
    assert list(lags.columns) == selfcheck.LAG_COLUMNS
    assert lags["intended_s"].tolist() == [0.0, 0.0, 3.0, 4.0]
    assert lags["lag_s"].tolist() == pytest.approx([0.0, 0.0, 0.002, 0.5])
    assert list(cells.columns) == selfcheck.LAG_SUMMARY_COLUMNS
    cell = cells.iloc[0]
    assert cell["cell"] == "t/r/rep0/arm2" and cell["lag_max_s"] == pytest.approx(0.5)
    assert cell["lag_median_s"] == pytest.approx(0.001) and cell["n_early"] == 0


def test_prompt_client_has_no_lag():
    lags, cells = selfcheck.send_lag(simulate(delay=0.0))
    assert lags["lag_s"].max() == pytest.approx(0.0, abs=1e-12)
    assert len(cells) == 9 and (cells["n_requests"] == 4).all()


def test_slowed_client_fires():
    requests = simulate(delay=0.030)
    lags, cells = selfcheck.send_lag(requests)
    late = lags[lags["send_order"] >= lags["arm"]]
    assert late["lag_s"].to_numpy() == pytest.approx(0.030)
    assert (lags.loc[lags["send_order"] < lags["arm"], "lag_s"] == 0).all()
    out = selfcheck.self_check(requests, **LIMITS)
    assert out["lag_fired"] and out["distorted"]
    assert out["lag_p95_s"] == pytest.approx(0.030)
    assert "late" in out["sentence"] and "30.0 ms" in out["sentence"]
    # arm 4 sends all four requests at once, so only arms 1 and 2 had a late send
    assert len(out["cells_over_lag"]) == 6
    assert all(c.endswith(("arm1", "arm2")) for c in out["cells_over_lag"])


def test_prompt_client_passes():
    out = selfcheck.self_check(simulate(delay=0.0005, skew=0.001), **LIMITS)
    assert not out["lag_fired"] and not out["distorted"] and out["lag_p95_s"] < 0.010
    assert out["sentence"].startswith("The client kept up")
    assert "not assessed" in out["sentence"] and not out["cpu_assessed"]


def test_more_in_flight_than_the_arm_is_named():
    requests = simulate(reps=1)
    serial = (requests["arm"] == 1) & (requests["request"] == 2)
    requests.loc[serial, "t_sent_s"] -= 0.3  # sent before request 1 finished
    lags, cells = selfcheck.send_lag(requests)
    assert cells.loc[cells["arm"] == 1, "n_early"].item() == 1
    assert lags["lag_s"].min() >= 0
    out = selfcheck.self_check(requests, **LIMITS)
    assert out["early_cells"] == ["t/run1/rep0/arm1"] and "before any slot" in out["sentence"]


def cpu_for(requests, per_token_s):
    tokens = requests.groupby(["target", "run", "rep", "arm"])["output_tokens"].sum()
    return (tokens * per_token_s).rename("client_cpu_s").reset_index()


def test_client_cpu_per_token():
    assert selfcheck.client_cpu_per_token(0.9, 180) == pytest.approx(0.005)
    assert np.isnan(selfcheck.client_cpu_per_token(0.9, 0))
    got = selfcheck.client_cpu_per_token(pd.Series([1.0, 2.0]), pd.Series([100, 0]))
    assert got.iloc[0] == pytest.approx(0.01) and np.isnan(got.iloc[1])


def test_cpu_hungry_client_fires():
    requests = simulate(itl=0.02)
    # 25% of a 20 ms interval
    out = selfcheck.self_check(requests, cpu_for(requests, 0.005), **LIMITS)
    assert out["cpu_fired"] and out["distorted"] and not out["lag_fired"]
    assert out["cpu_share"] == pytest.approx(0.25)
    assert out["inter_token_s"] == pytest.approx(0.02)
    assert out["cpu_per_token_s"] == pytest.approx(0.005)
    assert len(out["cells_over_cpu"]) == 9
    assert "CPU" in out["sentence"] and "25%" in out["sentence"]


def test_light_client_passes_cpu_check():
    requests = simulate(itl=0.02)
    out = selfcheck.self_check(requests, cpu_for(requests, 0.0002), **LIMITS)  # 1% of it
    assert out["cpu_assessed"] and not out["cpu_fired"] and not out["distorted"]
    assert out["cpu_share"] == pytest.approx(0.01)
    assert out["cells_over_cpu"] == [] and "1.0%" in out["sentence"]


def test_one_hungry_cell_is_named():
    requests = simulate(itl=0.02)
    cpu = cpu_for(requests, 0.0002)
    hot = (cpu["rep"] == 2) & (cpu["arm"] == 4)
    cpu.loc[hot, "client_cpu_s"] *= 100
    out = selfcheck.self_check(requests, cpu, **LIMITS)
    assert out["cpu_fired"] and out["worst_cpu_cell"] == "t/run1/rep2/arm4"
    assert out["cells_over_cpu"] == ["t/run1/rep2/arm4"]


def test_thresholds_are_reported_and_adjustable():
    requests = simulate(delay=0.030)
    out = selfcheck.self_check(requests, lag_threshold_s=0.050, cpu_share_threshold=0.5)
    assert out["lag_threshold_s"] == 0.050 and out["cpu_share_threshold"] == 0.5
    assert not out["lag_fired"]


def test_cell_cpu_without_the_column_says_what_to_do():
    requests = simulate(reps=1)
    with pytest.raises(ValueError, match="client_cpu_s"):
        selfcheck.self_check(requests, requests[["target", "run", "rep", "arm"]], **LIMITS)


def test_intended_send_times_match_a_sort_per_request():
    """The heap of the latest completions gives what sorting them again for each request gave,
    a missing completion sorting last."""
    rng = np.random.default_rng(3)
    for _ in range(2000):
        m, n = int(rng.integers(0, 30)), int(rng.integers(1, 8))
        sent = np.sort(rng.random(m))
        done = sent + rng.random(m)
        if m and rng.random() < 0.3:
            done[rng.integers(0, m)] = np.nan
        if rng.random() < 0.2:
            done = np.round(done, 1)  # ties
        expected = np.array([sent[0] if k < n else np.sort(done[:k])[k - n] for k in range(m)])
        assert np.array_equal(selfcheck._intended(sent, done, n), expected, equal_nan=True)
