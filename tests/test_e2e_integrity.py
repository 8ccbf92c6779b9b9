"""End to end on the real embedded server: the cache-hit check fires when nonces are off, the
control arm measures the shared-prefix inflation, and thermal samples are taken."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from e2e_helpers import copy_repo, results_dir, snakemake

pytestmark = pytest.mark.e2e


def test_nonces_off_fires_the_cache_check_and_the_control_arm_is_kept_apart(tmp_path):
    work = copy_repo(tmp_path / "integrity")
    (work / "naive.yaml").write_text(yaml.safe_dump(
        {"prompt": {"nonces": False}, "control_arm": True, "cooldown_s": 0.5}))
    proc = snakemake(work, "--configfile", "config/smoke.yaml", "naive.yaml",
                     cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hits = pd.read_csv(results_dir(work) / "checks/cache_hits.csv")
    assert len(hits) >= 12, "identical prompts with the cache on must be named as cache hits"
    assert hits["reason"].str.contains("cache").all()
    control = pd.read_csv(results_dir(work) / "checks/control.csv")
    assert list(control["arm"]) == [4] and control["control_cells"].iloc[0] == 3
    cells = pd.read_parquet(results_dir(work) / "cells.parquet")
    assert not cells["control"].any() and len(cells) == 9, "control cells leaked into cells"
    thermal = pd.read_parquet(results_dir(work) / "thermal.parquet")
    assert len(thermal) > 0 and thermal["rep"].nunique() == 3
    fingerprint = yaml.safe_load((results_dir(work) / "fingerprint/embedded/run1.json").read_text())
    assert fingerprint["config"]["measurement"]["cooldown_s"] == 0.5
