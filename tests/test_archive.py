"""Provenance you can audit: raw files hashed when written, runs that accumulate, an archive that
verifies and re-renders offline, and `snakemake --report`.

The unit tests build archives from small synthetic result trees. The end-to-end tests share one
smoke run on the real embedded llama-server (the session's, conftest.py) and work on copies of it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from e2e_helpers import (
    SMOKE, copy_work, file_states, jobs_run, llama_servers_under, results_dir, snakemake,
)
from slotbench.checks import batching, rounds
from slotbench.core.code import CACHE_FILE
from slotbench.measure.rawfiles import write_json_atomic, write_sha256_atomic
from slotbench.workflow import archive, rerender
from slotbench.workflow.config import canonical, resolve

SERVER_RULES = {"fingerprint", "plan", "rep"}
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
R = "results/exp"  # the unit tests' experiment folder (results/<experiment>)
SMOKE_R = "results/smoke"  # config/smoke.yaml's


# ---------------------------------------------------------------------------------------------
# unit tests: no server


def test_metadata_names_follow_snakemakes_file_persistence(tmp_path):
    from snakemake.persistence.file import FilePersistence

    class Probe:  # just enough of FilePersistence for its _record_path
        _fetch_max_len = staticmethod(lambda subject: 255)

    for path in [f"{R}/cells.parquet", f"{R}/raw/" + "x" * 300 + "/rep1.json"]:
        expected = FilePersistence._record_path(Probe(), ".snakemake/metadata", path)
        assert archive.metadata_record(path) == expected


def fake_results(work: Path) -> None:
    """A minimal result tree with one raw file, its hash, a table, a report and metadata."""
    raw = work / f"{R}/raw/t/run1/rep1.json"
    digest = write_json_atomic(raw, {"schema": "slotbench.raw/1", "rep": 1, "cells": []})
    write_sha256_atomic(f"{raw}.sha256", digest, raw.name)
    (work / f"{R}/analysis").mkdir(parents=True)
    (work / f"{R}/analysis/summary.csv").write_text("target,arm\nt,1\n")
    (work / f"{R}/report.md").write_text("# report\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n")
    (work / f"{R}/config.resolved.yaml").write_text("runs: 1\n")
    (work / f"{R}/logs").mkdir()
    (work / f"{R}/logs/archive.log").write_text("being written\n")
    (work / f"{R}/raw/t/run1/.rep2.json.abc.tmp").write_text("partial")
    (work / f"{R}/newstage").mkdir()
    (work / f"{R}/newstage/out.csv").write_text("a\n1\n")  # made by a rule: has metadata
    (work / f"{R}/snakemake-report.zip").write_bytes(b"PK")  # made by no rule
    (work / "results/other/raw").mkdir(parents=True)  # another experiment's, made by a rule
    (work / "results/other/raw/rep1.json").write_text("{}")
    for rel in [f"{R}/analysis/summary.csv", f"{R}/newstage/out.csv", "results/other/raw/rep1.json"]:
        record = work / archive.metadata_record(rel)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text('{"rule": "some rule"}')


def build(work: Path, **kwargs) -> Path:
    out = work / f"{R}/archive/t.tar.gz"
    archive.build_archive(out, "t", results=R, workdir=work, exclude=[f"{R}/logs/archive.log"],
                          **kwargs)
    return out


def test_archive_members_sit_under_one_directory_with_a_manifest(tmp_path):
    fake_results(tmp_path)
    out = build(tmp_path)
    prefix, data = archive.verify(out)
    assert prefix == "t"
    for rel in [f"{R}/raw/t/run1/rep1.json", f"{R}/raw/t/run1/rep1.json.sha256",
                f"{R}/analysis/summary.csv", f"{R}/report.md",
                archive.metadata_record(f"{R}/analysis/summary.csv"),
                "software/pip-freeze.txt", "code/git.json", "ARCHIVE.json", "MANIFEST.sha256"]:
        assert rel in data, rel
    assert f"{R}/newstage/out.csv" in data, "a rule's output outside the known directories"
    assert f"{R}/snakemake-report.zip" not in data
    assert f"{R}/logs/archive.log" not in data, "the archive's own log is still being written"
    assert not [rel for rel in data if rel.startswith("results/other")], "another experiment's"
    # an input named from another experiment's folder never goes in either
    out = build(tmp_path, inputs=["results/other/raw/rep1.json"])
    assert "results/other/raw/rep1.json" not in archive.verify(out)[1]
    assert not any(".tmp" in rel for rel in data), "a partial atomic write was archived"
    assert "pytest" in data["software/pip-freeze.txt"].decode()
    assert json.loads(data["ARCHIVE.json"])["format"] == archive.FORMAT
    listed = data["MANIFEST.sha256"].decode().splitlines()
    assert len(listed) == len(data) - 1
    assert not list(out.parent.glob(".*")), "a temporary archive was left behind"
    if shutil.which("sha256sum"):  # the manifest is in sha256sum's own format
        with tarfile.open(out) as tar:
            tar.extractall(tmp_path / "x", filter="data")
        check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"],
                               cwd=tmp_path / "x/t", capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def rewrite_member(src: Path, dest: Path, member: str, change) -> None:
    """Copy an archive, passing one member's bytes through ``change`` (manifest untouched)."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz", format=tarfile.PAX_FORMAT) as tout:
        for info in tin.getmembers():
            data = tin.extractfile(info).read()
            if info.name == member:
                data = change(data)
                info.size = len(data)
            tout.addfile(info, io.BytesIO(data))


def test_verify_names_the_member_that_changed(tmp_path, capsys):
    fake_results(tmp_path)
    out = build(tmp_path)
    assert archive.main_verify([str(out)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = tmp_path / "bad.tar.gz"
    rewrite_member(out, bad, f"t/{R}/analysis/summary.csv", lambda b: b.replace(b"1", b"2"))
    assert archive.main_verify([str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"t/{R}/analysis/summary.csv" in err and "the manifest says" in err
    assert "Traceback" not in err


def test_a_secret_in_any_member_refuses_the_archive(tmp_path, monkeypatch):
    fake_results(tmp_path)
    secret = "sk-test-" + os.urandom(8).hex()
    monkeypatch.setenv("MY_SERVER_KEY", secret)
    (tmp_path / f"{R}/logs/rep.log").write_text(f"oops, the key {secret} leaked\n")
    with pytest.raises(archive.ArchiveError) as err:
        build(tmp_path, secret_envs=["MY_SERVER_KEY"])
    msg = str(err.value)
    assert f"{R}/logs/rep.log" in msg and "$MY_SERVER_KEY" in msg
    assert secret not in msg, "the refusal must not print the key"
    assert not (tmp_path / f"{R}/archive/t.tar.gz").exists()
    assert not list((tmp_path / f"{R}/archive").glob(".*")), "a partial archive was left"
    # without the leak, the same variable is fine and its value is nowhere in the archive
    (tmp_path / f"{R}/logs/rep.log").write_text("clean\n")
    _, data = archive.verify(build(tmp_path, secret_envs=["MY_SERVER_KEY"]))
    assert not any(secret.encode() in blob for blob in data.values())


def test_a_changed_raw_file_is_not_archived(tmp_path):
    fake_results(tmp_path)
    raw = tmp_path / f"{R}/raw/t/run1/rep1.json"
    raw.write_text(raw.read_text().replace('"rep": 1', '"rep": 2'))
    with pytest.raises(archive.ArchiveError, match="rep1.json.*changed after it was written"):
        build(tmp_path)


def test_resolved_config_round_trips():
    cfg = canonical(resolve({"runs": ["run1", "2026-12-01"], "reps": 3}))
    text = archive.dump_config(cfg, "results/article/config.resolved.yaml")
    assert "--configfile results/article/config.resolved.yaml" in text  # how to run it again
    assert "'2026-12-01'" in text, "a date-like run id must stay a string"
    assert canonical(resolve(yaml.safe_load(text))) == cfg


def test_markdown_tables_are_found():
    text = "intro\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\ntext\n| c |\n| --- |\n"
    assert rerender.markdown_tables(text) == [
        "| a | b |\n| --- | --- |\n| 1 | 2 |",
        "| c |\n| --- |",
    ]


def test_table_comparison_names_what_differs(tmp_path):
    archived = {f"{R}/config.resolved.yaml": b"experiment: exp\n",
                f"{R}/analysis/summary.csv": b"arm,x\n1,2\n",
                f"{R}/checks/deviance.csv": b"cell\n",
                f"{R}/report.md": b"# r\n\n| a |\n| --- |\n| 1 |\n"}
    (tmp_path / f"{R}/analysis").mkdir(parents=True)
    (tmp_path / f"{R}/analysis/summary.csv").write_bytes(b"arm,x\n1,3\n")
    (tmp_path / f"{R}/report.md").write_bytes(b"# other words\n\n| a |\n| --- |\n| 1 |\n")
    rows = {what: (same, detail) for what, same, detail in
            rerender.compare_tables(archived, tmp_path)}
    assert rows[f"{R}/analysis/summary.csv"] == (
        False, "line 2: archived '1,2', re-rendered '1,3'")
    assert rows[f"{R}/checks/deviance.csv"] == (False, "not re-rendered")
    assert rows[f"{R}/report.md table 1"][0] is True  # prose may change, tables may not
    assert len(rows) == 3


def test_the_render_command_of_an_archive_made_before_experiments_had_their_own_folders():
    """Its members are results/raw/…, results/report.md: it re-renders in place, in results/."""
    new = archive.render_command(f"{R}/config.resolved.yaml")
    assert new[new.index("--configfile") + 1] == f"{R}/config.resolved.yaml"
    assert "old_layout=true" not in new
    old = archive.render_command("results/config.resolved.yaml", old_layout=True)
    assert old[old.index("--config") + 1] == "old_layout=true"


def test_render_refuses_a_directory_that_is_not_empty(tmp_path, capsys):
    fake_results(tmp_path)
    out = build(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy/file").write_text("x")
    assert archive.main_render([str(out), "--out", str(tmp_path / "busy")]) == 1
    assert "not empty" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# end to end: the real pipeline on the real embedded llama-server


def jobs(proc: subprocess.CompletedProcess) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job Snakemake executed, from its log lines."""
    out, found = proc.stdout + proc.stderr, []
    for line in out.splitlines():
        if line.startswith(("localrule ", "rule ")) and line.rstrip().endswith(":"):
            found.append((line.split()[1].rstrip(":"), {}))
        elif found and line.strip().startswith("wildcards:"):
            pairs = line.split(":", 1)[1].split(",")
            found[-1][1].update(p.strip().split("=", 1) for p in pairs)
    return found


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("slotbench-cache")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, smoke_template):
    """A copy of the session's smoke run (conftest.py), which this module may add to."""
    return copy_work(smoke_template.work, tmp_path_factory.mktemp("archive-smoke") / "work")


@pytest.mark.e2e
def test_raw_files_are_hashed_when_written(smoke):
    raw_dir = results_dir(smoke) / "raw/embedded/run1"
    cells = pd.read_parquet(results_dir(smoke) / "cells.parquet")
    for raw in sorted(raw_dir.glob("rep*.json")):
        digest, name = (raw_dir / f"{raw.name}.sha256").read_text().split()
        assert name == raw.name
        assert set(cells.loc[cells["raw_file"] == f"{SMOKE_R}/raw/embedded/run1/{raw.name}",
                             "raw_sha256"]) == {digest}


@pytest.mark.e2e
def test_a_raw_file_changed_by_one_byte_is_refused_by_name(smoke, cache, tmp_path):
    work = copy_work(smoke, tmp_path / "tampered")
    raw = results_dir(work) / "raw/embedded/run1/rep1.json"
    data = raw.read_bytes()
    digit = re.search(rb'"gen_s": \d+\.(\d)', data).start(1)  # a digit of a float
    flipped = b"1" if data[digit : digit + 1] != b"1" else b"2"
    raw.write_bytes(data[:digit] + flipped + data[digit + 1 :])
    json.loads(raw.read_text())  # still valid JSON: only the hash can tell
    proc = snakemake(work, *SMOKE, cache=cache)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert f"ERROR: consolidate: raw file {SMOKE_R}/raw/embedded/run1/rep1.json" in out, (
        out[-3000:])
    assert "changed after it was written" in out
    assert "Restore it from an archive, or delete it and its .sha256" in out
    assert "Traceback" not in out, out[-3000:]
    assert not set(jobs_run(proc)) & SERVER_RULES, "a request was sent"


@pytest.mark.e2e
def test_adding_a_run_id_measures_only_the_new_run(smoke, cache, tmp_path):
    work = copy_work(smoke, tmp_path / "more-runs")
    old_raws = sorted((results_dir(work) / "raw").rglob("rep*.json*"))
    old = file_states(old_raws + [results_dir(work) / "fingerprint/embedded/run1.json",
                                  results_dir(work) / "plan/embedded/run1.json"])
    more = work / "more.yaml"
    more.write_text("runs: [run1, 2026-12-01]\n")  # an unquoted date is a fine run id
    proc = snakemake(work, *SMOKE, str(more), cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    measured = [(rule, wc) for rule, wc in jobs(proc) if rule in SERVER_RULES]
    assert {wc["run"] for _, wc in measured} == {"2026-12-01"}, measured
    assert sorted(rule for rule, _ in measured) == ["fingerprint", "plan", "rep", "rep", "rep"], measured
    assert file_states(list(map(Path, old))) == old, "an old run's file was touched"
    cells = pd.read_parquet(results_dir(work) / "cells.parquet")
    assert cells.groupby("run").size().to_dict() == {"2026-12-01": 9, "run1": 9}
    summary = pd.read_csv(results_dir(work) / "analysis/summary.csv")
    assert summary["n_reps"].max() == 6, "the analysis pools both runs"
    assert (results_dir(work) / "raw/embedded/2026-12-01/rep2.json.sha256").is_file()
    # each run's fingerprint, plan and reps used one server process, and each run its own:
    # the PID in every file, and the jobs it served before, one job at a time
    pids = {}
    for run in ("run1", "2026-12-01"):
        fp = json.loads((results_dir(work) / f"fingerprint/embedded/{run}.json").read_text())
        raws = [json.loads(p.read_text()) for p in (results_dir(work) / f"raw/embedded/{run}").glob(
            "rep*.json")]
        assert len(raws) == 3 and fp["server"]["lifetime"].startswith("run")
        assert len({fp["server"]["pid"]} | {r["server"]["pid"] for r in raws}) == 1
        served = [fp["server"]["jobs_before"]] + [r["server"]["jobs_before"] for r in raws]
        assert len(set(served)) == 4 and set(served) <= set(range(5)), served  # and the plan
        pids[run] = fp["server"]["pid"]
    assert pids["run1"] != pids["2026-12-01"]
    assert llama_servers_under(str(cache)) == []


@pytest.mark.e2e
def test_snakemake_report_holds_figures_fingerprints_and_the_resolved_config(smoke, cache):
    proc = snakemake(smoke, *SMOKE, "--report", f"{SMOKE_R}/snakemake-report.zip", cache=cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with zipfile.ZipFile(results_dir(smoke) / "snakemake-report.zip") as zf:
        names = zf.namelist()
        page = zf.read(next(n for n in names if n.endswith("report.html"))).decode()
    for name in ["config.resolved.yaml", "run1.json", "throughput.png", "timeline.png"]:
        assert any(n.endswith("/" + name) for n in names), (name, names)
    assert "Fingerprint" in page and "Configuration" in page


def wait_render(cmd: list[str], cwd: Path, env: dict, marker: str, timeout: float = 300):
    """Run the re-render while watching for any llama-server started under ``marker``."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen, out = [], []
    deadline = time.monotonic() + timeout
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    while proc.poll() is None and time.monotonic() < deadline:
        seen += llama_servers_under(marker)
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    reader.join(10)
    return proc.returncode, "".join(out), seen


@pytest.mark.e2e
def test_archive_verifies_and_re_renders_offline_byte_identical(smoke, cache, tmp_path):
    marker = "sb-archive-marker-" + os.urandom(6).hex()  # an env value that must not leak
    started = time.monotonic()
    proc = snakemake(smoke, "archive", *SMOKE, cache=cache, env={"SLOTBENCH_MARKER": marker})
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not set(jobs_run(proc)) & SERVER_RULES
    tarball = results_dir(smoke) / "archive/smoke.tar.gz"  # named after the experiment
    print(f"archive: {tarball.stat().st_size} bytes in {elapsed:.1f} s (snakemake included)")
    prefix, data = archive.verify(tarball)
    assert prefix == "smoke"
    expected = [f"{SMOKE_R}/{rel}" for rel in [
        "raw/embedded/run1/rep1.json", "raw/embedded/run1/rep2.json.sha256",
        "requests.parquet", "cells.parquet", "servers.json",
        "checks/headline.json", "analysis/summary.csv",
        "figures/throughput.png", "figures/sources.json",
        "fingerprint/embedded/run1.json", "plan/embedded/run1.json",
        "config.resolved.yaml", "report.md", "report.html",
        "logs/rep/embedded/run1/rep1.log", "logs/rep/embedded/run1/rep1.server.log"]] + [
        archive.metadata_record(f"{SMOKE_R}/raw/embedded/run1/rep1.json"),
        archive.metadata_record(f"{SMOKE_R}/report.md"),
        "software/pip-freeze.txt", "code/git.json", "ARCHIVE.json", "MANIFEST.sha256",
    ]
    missing = [rel for rel in expected if rel not in data]
    assert not missing, missing
    if (results_dir(smoke) / "provenance.json").exists():
        assert f"{SMOKE_R}/provenance.json" in data
    code = json.loads(data["code/git.json"])
    assert code["commit"] and isinstance(code["dirty"], bool)
    assert ("code/git.diff" in data) == code["dirty"]
    assert not any(marker.encode() in blob for blob in data.values()), "an env var leaked"

    verified = subprocess.run([sys.executable, "-m", "slotbench", "archive-verify", str(tarball)],
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0 and verified.stdout.startswith("OK"), verified.stderr

    # re-render in an empty directory, far from the work dir, with no server anywhere
    assert llama_servers_under(str(cache)) == []
    render_cache = tmp_path / "render-cache"  # a managed server would assemble its model here
    render_cache.mkdir()
    out_dir = tmp_path / "render"
    env = os.environ | {"SLOTBENCH_CACHE": str(render_cache), "PYTHONUNBUFFERED": "1",
                        "PYTHONPATH": str(SCRIPTS)}  # this checkout's package
    cmd = [sys.executable, "-m", "slotbench", "archive-render", str(tarball), "--out", str(out_dir)]
    started = time.monotonic()
    rc, out, servers = wait_render(cmd, tmp_path, env, str(render_cache))
    print(f"re-render: {time.monotonic() - started:.1f} s\n" + out[-2500:])
    assert rc == 0, out[-5000:]
    assert servers == [], f"a llama-server ran during the re-render: {servers}"
    # nothing but the parse cache of the package's imports (slotbench.core.code): no model
    assert [p.name for p in render_cache.iterdir()] == [CACHE_FILE], (
        "the re-render prepared a model")
    ran = {line.split()[1].rstrip(":") for line in out.splitlines()
           if line.startswith(("localrule ", "rule ")) and line.rstrip().endswith(":")}
    assert {"consolidate", "report"} <= ran, ran
    assert not ran & SERVER_RULES, ran
    assert "all 0 tables" not in out and "tables are byte-identical to the archive" in out, out
    # and check it ourselves: the tables, byte for byte
    for rel in [f"{SMOKE_R}/{rel}" for rel in ["analysis/summary.csv", "checks/deviance.csv",
                                               "checks/positions.csv", "checks/serialisation.csv"]]:
        assert (out_dir / rel).read_bytes() == data[rel], rel
    assert rerender.markdown_tables((results_dir(out_dir) / "report.md").read_text()) == \
        rerender.markdown_tables(data[f"{SMOKE_R}/report.md"].decode())
    assert (results_dir(out_dir) / "report.html").stat().st_size > 0


# A smoke run's archive made by an older slotbench (commit ddd678b, when the package's modules
# still sat side by side in one folder): today's code must re-render it to the same tables.
OLDER_ARCHIVE = Path(__file__).parent / "data" / "smoke-archive-ddd678b.tar.gz"


def same_table(archived: bytes, path: Path) -> bool:
    """The re-rendered table holds the archived one: byte for byte, or (a table to which this
    version adds columns: the server's telemetry) every archived column equal, row for row."""
    new = path.read_bytes()
    if new == archived:
        return True
    if path.suffix == ".csv":
        return rerender.added_columns(archived.decode(), new.decode()) is not None
    if path.suffix != ".parquet":
        return False
    old_frame, new_frame = pd.read_parquet(io.BytesIO(archived)), pd.read_parquet(path)
    if not set(old_frame.columns) <= set(new_frame.columns):
        return False
    try:
        pd.testing.assert_frame_equal(new_frame[list(old_frame.columns)], old_frame)
    except AssertionError:
        return False
    return True


@pytest.mark.slow
def test_an_archive_made_by_an_older_slotbench_re_renders_to_byte_identical_tables(tmp_path):
    prefix, data = archive.verify(OLDER_ARCHIVE)
    assert json.loads(data["code/git.json"])["commit"].startswith("ddd678b")
    out_dir = tmp_path / "render"
    env = os.environ | {"SLOTBENCH_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1",
                        "PYTHONPATH": str(SCRIPTS)}  # this checkout's package
    proc = subprocess.run([sys.executable, "-m", "slotbench", "archive-render", str(OLDER_ARCHIVE),
                           "--out", str(out_dir)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "tables are byte-identical to the archive" in out, out[-3000:]
    # rendered as it was made, in results/ itself: no experiment's folder, and no note about
    # a result from before experiments had their own folders (it is one, on purpose)
    assert "--config old_layout=true" in out and "holds a result from before" not in out
    assert not (out_dir / "results/article").exists()
    # the tables byte for byte (a verdict's wording may name its constant now; its numbers not)
    tables = [rel for rel in data if rel.startswith("results/") and "/raw/" not in rel
              and (rel.endswith((".csv", ".parquet")) or rel.startswith("results/analysis/"))]
    assert len(tables) > 20, tables
    changed = [rel for rel in tables if not same_table(data[rel], out_dir / rel)]
    assert not changed, changed
    # measured before telemetry existed: nothing of it is guessed, it is "not assessable"
    cells = pd.read_parquet(out_dir / "results/cells.parquet")
    assert cells["server_batch"].isna().all() and cells["energy_j"].isna().all()
    assert cells["telemetry_note"].str.contains("before").all(), cells["telemetry_note"]
    assert "not assessable" in (out_dir / "results/report.md").read_text()
    # the report's tables: every archived row, unchanged and in order; this version adds rows
    # only for the checks it has that the older one had not
    old_md = rerender.markdown_tables(data["results/report.md"].decode())
    new_md = rerender.markdown_tables((out_dir / "results/report.md").read_text())
    assert len(new_md) == len(old_md)
    for old_table, new_table in zip(old_md, new_md):
        if old_table != new_table:
            added = rerender.added_rows(old_table, new_table)
            assert added and set(added.split("; ")) <= {rounds.TITLE, batching.TITLE}, added


def test_a_newer_report_table_may_add_rows_but_never_change_or_drop_one():
    """A check this version has and the archive's had not adds a row to the traps table; every
    archived row must still be there, unchanged and in order, or the table differs."""
    old = "| check | fired |\n| --- | --- |\n| Cache | no |\n| Burst | no |"
    added = "| check | fired |\n| --- | --- |\n| Cache | no |\n| Rounds | not assessable |\n| Burst | no |"
    assert rerender.added_rows(old, added) == "Rounds"
    assert rerender.added_rows(old, old) is None  # nothing added is not "adds"
    assert rerender.added_rows(old, added.replace("| Burst | no |", "| Burst | yes |")) is None
    assert rerender.added_rows(old, added.replace("| Cache | no |\n", "")) is None
    swapped = "| check | fired |\n| --- | --- |\n| Burst | no |\n| Cache | no |\n| Rounds | no |"
    assert rerender.added_rows(old, swapped) is None
    assert rerender.added_rows(old, added.replace("| check |", "| trap |")) is None
