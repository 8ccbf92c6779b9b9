"""Measurement integrity: every trap's verdict in one table, quiet when nothing fired, prominent
when something did, "not assessable" when a check could not look; every table keeps its sources
and provenance entry.

The inputs come from the pipeline's own checks run on synthetic requests (tests/synthetic.py).
"""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest

import synthetic as syn
from slotbench import report
from slotbench.measure import thermal
from slotbench.provenance import cellsets, ids as provenance
from slotbench.report.blocks import Sources, Table

pytestmark = pytest.mark.slow  # a synthetic run rendered through the real report: 1-2 s each

TARGET, RUN = syn.TARGET, syn.RUN
T0 = syn.T0


def thermal_rows(throttle_reps=(), source="linux", reps=5) -> pd.DataFrame:
    """About 1 Hz samples during every rep: one thermal zone and two CPUs."""
    rows = []
    for rep in range(1, reps + 1):
        for i in range(6):
            tags = {"target": TARGET, "run": RUN, "rep": rep, "t_s": float(i),
                    "t_unix": T0 + rep * 100 + i}
            if source == "linux":
                rows.append(tags | thermal.reading("linux", "thermal_zone0/x86_pkg_temp",
                                                   temp_c=60.0 + rep + i))
            for cpu in (0, 1):
                hot = rep in throttle_reps and i >= 3 and cpu == 0
                rows.append(tags | thermal.reading(
                    source, f"cpu{cpu}", freq_mhz=2400.0 - (800.0 if hot else 0.0) - 10 * i,
                    throttled=(hot if i > 0 else None) if source == "linux" else None,
                    detail="throttled: core_throttle_count +2" if hot else None))
    return thermal.thermal_frame(rows)


def render(requests=None, *, throttle=(), source="linux", **kwargs):
    requests = syn.make_requests() if requests is None else requests
    samples = thermal_rows(throttle, source) if source else thermal.thermal_frame([])
    md, page, record, data = syn.rendered(requests, thermal=samples, **kwargs)
    return md, page, cellsets.expand(record), data  # every entry's cells listed


def integrity(md: str) -> str:
    return md[md.index("### Measurement integrity") : md.index("## Figures")]


def html_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"\s+", " ", page)))


row = syn.trap_row
THERMAL = "Thermal throttling (this machine: client and server)"


def test_clean_run_is_quiet_and_says_so():
    md, page, record, _ = render()
    sec = integrity(md)
    assert "all prompts 160 tokens (60 measured requests)" in sec
    assert "no cache hits in 60 measured requests" in sec and "client kept up" in sec
    assert "every interval meets ±5% with 5 reps" in sec
    assert "Control arm off: set control_arm: true to measure how much a shared prefix" in sec
    assert "Cooldown between reps: none, 0 s (recorded in the fingerprint)." in sec
    assert ("Thermal state of this machine (client and server): no throttling or thermal pressure "
            "reported in 30 samples") in sec
    for trap in (
        "Unequal prompt lengths",
        "Prefix-cache hits",
        "Thermal throttling (this machine: client and server)",
        "Client distortion (self-check)",
        "Too few reps (interval width)",
        "Drift (serial arm, burst vs plateau)",
        "Output deviance",
        "Serialised arm (server ran one request at a time)",
        "Mixed versions (code or server build)",
    ):
        assert row(md, trap)[1] == "no", trap
    assert row(md, "Shared-prefix inflation (control arm)")[1] == "off"
    assert row(md, "Rotation bias")[1:3] == ["no position bias", "10% (checks.rotation_threshold)"]
    assert row(md, "Drift (serial arm, burst vs plateau)")[2] == "5% (checks.drift_threshold)"
    assert "Warning" not in md and 'class="warning"' not in page
    for trap in ("prompts", "cache", "thermal", "burst", "client", "sufficiency"):
        assert f"integrity/{TARGET}/{trap}" in record["entries"], trap
    entry = record["entries"][f"integrity/{TARGET}/prompts"]
    assert len(entry["cells"]) == 15 and entry["parent"] == f"integrity/{TARGET}"


def test_tokenizer_use_is_reported_only_as_recorded():
    md = render()[0]
    assert "is not recorded in the fingerprint; the equality stated here is measured" in md
    fp = syn.fingerprint()
    fp["config"]["measurement"]["tokenizer"] = "server"
    md = render(fingerprints=[fp])[0]
    assert "The plan equalised lengths with the server's own tokenizer (recorded" in md


def test_unequal_prompt_is_named():
    md, page, record, _ = render(syn.make_requests(odd_prompt=(2, 4, 3)))
    cell = f"{TARGET}/{RUN}/rep2/arm4"
    r = row(md, "Unequal prompt lengths")
    assert r[1] == "yes" and f"e.g. {cell} request 3: 161 tokens, modal 160" in r[3]
    sec = integrity(md)
    assert (
        "> ⚠ **Warning: 1 measured request of 60 had a prompt length different from its "
        "run's modal 160 tokens"
    ) in sec
    rid = f"integrity/{TARGET}/prompts/{RUN}/rep2/arm4/request3"
    assert f"| {cell} | 0 | 3 | 161 | 160 | +1 | {rid} |" in sec  # rep 2 runs arm 4 first
    assert [c["cell"] for c in record["entries"][rid]["cells"]] == [cell]
    assert record["entries"][rid]["raw_files"] == [
        {"path": syn.raw_path(TARGET, RUN, 2), "sha256": syn.sha(TARGET, RUN, 2)}
    ]
    assert f'<tr id="{rid}">' in page


def test_cache_hit_is_named():
    md, _, record, _ = render(syn.make_requests(cached=(3, 2, 0)))
    cell = f"{TARGET}/{RUN}/rep3/arm2"
    r = row(md, "Prefix-cache hits")
    assert r[1] == "yes" and cell in r[3]
    sec = integrity(md)
    assert (
        "Warning: 1 measured request of 60 was served, at least partly, from a prefix cache" in sec
    )
    assert f"| {cell} | 1 | 0 | 160 | 1 | 159 prompt tokens came from the cache (cache_n) |" in sec
    assert f"integrity/{TARGET}/cache/{RUN}/rep3/arm2/request0" in record["entries"]


def test_distorted_client_is_warned_before_the_headline_table():
    requests = syn.make_requests()
    cells = syn.make_cells(requests, cpu_s=0.02)
    md, page, record, data = render(requests, cells=cells)
    head = syn.section(md, TARGET)
    warning = "> ⚠ **Warning: the client could have distorted these numbers: the client used"
    assert warning in head and head.index(warning) < head.index("**Per-arm results**")
    text = html_text(page)
    assert text.index("the client could have distorted these numbers") < text.index("Per-arm")
    r = row(md, "Client distortion (self-check)")
    assert r[1] == "yes" and r[3].startswith("the client could have distorted these numbers")
    assert "| 10% of an inter-token interval | yes |" in integrity(md)
    entry = record["entries"][f"integrity/{TARGET}/client/cpu"]
    client = next(v for v in data.verdicts if v["trap"] == "client")
    over = {c["cell"] for c in entry["cells"] if c["role"] == "deviant"}
    assert over == set(client["evidence"]["cells_over_cpu"]) and over


def test_thermal_throttle_events_are_counted_and_drift_shown():
    md, _, record, _ = render(syn.make_requests(drift=0.03), throttle=(4, 5))
    sec = integrity(md)
    r = row(md, THERMAL)
    assert r[1] == "yes"
    assert r[3].startswith("6 throttle/pressure readings in 30 samples (first: run1 rep 4, 3.0 s")
    assert ("Warning: this machine (client and server) reported throttling or thermal pressure in "
            "6 readings") in sec
    assert "- run1 rep 4: 3 readings from 3.0 s into the rep (cpu0: throttled: core_throttle" in sec
    assert f"| {RUN} | 30 | linux | 70.0 | 1550–2400 | 6 | rep 4 at 3.0 s | 0 |" in sec
    assert record["entries"][f"integrity/{TARGET}/thermal/{RUN}"]["metric"]["value"] == 6
    drift = row(md, "Drift (serial arm, burst vs plateau)")
    assert drift[1] == "yes"
    assert re.fullmatch(r"serial arm: burst \d+\.\d tok/s, plateau \d+\.\d tok/s \(−\d+\.\d%\)",
                        drift[3]), drift[3]
    burst = record["entries"][f"integrity/{TARGET}/burst"]
    assert {c["role"] for c in burst["cells"]} == {"burst", "plateau"}


def test_drift_threshold_is_the_config_key():
    requests = syn.make_requests(drift=0.03)
    assert row(render(requests)[0], "Drift (serial arm, burst vs plateau)")[1] == "yes"
    md = render(requests, cfg=syn.config(checks__drift_threshold=0.5))[0]
    assert row(md, "Drift (serial arm, burst vs plateau)")[1:3] == [
        "no",
        "50% (checks.drift_threshold)",
    ]


def test_no_thermal_source_is_not_assessable():
    md, _, record, data = render(source=None)
    assert ("Thermal state of this machine (client and server): no thermal source readable on "
            "it.") in integrity(md)
    assert row(md, THERMAL)[1] == "not assessable"
    verdict = next(v for v in data.verdicts if v["trap"] == "thermal")
    assert verdict["assessable"] is False and verdict["fired"] is False
    assert f"integrity/{TARGET}/thermal" in record["entries"]


def test_clock_only_source_cannot_rule_throttling_out():
    md = render(source="cpuinfo")[0]
    assert row(md, THERMAL)[1] == "not assessable"
    assert "so zero events does not rule throttling out" in integrity(md)


def test_insufficient_reps_say_how_many_are_needed():
    md, _, record, _ = render(cfg=syn.config(checks__precision=0.001))
    r = row(md, "Too few reps (interval width)")
    assert r[1] == "yes"
    assert re.match(r"\d+ of 10 intervals miss ±0\.1% with 5 reps; about \d+ reps would meet", r[3])
    line = next(line for line in integrity(md).splitlines()
                if line.startswith("| parallel-4 | speedup |"))
    cols = [c.strip() for c in line.strip("|").split(" | ")]
    assert cols[2] == "5" and cols[5] == "±0.1%" and cols[6] == "no" and int(cols[7]) > 5
    entry = record["entries"][f"integrity/{TARGET}/sufficiency/arm4/speedup"]
    assert {c["role"] for c in entry["cells"]} == {"arm", "serial-baseline"}


def test_control_line_is_separate_from_the_headline():
    requests = syn.make_requests()
    control = syn.make_cells(syn.make_requests(rate={1: 80.0, 2: 42.0, 4: 45.0}))
    control = control[control["arm"] == 4].assign(control=True)
    md, page, record, data = render(requests, control=control)
    verdict = next(v for v in data.verdicts if v["trap"] == "control")
    line = verdict["sentence"]
    assert line.startswith("Control (shared prompt, cache allowed): parallel-4 would have shown")
    assert "— not part of the headline." in line
    assert line in integrity(md) and line in html_text(page)
    assert md.index(line) > md.index("**Per-arm results**") and "Control arm off" not in md
    entry = record["entries"][f"integrity/{TARGET}/control"]
    roles = {}
    for c in entry["cells"]:
        roles.setdefault(c["role"], set()).add(c["cell"])
    assert (
        roles["control"]
        == roles["comparison"]
        == {f"{TARGET}/{RUN}/rep{rep}/arm4" for rep in range(1, 6)}
    )
    assert row(md, "Shared-prefix inflation (control arm)")[3].startswith(
        "measured: a shared prompt would have shown +"
    )


@pytest.mark.parametrize("kwargs", [{}, {"odd_prompt": (1, 1, 0), "cached": (2, 2, 1),
                                         "drift": 0.03}])
def test_every_integrity_table_has_sources_and_anchors(kwargs):
    requests = syn.make_requests(**kwargs)
    data = syn.run(
        requests,
        thermal=thermal_rows((3,)),
        cells=syn.make_cells(requests, cpu_s=0.02),
        cfg=syn.config(checks__precision=0.001),
    )
    blocks, record = report.build_document(data)
    md, page, _ = report.render(data)
    for i, block in enumerate(blocks):
        if isinstance(block, Table) and block.title != "Raw files":
            follow = blocks[i + 1]
            assert isinstance(follow, Sources), block.title
            assert follow.cells and follow.hashes and follow.prov == block.anchor, block.title
    ids = re.findall(r' id="([^"]*)"', page)
    assert len(ids) == len(set(ids)), "duplicate HTML ids"
    assert set(re.findall(r'href="#([^"]*)"', page)) <= set(ids)
    for eid, entry in record["entries"].items():
        assert f"prov-{eid}" in ids and (not entry["anchor"] or entry["anchor"] in ids), eid
    overview = record["entries"][f"integrity/{TARGET}"]
    assert {f"integrity/{TARGET}/{t}" for t in ("prompts", "cache", "thermal", "client")} <= set(
        overview["children"]
    )
    assert provenance.dumps(record) == provenance.dumps(report.build_document(data)[1])


def test_overview_links_each_trap_to_its_evidence():
    md, page, record, _ = render(syn.make_requests(odd_prompt=(1, 1, 0)))
    for trap in ("prompts", "cache", "thermal", "burst", "client", "sufficiency"):
        eid = f"integrity/{TARGET}/{trap}"
        assert f'<td><a href="#prov-{eid}">{eid}</a></td>' in page, trap
        assert record["entries"][eid]["anchor"] == eid
    assert f'<td><a href="#prov-deviance/{TARGET}">' in page
    line = next(line for line in page.split("<tr>") if "Shared-prefix inflation" in line)
    assert "<a " not in line  # the control arm is off: nothing to link to
