"""Measurement integrity: for each trap the report says whether its detector fired and shows the
evidence, quietly when nothing fired and prominently when something did; every table keeps its
sources and provenance entry, and the HTML stays self-contained.

The inputs are made by the real building blocks (prompts, thermal, selfcheck, sufficiency,
analyse, checks) from synthetic requests, so the report is tested against the columns they write.
"""

from __future__ import annotations

import html
import json
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from slotbench import analyse, checks, prompts, provenance, report, selfcheck, sufficiency, thermal
from slotbench.cells import cell_label

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TARGET = "embedded"
RUN = "run1"
ARMS = (1, 2, 4)
REPS = (1, 2, 3, 4, 5)
PER_CELL = 4
PROMPT = 160
T0 = 1_750_000_000.0
# per-request generation rate of each arm (tok/s)
RATE = {1: 80.0, 2: 42.0, 4: 30.0}
# rep-to-rep wiggle of each arm's rate (percent), so the ratios have intervals of some width
NOISE = {1: (0, 1, 2, 0, 1), 2: (2, 0, 1, 1, 0), 4: (1, 2, 0, 2, 0)}
TOKENS = 64


def sha(rep: int) -> str:
    return f"{RUN}-rep{rep}".encode().hex().ljust(64, "0")


def raw_path(rep: int) -> str:
    return f"results/raw/{TARGET}/{RUN}/rep{rep}.json"


def make_requests(drift: float = 0.0, odd_prompt=None, cached=None) -> pd.DataFrame:
    """Requests of every cell, sent by a FIFO pool of the arm's width (no send lag).

    drift: fractional slow-down per rep (the machine heating up); odd_prompt / cached:
    (rep, arm, request) of one request with a longer prompt / a prompt served from the cache.
    """
    rows = []
    for rep in REPS:
        order = ARMS[rep % 3 :] + ARMS[: rep % 3]
        t = 0.0
        slow = 1 + drift * (rep - 1)
        for position, arm in enumerate(order):
            gen = TOKENS / (RATE[arm] * (1 + 0.01 * NOISE[arm][rep - 1])) * slow
            done: list[float] = []
            for request in range(PER_CELL):
                sent = t if request < arm else sorted(done)[request - arm]
                first = sent + 0.05
                done.append(first + gen)
                key = (rep, arm, request)
                cache_n = PROMPT - 1 if key == cached else 0
                prompt_tokens = PROMPT + 1 if key == odd_prompt else PROMPT
                rows.append(
                    {
                        "target": TARGET, "run": RUN, "rep": rep, "arm": arm,
                        "position": position, "request": request,
                        "prompt_tokens": prompt_tokens,
                        "output_tokens": TOKENS, "t_sent_s": sent, "t_first_s": first,
                        "t_done_s": first + gen, "gen_s": gen, "done_reason": "length",
                        "timing_source": "server", "cache_n": cache_n,
                        "prompt_n": prompt_tokens - cache_n, "control": False,
                    }
                )  # fmt: skip
            t = max(done) + 0.01
    return pd.DataFrame(rows)


def make_cells(requests: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (target, run, rep, arm, position), grp in requests.groupby(
        ["target", "run", "rep", "arm", "position"]
    ):
        wall = grp["t_done_s"].max() - grp["t_sent_s"].min()
        tokens = int(grp["output_tokens"].sum())
        start = grp["t_sent_s"].min()
        rows.append(
            {
                "target": target, "run": run, "rep": rep, "arm": arm, "position": position,
                "n_requests": len(grp), "tokens_out": tokens, "wall_s": wall,
                "agg_tps": tokens / wall,
                "user_tps": float((grp["output_tokens"] / grp["gen_s"]).median()),
                "ttft_s": float((grp["t_first_s"] - grp["t_sent_s"]).median()),
                "t_start_s": start, "t_start_unix": T0 + rep * 100 + start,
                "raw_file": raw_path(rep), "raw_sha256": sha(rep),
                "code_commit": "c" * 40, "code_dirty": False, "server_build": "b1",
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def thermal_rows(throttle_reps=(), source="linux") -> pd.DataFrame:
    """About 1 Hz samples during every rep: one thermal zone and two CPUs."""
    rows = []
    for rep in REPS:
        for i in range(6):
            t_s, t_unix = float(i), T0 + rep * 100 + i
            tags = {"target": TARGET, "run": RUN, "rep": rep, "t_s": t_s, "t_unix": t_unix}
            if source == "linux":
                rows.append(tags | thermal.reading("linux", "thermal_zone0/x86_pkg_temp",
                                                   temp_c=60.0 + rep + i))  # fmt: skip
            for cpu in (0, 1):
                hot = rep in throttle_reps and i >= 3 and cpu == 0
                rows.append(
                    tags
                    | thermal.reading(
                        source,
                        f"cpu{cpu}",
                        freq_mhz=2400.0 - (800.0 if hot else 0.0) - 10 * i,
                        throttled=(hot if i > 0 else None) if source == "linux" else None,
                        detail="throttled: core_throttle_count +2" if hot else None,
                    )
                )
    return thermal.thermal_frame(rows)


def control_label(rep: int, shared: bool) -> str:
    """A control cell's label: prompts.control_effect labels it like the measured cell of its
    rep and arm (shared); the report also takes a label of its own (…/rep<N>/control4)."""
    return cell_label(TARGET, RUN, rep, 4) if shared else f"{TARGET}/{RUN}/rep{rep}/control4"


def make_control(on, shared: bool = True) -> pd.DataFrame:
    if not on:
        return pd.DataFrame(columns=prompts.CONTROL_COLUMNS)
    control_cells = ";".join(control_label(rep, shared) for rep in REPS)
    measured = ";".join(cell_label(TARGET, RUN, rep, 4) for rep in REPS)
    return pd.DataFrame(
        [[TARGET, 4, len(REPS), 142.0, 107.0, 142.0 / 107.0 - 1, control_cells, measured]],
        columns=prompts.CONTROL_COLUMNS,
    )


def inputs(
    *,
    drift=0.0,
    odd_prompt=None,
    cached=None,
    control=False,
    shared_labels=True,
    throttle_reps=(),
    thermal_source="linux",
    cpu_s=0.0005,
    target_rel=0.05,
    fingerprint_measurement=None,
) -> dict:
    """Every input of build_document, computed the way the pipeline computes it."""
    requests = make_requests(drift, odd_prompt, cached)
    cells = make_cells(requests)
    ratios = analyse.cell_ratios(cells)
    summary = analyse.summarise(ratios, n_boot=200, seed=1)
    samples = (
        thermal_rows(throttle_reps, thermal_source) if thermal_source else thermal.thermal_frame([])
    )
    cell_cpu = cells[["target", "run", "rep", "arm"]].assign(client_cpu_s=cpu_s)
    measurement = {"num_predict": TOKENS, "cooldown_s": 0}
    measurement |= fingerprint_measurement or {}
    fingerprint = {
        "target": TARGET,
        "run": RUN,
        "config": {"target": {"name": TARGET, "backend": "llamacpp"}, "measurement": measurement},
    }
    return {
        "summary": summary,
        "ratios": ratios,
        "deviance": checks.deviance(cells, 0.05),
        "positions": checks.rotation_bias(cells, 0.10)[0],
        "verdict": checks.verdict(cells, 0.10, 0.05, requests),
        "fingerprints": [fingerprint],
        "figures_sources": {},
        "figure_paths": {},
        "requests": requests,
        "serialisation": checks.serialisation(requests),
        "cells": cells,
        "prompts": prompts.prompt_lengths(requests),
        "cache_hits": prompts.cache_hits(requests),
        "control": make_control(control, shared_labels),
        "thermal_summary": thermal.thermal_summary(samples),
        "burst": thermal.burst_vs_plateau(cells),
        "client": {TARGET: selfcheck.verdict(requests, cell_cpu)},
        "sufficiency": sufficiency.sufficiency(summary, target_rel=target_rel),
        "thermal": samples,
    }


def render(**kwargs):
    args = inputs(**kwargs)
    blocks, record = report.build_document(**args)
    return report.render_markdown(blocks), report.render_html(blocks), record, blocks


def integrity(md: str) -> str:
    start = md.index("### Measurement integrity")
    return md[start : md.index("## Figures")]


def html_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"\s+", " ", page)))


def overview_row(md: str, trap: str) -> list[str]:
    line = next(line for line in integrity(md).splitlines() if line.startswith(f"| {trap} |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


# --- quiet: nothing fired --------------------------------------------------------------------


def test_clean_run_is_quiet_and_says_so():
    md, page, record, _ = render()
    sec = integrity(md)
    assert "all prompts 160 tokens" in sec
    assert "no cache hits" in sec
    assert "client kept up" in sec and "The client kept up: p95 send lag 0.0 ms" in sec
    assert "every interval meets ±5% with 5 reps" in sec
    assert (
        "Control arm off: set control_arm: true to measure how much a shared prefix would "
        "inflate the parallel arms." in sec
    )
    assert "Cooldown between reps: none, 0 s (recorded in the fingerprint)." in sec
    assert "Thermal state: no throttling or thermal pressure reported in 30 samples" in sec
    assert "serial arm: burst " in sec and "tok/s (−" in sec or "tok/s (+" in sec
    for trap in (
        "Unequal prompt lengths",
        "Prefix-cache hits",
        "Thermal throttling",
        "Client distortion (self-check)",
        "Too few reps (interval width)",
        "Drift (serial arm, burst vs plateau)",
        "Rotation bias",
        "Output deviance",
    ):
        assert overview_row(md, trap)[1] == "no", trap
    assert overview_row(md, "Shared-prefix inflation (control arm)")[1] == "off"
    # nothing prominent anywhere
    assert "Warning" not in md and 'class="warning"' not in page
    for trap in ("prompts", "cache", "thermal", "burst", "client", "sufficiency"):
        assert f"integrity/{TARGET}/{trap}" in record["entries"], trap
    assert f"integrity/{TARGET}/control" not in record["entries"]
    # the quiet prompt evidence names the cells it looked at
    entry = record["entries"][f"integrity/{TARGET}/prompts"]
    assert len(entry["cells"]) == len(REPS) * len(ARMS)
    assert entry["parent"] == f"integrity/{TARGET}"


def test_tokenizer_use_is_reported_only_as_recorded():
    md, *_ = render()
    assert "is not recorded in the fingerprint; the equality stated here is measured" in md
    md, *_ = render(fingerprint_measurement={"tokenizer": "server"})
    assert "The plan equalised lengths with the server's own tokenizer (recorded" in md


# --- firing ------------------------------------------------------------------------------------


def test_unequal_prompt_is_named():
    md, page, record, _ = render(odd_prompt=(2, 4, 3))
    cell = cell_label(TARGET, RUN, 2, 4)
    row = overview_row(md, "Unequal prompt lengths")
    assert row[1] == "yes"
    assert f"e.g. {cell} request 3: 161 tokens, modal 160" in row[2]
    sec = integrity(md)
    assert (
        "> ⚠ **Warning: 1 measured request of 60 had a prompt length different from its "
        "run's modal 160 tokens" in sec
    )
    rid = f"integrity/{TARGET}/prompts/{RUN}/rep2/arm4/request3"
    assert f"| {cell} | 0 | 3 | 161 | 160 | +1 | {rid} |" in sec  # rep 2 runs arm 4 first
    assert record["entries"][rid]["kind"] == "table-row"
    assert [c["cell"] for c in record["entries"][rid]["cells"]] == [cell]
    assert record["entries"][rid]["raw_files"] == [{"path": raw_path(2), "sha256": sha(2)}]
    assert f'<tr id="{rid}">' in page


def test_cache_hit_is_named():
    md, page, record, _ = render(cached=(3, 2, 0))
    cell = cell_label(TARGET, RUN, 3, 2)
    row = overview_row(md, "Prefix-cache hits")
    assert row[1] == "yes" and cell in row[2]
    sec = integrity(md)
    assert (
        "Warning: 1 measured request of 60 was served, at least partly, from a prefix cache" in sec
    )
    assert f"| {cell} | 1 | 0 | 160 | 1 | 159 prompt tokens came from the cache (cache_n) |" in sec
    assert f"integrity/{TARGET}/cache/{RUN}/rep3/arm2/request0" in record["entries"]
    assert "no cache hits" not in sec


def test_distorted_client_is_warned_before_the_headline_table():
    md, page, record, _ = render(cpu_s=0.5)
    head = md[md.index(f"## Target: {TARGET}") :]
    warning = "> ⚠ **Warning: the client could have distorted these numbers: the client used"
    assert warning in head
    assert head.index(warning) < head.index("**Per-arm results**")
    text = html_text(page)
    assert text.index("Warning: the client could have distorted these numbers") < text.index(
        "Per-arm results"
    )
    row = overview_row(md, "Client distortion (self-check)")
    assert row[1] == "yes" and row[2].startswith("the client could have distorted these numbers")
    sec = integrity(md)
    assert (
        "| client CPU per streamed token |" in sec
        and "| 10% of an inter-token interval | yes |" in sec
    )
    assert "| send lag p95 (max) | 0.0 ms (max 0.0 ms) | 10.0 ms | no | none |" in sec
    entry = record["entries"][f"integrity/{TARGET}/client/cpu"]
    over = {c["cell"] for c in entry["cells"] if c["role"] == "deviant"}
    info = inputs(cpu_s=0.5)["client"][TARGET]
    assert over == set(info["cells_over_cpu"]) and info["worst_cpu_cell"] in over
    assert entry["metric"]["name"] == "cpu_share"


def test_thermal_throttle_events_are_counted_and_drift_shown():
    md, page, record, _ = render(throttle_reps=(4, 5), drift=0.03)
    sec = integrity(md)
    row = overview_row(md, "Thermal throttling")
    assert row[1] == "yes"
    assert row[2].startswith("6 throttle/pressure readings in 30 samples (first: run1 rep 4, 3.0 s")
    assert "Warning: the machine reported throttling or thermal pressure in 6 readings" in sec
    assert (
        "- run1 rep 4: 3 readings from 3.0 s into the rep (cpu0: throttled: core_throttle_count"
        in sec
    )
    assert f"| {RUN} | 30 | linux | 70.0 | 1550–2400 | 6 | rep 4 at 3.0 s | 0 |" in sec
    thermal_row = record["entries"][f"integrity/{TARGET}/thermal/{RUN}"]
    assert thermal_row["metric"]["value"] == 6
    assert {r["sha256"] for r in thermal_row["raw_files"]} == {sha(rep) for rep in REPS}
    # drift: the serial arm slowed by about 3% a rep
    drift = overview_row(md, "Drift (serial arm, burst vs plateau)")
    assert drift[1] == "yes"
    assert re.fullmatch(r"serial arm: burst \d+\.\d tok/s, plateau \d+\.\d tok/s \(−\d+\.\d%\)",
                        drift[2]), drift[2]  # fmt: skip
    assert "the article lost 8.2%" in sec
    burst = record["entries"][f"integrity/{TARGET}/burst"]
    roles = {c["role"] for c in burst["cells"]}
    assert roles == {"burst", "plateau"}
    assert burst["metric"]["text"].startswith("−")


def test_no_thermal_source_is_said_plainly():
    md, _, record, _ = render(thermal_source=None)
    sec = integrity(md)
    assert "Thermal state: no thermal source readable on this machine." in sec
    assert overview_row(md, "Thermal throttling")[1:3] == [
        "n/a (no source)",
        "no thermal source readable on this machine",
    ]
    assert f"integrity/{TARGET}/thermal" in record["entries"]


def test_clock_only_source_cannot_rule_throttling_out():
    md, *_ = render(thermal_source="cpuinfo")
    row = overview_row(md, "Thermal throttling")
    assert row[1] == "no (not observable)"
    assert "so zero events does not rule throttling out" in integrity(md)


def test_insufficient_reps_say_how_many_are_needed():
    md, page, record, _ = render(target_rel=0.001)
    row = overview_row(md, "Too few reps (interval width)")
    assert row[1] == "yes"
    assert re.match(
        r"\d+ of 10 intervals miss ±0\.1% with 5 reps; about \d+ reps would meet", row[2]
    )
    sec = integrity(md)
    line = next(line for line in sec.splitlines() if line.startswith("| parallel-4 | speedup |"))
    cols = [c.strip() for c in line.strip("|").split(" | ")]
    assert cols[2] == "5" and cols[5] == "±0.1%" and cols[6] == "no" and int(cols[7]) > 5
    assert cols[8] == f"integrity/{TARGET}/sufficiency/arm4/speedup"
    entry = record["entries"][f"integrity/{TARGET}/sufficiency/arm4/speedup"]
    roles = {c["role"] for c in entry["cells"]}
    assert roles == {"arm", "serial-baseline"}  # the ratio's own cells, with its denominators


# --- control arm -------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False], ids=["shared-labels", "own-labels"])
def test_control_line_is_separate_from_the_headline(shared):
    md, page, record, blocks = render(control=True, shared_labels=shared)
    line = (
        "Control (shared prompt, cache allowed): parallel-4 would have shown 142.0 tok/s instead "
        "of 107.0 tok/s (+33%) — not part of the headline."
    )
    assert line in integrity(md) and line in html_text(page)
    assert "Control arm off" not in md
    table = next(b for b in blocks if isinstance(b, report.Table) and b.title == "Per-arm results")
    assert all("142" not in cell for row in table.rows for cell in row)
    assert md.index(line) > md.index("**Per-arm results**")
    entry = record["entries"][f"integrity/{TARGET}/control"]
    roles = {}
    for c in entry["cells"]:
        roles.setdefault(c["role"], set()).add(c["cell"])
    assert roles["control"] == {control_label(rep, shared) for rep in REPS}
    assert roles["comparison"] == {cell_label(TARGET, RUN, rep, 4) for rep in REPS}
    # a control cell's raw file is its rep's
    assert {r["sha256"] for r in entry["raw_files"]} == {sha(rep) for rep in REPS}
    assert overview_row(md, "Shared-prefix inflation (control arm)")[2].startswith(
        "measured: a shared prompt would have shown +33% at parallel-4"
    )


# --- structure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"odd_prompt": (1, 1, 0), "cached": (2, 2, 1), "control": True, "cpu_s": 0.5,
          "throttle_reps": (3,), "drift": 0.03, "target_rel": 0.001}],
)  # fmt: skip
def test_every_integrity_table_has_sources_and_anchors(kwargs):
    md, page, record, blocks = render(**kwargs)
    for i, block in enumerate(blocks):
        if isinstance(block, report.Table):
            follow = blocks[i + 1]
            assert isinstance(follow, report.Sources), block.title
            assert follow.cells and follow.hashes and follow.prov == block.anchor, block.title
    ids = re.findall(r' id="([^"]*)"', page)
    assert len(ids) == len(set(ids)), "duplicate HTML ids"
    hrefs = set(re.findall(r'href="#([^"]*)"', page))
    assert hrefs <= set(ids), hrefs - set(ids)
    for eid, entry in record["entries"].items():
        assert f"prov-{eid}" in ids
        if entry["anchor"]:
            assert entry["anchor"] in ids, eid
    assert "<script" not in page and "<link" not in page
    assert all(s.startswith(("data:", "#")) for s in re.findall(r'(?:src|href)="([^"]*)"', page))
    overview = record["entries"][f"integrity/{TARGET}"]
    assert {f"integrity/{TARGET}/{t}" for t in ("prompts", "cache", "thermal", "client")} <= set(
        overview["children"]
    )
    assert provenance.dumps(record) == provenance.dumps(
        report.build_document(**inputs(**kwargs))[1]
    )


def test_missing_inputs_are_listed_as_not_checked(tmp_path):
    args = inputs()
    for name in report.INTEGRITY_INPUTS:
        args.pop(name)
    blocks, _ = report.build_document(**args)
    md = report.render_markdown(blocks)
    assert overview_row(md, "Unequal prompt lengths")[1:3] == [
        "not checked",
        "prompts.csv was not given",
    ]
    assert overview_row(md, "Client distortion (self-check)")[1] == "not checked"


def test_entry_point_reads_the_checks_files(tmp_path):
    args = inputs(control=False, thermal_source=None, odd_prompt=(1, 2, 0))
    res = tmp_path / "results"
    (res / "analysis").mkdir(parents=True)
    (res / "checks").mkdir()
    (res / "figures").mkdir()
    args["summary"].to_csv(res / "analysis/summary.csv", index=False)
    args["ratios"].to_parquet(res / "analysis/ratios.parquet")
    args["deviance"].to_csv(res / "checks/deviance.csv", index=False)
    args["positions"].to_csv(res / "checks/positions.csv", index=False)
    args["serialisation"].to_csv(res / "checks/serialisation.csv", index=False)
    (res / "checks/verdict.json").write_text(json.dumps(args["verdict"]))
    (res / "figures/sources.json").write_text("{}")
    (res / "fp.json").write_text(json.dumps(args["fingerprints"][0]))
    args["requests"].to_parquet(res / "requests.parquet")
    args["cells"].to_parquet(res / "cells.parquet")
    (res / "servers.json").write_text("[]")
    files = {
        "prompts": "checks/prompts.csv",
        "cache_hits": "checks/cache_hits.csv",
        "control": "checks/control.csv",
        "thermal_summary": "checks/thermal.csv",
        "burst": "checks/burst.csv",
        "sufficiency": "checks/sufficiency.csv",
    }
    for name, rel in files.items():
        args[name].to_csv(res / rel, index=False)
    (res / "checks/client.json").write_text(json.dumps(args["client"]))
    args["thermal"].to_parquet(res / "thermal.parquet")
    snakemake = SimpleNamespace(
        input=SimpleNamespace(
            summary=str(res / "analysis/summary.csv"),
            ratios=str(res / "analysis/ratios.parquet"),
            deviance=str(res / "checks/deviance.csv"),
            positions=str(res / "checks/positions.csv"),
            serialisation=str(res / "checks/serialisation.csv"),
            verdict=str(res / "checks/verdict.json"),
            sources=str(res / "figures/sources.json"),
            figures=[],
            fingerprints=[str(res / "fp.json")],
            requests=str(res / "requests.parquet"),
            servers=str(res / "servers.json"),
            cells=str(res / "cells.parquet"),
            client=str(res / "checks/client.json"),
            thermal=str(res / "thermal.parquet"),
            **{name: str(res / rel) for name, rel in files.items()},
        ),
        output=SimpleNamespace(
            md=str(res / "report.md"),
            html=str(res / "report.html"),
            provenance=str(res / "provenance.json"),
        ),
        params=SimpleNamespace(config_sha256="f00d" * 16, resolved_config={"reps": 5}),
    )
    runpy.run_path(str(SCRIPTS / "report.py"))["main"](snakemake)
    md = (res / "report.md").read_text()
    assert "### Measurement integrity" in md
    assert "Thermal state: no thermal source readable on this machine." in md
    assert "Control arm off: set control_arm: true" in md
    assert f"| {cell_label(TARGET, RUN, 1, 2)} | " in md  # the unequal prompt, from the CSV
    assert "client kept up" in md
    record = json.loads((res / "provenance.json").read_text())
    assert f"integrity/{TARGET}/sufficiency/arm2/gen_gain" in record["entries"]


def test_overview_links_each_trap_to_its_evidence():
    md, page, record, _ = render(odd_prompt=(1, 1, 0))
    for trap in ("prompts", "cache", "thermal", "burst", "client", "sufficiency"):
        eid = f"integrity/{TARGET}/{trap}"
        assert f'<td><a href="#prov-{eid}">{eid}</a></td>' in page, trap
        assert record["entries"][eid]["anchor"] == eid
    assert f'<td><a href="#prov-deviance/{TARGET}">' in page
    # the control arm is off: nothing to link to
    line = next(line for line in page.split("<tr>") if "Shared-prefix inflation" in line)
    assert "<a " not in line
