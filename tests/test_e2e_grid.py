"""End to end with a grid of workloads: config/workloads/grid.yaml, one rep and shorter lengths, on
the real embedded server. Every grid point is a target of its own that gets exactly its lengths,
with its own headline, and the report sets them side by side in the Frontier section with its
figure."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from e2e_helpers import copy_repo, results_dir, snakemake

pytestmark = pytest.mark.e2e

INPUTS, OUTPUTS = [32, 128], [8, 32]  # shorter than the example's, to keep the test short
POINTS = {f"embedded-in{i}-out{o}": (i, o) for i in INPUTS for o in OUTPUTS}


def test_a_grid_measures_every_point_as_its_own_target_and_reports_their_frontier(tmp_path):
    work = copy_repo(tmp_path / "grid")
    (work / "short.yaml").write_text(yaml.safe_dump(
        {"reps": 1, "workload": {"grid": {"input_tokens": INPUTS, "output_tokens": OUTPUTS}}}))
    proc = snakemake(work, "--configfile", "config/workloads/grid.yaml", "short.yaml",
                     cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = results_dir(work, "grid")
    requests = pd.read_parquet(out / "requests.parquet")
    assert set(requests["target"]) == set(POINTS)
    for target, (i, o) in POINTS.items():
        mine = requests[requests["target"] == target]
        assert len(mine) == 4 + 4 + 4, target
        assert mine["prompt_tokens"].eq(i).all(), (target, mine["prompt_tokens"].tolist())
        assert mine["output_tokens"].eq(o).all(), (target, mine["output_tokens"].tolist())
        assert mine["planned_input_tokens"].eq(i).all() and mine["pinned"].all()
        raw = json.loads((out / f"raw/{target}/run1/rep1.json").read_text())
        assert raw["experiment"]["workload"] == {
            "kind": "synthetic", "input_tokens": {"dist": "fixed", "value": i},
            "output_tokens": {"dist": "fixed", "value": o}}
    front = json.loads((out / "analysis/frontier.json").read_text())
    assert [w["target"] for w in front["workloads"]] == list(POINTS)
    assert front["frontier"], "no point is non-dominated"
    sources = json.loads((out / "figures/sources.json").read_text())
    assert (out / "figures/frontier.png").stat().st_size > 10_000
    assert set(sources["frontier"]["cells"]) == {
        c for w in front["workloads"] for p in w["points"] for c in p["cells"]}
    md = (out / "report.md").read_text()
    assert len(re.findall(r"^## Target: ", md, re.M)) == 4
    for target in POINTS:  # each grid point's own headline and per-arm table
        assert f"## Target: {target}" in md
        assert f"headline/{target}" in md
    assert "## Across targets" in md and "## Frontier" in md
    frontier = md.split("## Frontier", 1)[1].split("\n## ", 1)[0]
    assert "frontier.png" in frontier
    for target, (i, o) in POINTS.items():
        assert f"{target} (input {i}, output {o} tokens" in frontier
    assert "a prefill-heavy mix gains mainly by overlap" in frontier
