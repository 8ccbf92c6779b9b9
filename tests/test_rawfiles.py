"""Raw files: always valid JSON, tamper seen without trusting mtimes, a rep kept when the disk
refuses it and put in place by the next run (slotbench.measure.rawfiles)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slotbench.measure import rawfiles


def strict(data: bytes):
    def refuse(name):
        raise ValueError(name)

    return json.loads(data, parse_constant=refuse)


def test_raw_json_never_holds_nan_or_infinity(tmp_path):
    data = {"a": float("nan"), "b": [1.0, float("inf"), {"c": float("-inf")}], "d": 2.5}
    payload = rawfiles.json_bytes(data)
    assert strict(payload) == {"a": None, "b": [1.0, None, {"c": None}], "d": 2.5}
    digest = rawfiles.write_raw_atomic(tmp_path / "rep1.json", data)
    assert rawfiles.verify_raw_file(tmp_path / "rep1.json", tmp_path / "rep1.json.sha256") == digest


def test_one_cleaner_readies_every_json_the_pipeline_writes(tmp_path):
    """rawfiles.plain cleans raw files, verdicts (checks.base.plain: keys as strings) and the
    provenance record alike: NaN, infinity, pandas' NA and NaT to null, numpy scalars to
    Python ones, tuples to lists; a raw file's int keys keep their (numeric) order."""
    import numpy as np
    import pandas as pd

    from slotbench.provenance import ids as provenance
    from slotbench.checks.base import plain as verdict_plain

    value = {"a": np.float64("nan"), "b": [np.float64("-inf"), (np.int64(3), pd.NA)],
             7: pd.NaT, "c": np.bool_(True), "d": np.float32(0.5)}
    cleaned = {"a": None, "b": [None, [3, None]], 7: None, "c": True, "d": 0.5}
    assert rawfiles.plain(value) == cleaned
    assert [type(v) for v in (cleaned["c"], cleaned["d"])] == [bool, float]
    assert verdict_plain(value) == {("7" if k == 7 else k): v for k, v in cleaned.items()}
    assert provenance.plain is rawfiles.plain
    assert rawfiles.json_bytes({"arms": {2: 1.5, 16: float("inf")}}) == (
        b'{\n "arms": {\n  "2": 1.5,\n  "16": null\n }\n}\n')


def _ledger(tmp_path, n=2):
    paths = [str(tmp_path / f"rep{i}.json") for i in range(1, n + 1)]
    for p in paths:
        rawfiles.write_raw_atomic(p, {"rep": p})
    token = rawfiles.inventory_token(paths, tmp_path / "inventory.json")
    rawfiles.write_ledger(tmp_path / "inventory.json", paths, token)
    return paths, token


def test_the_inventory_token_holds_while_nothing_changed(tmp_path):
    paths, token = _ledger(tmp_path)
    assert rawfiles.inventory_token(paths, tmp_path / "inventory.json") == token
    # a new rep (a run addition) does not disturb the files already read
    more = paths + [str(tmp_path / "rep3.json")]
    assert rawfiles.inventory_token(more, tmp_path / "inventory.json") == token


@pytest.mark.parametrize("change", ["delete", "delete sha256", "edit, mtime restored", "touch"])
def test_the_inventory_token_changes_when_a_read_file_does(tmp_path, change):
    paths, token = _ledger(tmp_path)
    raw = Path(paths[0])
    if change == "delete":
        raw.unlink()
    elif change == "delete sha256":
        Path(f"{raw}.sha256").unlink()
    elif change == "edit, mtime restored":
        st = raw.stat()
        text = raw.read_text()
        raw.write_text(text.replace("rep1", "repX"))
        os.utime(raw, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert raw.stat().st_mtime_ns == st.st_mtime_ns and raw.stat().st_size == st.st_size
    else:
        os.utime(raw)
    assert rawfiles.inventory_token(paths, tmp_path / "inventory.json") != token


def test_a_rep_the_disk_refused_is_kept_and_put_in_place_later(tmp_path, monkeypatch):
    raw, logs = tmp_path / "raw" / "rep2.json", tmp_path / "logs"
    data = {"target": "t", "run": "run1", "rep": 2, "experiment": {"seed": 1}, "x": float("nan")}

    def full(path, payload):
        raise OSError(28, "No space left on device")

    real = rawfiles._write_bytes_atomic
    monkeypatch.setattr(rawfiles, "_write_bytes_atomic",
                        lambda p, b: full(p, b) if "raw" in str(p) else real(p, b))
    digest, problem = rawfiles.save_raw(raw, data, logs)
    kept = logs / "rep2.json.unsaved"
    assert problem.startswith(
        f"the raw file {raw} could not be written (No space left on "
        f"device); the measured rep was kept in {kept} (SHA-256 {digest})"
    )
    assert kept.exists() and not raw.exists()
    monkeypatch.setattr(rawfiles, "_write_bytes_atomic", real)

    expect = {"target": "t", "run": "run1", "rep": 2, "experiment": {"seed": 1}}
    assert rawfiles.restore_unsaved(raw, logs, expect | {"rep": 3}) is None  # not this rep
    assert rawfiles.restore_unsaved(raw, logs, expect) == (digest, kept)
    assert rawfiles.verify_raw_file(raw, f"{raw}.sha256") == digest
    assert not kept.exists()
    assert rawfiles.restore_unsaved(raw, logs, expect) is None  # nothing left to restore


def test_a_kept_rep_that_is_not_whole_is_not_put_in_place(tmp_path):
    raw, logs = tmp_path / "raw" / "rep2.json", tmp_path / "logs"
    kept = rawfiles.unsaved_paths(raw, logs)[0]
    rawfiles.write_raw_atomic(kept, {"rep": 2})
    kept.write_text('{"rep": 2')  # damaged after it was kept
    assert rawfiles.restore_unsaved(raw, logs, {"rep": 2}) is None
    assert not raw.exists() and kept.exists()


def test_too_little_free_space_is_said_before_a_rep_starts(tmp_path):
    assert rawfiles.check_free_space(tmp_path, needed=1) is None
    said = rawfiles.check_free_space(tmp_path / "not" / "yet", needed=1 << 62)
    assert said.startswith("only ") and "nothing was measured" in said
