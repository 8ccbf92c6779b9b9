"""The capacity sweep on the real embedded llama-server, past its slots: two slots, arms
[1, 2, 4, 8], 2 reps, few tokens. The 4- and 8-way arms queue at the server, so their gen_gain
must count the two streams that generated at once, not the arm's nominal number."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from e2e_helpers import copy_repo, snakemake

pytestmark = pytest.mark.e2e

# gen_gain counts the streams generating at once and the speedup the tokens over the wall clock,
# so where the server queued, gen_gain can exceed the speedup only by what the prefill of the
# queued requests and the hand-over between them cost: 15% on this server and these lengths.
QUEUED_GEN_GAIN_TOLERANCE = 1.15
SWEEP = {
    "targets": [{"name": "embedded", "backend": "llamacpp", "managed": True,
                 "server": {"parallel": 2, "threads": 2}}],
    "arms": [1, 2, 4, 8], "requests_per_cell": {1: 2, 2: 4, 4: 8, 8: 8},
    "reps": 2, "runs": 1, "num_predict": 16, "warmup_predict": 4,
    "analysis": {"bootstrap": 200},
    "slo": {"user_tps_min": 1.0, "ttft_s_max": 600.0},
}  # fmt: skip


def test_a_sweep_past_two_slots_counts_the_streams_generating_and_states_the_capacity(
        tmp_path_factory):  # fmt: skip
    work = copy_repo(tmp_path_factory.mktemp("capacity"))
    (work / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    cache = tmp_path_factory.mktemp("capacity-cache")
    proc = snakemake(work, "--configfile", "sweep.yaml", cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    cells = pd.read_parquet(work / "results/cells.parquet")
    assert cells.groupby("arm")["n_requests"].first().to_dict() == {1: 2, 2: 4, 4: 8, 8: 8}
    # two slots: never more than two requests generating at once, whatever the arm
    assert cells["gen_streams_max"].max() <= 2, cells[["arm", "gen_streams_max"]]
    ratios = pd.read_parquet(work / "results/analysis/ratios.parquet")
    wide = ratios[ratios["arm"] >= 4]
    assert wide["queued"].all() and (wide["streams"] <= 2.0 + 1e-9).all()
    summary = pd.read_csv(work / "results/analysis/summary.csv").set_index("arm")
    for arm in (4, 8):
        row = summary.loc[arm]
        assert row["queued_cells"] == 2 and row["streams"] <= 2.0
        assert row["gen_gain"] <= row["speedup"] * QUEUED_GEN_GAIN_TOLERANCE, row
        # the nominal count would have claimed batching for streams that never ran together
        assert row["gen_gain"] * arm / row["streams"] > row["speedup"] * QUEUED_GEN_GAIN_TOLERANCE

    assessed = json.loads((work / "results/analysis/capacity.json").read_text())
    record = assessed["targets"]["embedded"]
    assert [r["arm"] for r in record["arms"]] == [1, 2, 4, 8]
    for r in record["arms"]:
        assert 0 < r["user_tps_lo"] <= r["user_tps"] <= r["user_tps_hi"], r
        assert 0 < r["agg_tps"] and r["ttft"] > 0, r
    # levels every arm clears by orders of magnitude: the capacity is past the largest arm
    assert record["capacity"] == {"arm": 8, "next_arm": None, "next_verdict": None,
                                  "between": None}  # fmt: skip
    report = (work / "results/report.md").read_text()
    assert "### Capacity" in report and "Serves 8 concurrent users" in report
    assert "of 4 (queued)" in report and "of 8 (queued)" in report
    assert (work / "results/figures/capacity.png").stat().st_size > 10_000
