"""The report presents what the analysis and the checks decided: the article's headline and its
decomposition, refusals first, the per-arm table with the configured interval level, each
target's own sections, the fingerprint, and sources for every table and figure.

The inputs come from the pipeline's own analysis and checks run on synthetic requests
(tests/synthetic.py); where a test needs the article's numbers, the summary shown is replaced.
"""

from __future__ import annotations

import base64
import copy
import html
import json
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import synthetic as syn
from slotbench import report
from slotbench.checks import run_checks, write_checks
from slotbench.provenance import cellsets
from slotbench.report.blocks import Figure, Sources, Table
from slotbench.workflow import config as sbconfig

pytestmark = pytest.mark.slow  # a synthetic run rendered through the real report: 1-2 s each

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"synthetic-figure-bytes"
TARGET = syn.TARGET


def article_summary(target=TARGET) -> pd.DataFrame:
    """The article's per-arm medians (1.2B Q4_K_M on a fanless M1), as analyse would write them."""
    common = {"target": target, "n_reps": 10, "ci": 0.95}
    rows = [
        common | {"arm": 1, "agg_tps": 47.0, "speedup": 1.0, "user_tps": 47.0, "ttft_s": 0.30},
        common | {"arm": 2, "agg_tps": 51.2, "speedup": 1.09, "speedup_lo": 1.05,
                  "speedup_hi": 1.12, "efficiency": 0.545, "efficiency_lo": 0.525,
                  "efficiency_hi": 0.56, "user_tps": 22.1, "user_ratio": 0.47,
                  "user_ratio_lo": 0.45, "user_ratio_hi": 0.49, "ttft_s": 0.48,
                  "ttft_ratio": 1.6, "ttft_ratio_lo": 1.5, "ttft_ratio_hi": 1.7,
                  "gen_gain": 0.94, "gen_gain_lo": 0.92, "gen_gain_hi": 0.96, "pipelining": 1.16,
                  "pipelining_lo": 1.12, "pipelining_hi": 1.2, "speedup_includes_one": False,
                  "decomposition": "pipelining"},
        common | {"arm": 4, "agg_tps": 65.3, "speedup": 1.39, "speedup_lo": 1.30,
                  "speedup_hi": 1.45, "efficiency": 0.3475, "efficiency_lo": 0.31,
                  "efficiency_hi": 0.38, "user_tps": 16.4, "user_ratio": 0.35,
                  "user_ratio_lo": 0.30, "user_ratio_hi": 0.40, "ttft_s": 0.87,
                  "ttft_ratio": 2.9, "ttft_ratio_lo": 2.6, "ttft_ratio_hi": 3.1,
                  "gen_gain": 1.39, "gen_gain_lo": 1.33, "gen_gain_hi": 1.44, "pipelining": 1.0,
                  "pipelining_lo": 0.98, "pipelining_hi": 1.03, "speedup_includes_one": False,
                  "decomposition": "batching"},
    ]
    return pd.DataFrame(rows)


@pytest.fixture
def figure(tmp_path):
    path = tmp_path / "figures" / "throughput.png"
    path.parent.mkdir()
    path.write_bytes(PNG_BYTES)
    sources = {"throughput": {"title": "Operator vs user", "file": "throughput.png",
                              "caption": "Points are cells.",
                              "cells": [f"{TARGET}/run1/rep1/arm2"]}}
    return sources, {"throughput": str(path)}


def article_report(figure=None, **kwargs):
    sources, paths = figure or ({}, {})
    md, page, record, data = syn.rendered(
        syn.make_requests(), summary_override=article_summary(), sources=sources, paths=paths,
        **kwargs,
    )
    return md, page


def html_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


# --- headline -----------------------------------------------------------------------------------


def test_headline_table_shows_the_analysed_numbers():
    requests = syn.make_requests()
    md, page, _, data = syn.rendered(requests)
    row = data.summary.set_index("arm").loc[4]
    expected = (
        f"| parallel-4 | 5 | {row['agg_tps']:.1f} | {row['speedup']:.2f}× "
        f"[{row['speedup_lo']:.2f}×, {row['speedup_hi']:.2f}×] | {row['user_tps']:.1f} |"
    )
    assert expected in md
    assert f"<td>{row['agg_tps']:.1f}</td>" in page
    serial = data.summary.set_index("arm").loc[1]
    assert f"| serial-1 | 5 | {serial['agg_tps']:.1f} | — | {serial['user_tps']:.1f} | — |" in md


def test_headline_sentence_and_decomposition_read_like_the_article():
    md, page = article_report()
    sentence = (
        "Four-way concurrency buys the operator 39% more throughput. It costs each user 65% "
        "of their generation rate and multiplies time to first token by 2.9×."
    )
    assert sentence in md and sentence in page
    assert md.index(sentence) < md.index("| parallel-4 |")
    assert "At two-way the generation stage delivers 0.94×" in md
    assert "6% fewer tokens per second" in md
    assert "9% aggregate gain is therefore pipelining" in md and "not batching" in md
    assert "At four-way the generation-side gain is 1.39× and the aggregate gain 1.39×" in md
    assert "batching is the whole story" in md


def test_the_analysis_decides_the_reading_and_whether_the_interval_includes_one():
    summary = article_summary()
    four = summary["arm"] == 4
    summary.loc[four, ["speedup", "speedup_lo", "speedup_hi", "speedup_includes_one"]] = [
        1.03,
        0.97,
        1.08,
        True,
    ]
    summary.loc[four, "decomposition"] = "batching-lost"
    md, _, _, _ = syn.rendered(syn.make_requests(), summary_override=summary)
    assert "The speedup's 95% interval (0.97× to 1.08×) includes 1×" in md
    assert "is lost outside the generation stage" in md
    assert "batching is the whole story" not in md


def test_interval_level_follows_the_config():
    md, page, _, _ = syn.rendered(syn.make_requests(), cfg=syn.config(analysis__ci=0.9))
    assert "speedup [90% CI]" in md and "with 90% bootstrap intervals" in md
    assert "value [90% CI]" in md and "90% bootstrap interval" in md
    assert "95%" not in md.split("## Figures")[0]
    assert "speedup [90% CI]" in page


def test_position_effect_refuses_first_and_marks_the_table():
    # every arm runs 30% slower whenever it goes first: arm order, not concurrency
    requests = syn.make_requests(reps=6, position_factor=lambda arm, pos: 1.3 if pos == 0 else 1)
    md, page, _, data = syn.rendered(requests)
    assert data.decision[TARGET]["status"] == "refused"
    for text in (md, html_text(page)):
        refusal = text.index("Refused: no headline for embedded. Reason: position bias")
        assert refusal < text.index("parallel-4")
        assert text.lower().index("not a headline") < text.index("parallel-4")
        assert "buys the operator" not in text and "batching is the whole story" not in text
    assert 'class="refusal"' in page and 'class="not-headline"' in page
    assert "above the 10% threshold and more than noise alone gives" in md


def test_no_verdicts_is_a_refusal_not_a_headline():
    data = syn.run(syn.make_requests())
    data.decision = {}
    md, _, _ = report.render(data)
    assert "Refused: no headline for embedded. Reason: the checks gave no verdict for it." in md
    assert "buys the operator" not in md


def test_rotation_section_shows_every_arm_at_every_position():
    md, _, _, data = syn.rendered(syn.make_requests(reps=6))
    rotation = next(v for v in data.verdicts if v["trap"] == "rotation_bias")
    assert f"Position moved aggregate tok/s by {rotation['evidence']['effect'] * 100:.1f}%" in md
    assert "the whole interval is below the 10% threshold" in md
    assert re.search(r"\| parallel-4 \| [\d.]+ \(n=2\) \| [\d.]+ \(n=2\) \| [\d.]+ \(n=2\) \|", md)


# --- deviance, sections, fingerprints ----------------------------------------------------------


def test_deviant_cell_is_named_with_its_effects():
    requests = syn.make_requests(tokens=lambda rep, arm: 80 if (rep, arm) == (2, 4) else 64)
    md, page, _, _ = syn.rendered(requests)
    assert re.search(r"\| embedded/run1/rep2/arm4 \| 320 \| 256 \| \+25% \|", md)
    assert "<td>embedded/run1/rep2/arm4</td>" in page
    assert "1 cell deviates more than 5%" in md
    assert "Sources: 1 cell: embedded/run1/rep2/arm4, 1 raw file" in md


def test_no_deviance_is_said():
    md, page, _, _ = syn.rendered(syn.make_requests())
    assert "No cell deviates more than 5% from its run's modal output." in md
    assert "No cell deviates more than 5% from its run&#x27;s modal output." in page
    assert "Deviant cells" not in md


def test_html_is_self_contained(figure):
    md, page = article_report(figure)
    assert "<link" not in page and "<script" not in page and 'src="figures/' not in page
    srcs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert all(s.startswith(("data:image/png;base64,", "#")) for s in srcs)
    ids = set(re.findall(r' id="([^"]*)"', page))
    assert {s[1:] for s in srcs if s.startswith("#")} <= ids
    assert "data:image/png;base64," + base64.b64encode(PNG_BYTES).decode() in page
    assert "http://" not in page and "https://" not in page
    assert "![throughput](figures/throughput.png)" in md and "data:image" not in md


def test_fingerprint_is_flattened_and_escaped():
    fp = syn.fingerprint(server={"props": {"note": "<script>alert(1)</script>"}})
    fp["gpu"] = {"devices": [{"name": "Imaginary GPU", "vram_gb": 8}], "driver": None}
    md, page, _, _ = syn.rendered(syn.make_requests(), fingerprints=[fp])
    for key, value in [
        ("client_host.cpu_model", "Synthetic CPU 9000"),
        ("server.flags.parallel", "4"),
        ("model.sha256", "f" * 64),
        ("pipeline.dirty", "False"),
        ("gpu.devices[0].name", "Imaginary GPU"),
        ("gpu.driver", "null"),
    ]:
        assert f"| {key} | {value} |" in md
        assert f"<td>{key}</td><td>{value}</td>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script" not in md


def test_every_table_and_figure_is_followed_by_its_sources(figure):
    sources, paths = figure
    data = syn.run(syn.make_requests(cached=(2, 4, 1)), sources=sources, paths=paths)
    blocks, _ = report.build_document(data)
    tables = [b for b in blocks if isinstance(b, (Table, Figure))]
    assert len(tables) > 8
    for i, block in enumerate(blocks):
        if isinstance(block, (Table, Figure)) and getattr(block, "title", "") != "Raw files":
            nxt = blocks[i + 1]
            assert isinstance(nxt, Sources), f"{block} has no sources"
            assert nxt.cells and nxt.hashes and nxt.prov and nxt.scope, block
    md, page, _ = report.render(data)
    n = sum(isinstance(b, Sources) for b in blocks)
    assert md.count("<sub>Sources:") == n and page.count('<details class="sources">') == n


def test_markdown_sources_are_compact_and_the_lists_are_there_once():
    md, page, _, data = syn.rendered(syn.make_requests())
    line = "<sub>Sources: 15 cells (all of embedded), 5 raw files — provenance id `headline/embedded`</sub>"
    assert line in md
    appendix = md[md.index("## Cells and raw files") :]
    for rep in range(1, 6):
        digest = syn.sha(TARGET, "run1", rep)
        # these synthetic hashes share their first 16 digits, so the Markdown keeps them whole
        assert md.count(digest) == 1
        assert f"| {syn.raw_path(TARGET, 'run1', rep)} | {digest} |" in appendix
        assert f"<code>{digest}</code>" in page
    assert "Each holds the cells arm1, arm2, arm4 of its rep." in appendix
    assert "embedded/run1/rep3/arm2" in page and "`embedded/run1/rep3/arm2`" not in md


def test_the_raw_files_table_names_each_hash_by_its_first_16_digits_in_markdown():
    import hashlib

    from slotbench.report.blocks import Table
    from slotbench.report.render_html import render_html
    from slotbench.report.render_md import render_markdown

    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(3)]
    table = Table("Raw files", ["raw file", "SHA-256"], [[f"rep{i}.json", d]
                                                         for i, d in enumerate(digests)],
                  kind="hashes")
    md, page = render_markdown([table]), render_html([table])
    for d in digests:
        assert f"| {d[:16]}… |" in md and d not in md and d in page


def test_two_targets_get_their_own_sections():
    requests = pd.concat([
        syn.make_requests(reps=6),
        syn.make_requests("other", reps=6, position_factor=lambda arm, pos: 1.4 if pos == 0
                          else 1.0)])
    md, _, _, _ = syn.rendered(requests)
    embedded, other = syn.section(md, TARGET), syn.section(md, "other")
    assert "Four-way concurrency" in embedded and "Refused" not in embedded
    assert "Refused: no headline for other" in other and "buys the operator" not in other
    assert "| Rotation bias | no position bias |" in embedded
    assert "| Rotation bias | position bias |" in other


def test_entry_point_reads_the_pipeline_files(tmp_path, figure):
    sources, paths = figure
    res = tmp_path / "results"
    (res / "analysis").mkdir(parents=True)
    requests = syn.make_requests()
    t = syn.tables(requests)
    t.summary.to_csv(res / "analysis/summary.csv", index=False)
    t.cells.to_parquet(res / "cells.parquet")
    cfg = syn.config()
    verdicts, details = run_checks(t, sbconfig.check_settings(cfg))
    write_checks(res / "checks", verdicts, details)
    (res / "sources.json").write_text(json.dumps(sources))
    (res / "fp.json").write_text(json.dumps(syn.fingerprint()))
    smk = SimpleNamespace(
        input={"summary": str(res / "analysis/summary.csv"), "checks": str(res / "checks"),
               "cells": str(res / "cells.parquet"), "sources": str(res / "sources.json"),
               "figures": [paths["throughput"]], "fingerprints": [str(res / "fp.json")]},
        output={"md": str(res / "report.md"), "html": str(res / "report.html"),
                "provenance": str(res / "provenance.json")},
        params=SimpleNamespace(config=cfg), log=[str(res / "report.log")],
    )
    runpy.run_path(str(SCRIPTS / "report.py"), init_globals={"snakemake": smk})
    md, page = (res / "report.md").read_text(), (res / "report.html").read_text()
    assert "](../figures/throughput.png)" in md  # figures beside results/, linked relatively
    # the report names the command that explains its ids, with its own folder
    assert f"`python -m slotbench explain ID --results {res.as_posix()}`" in md
    assert base64.b64encode(PNG_BYTES).decode() in page
    assert "Four-way concurrency" in md and "## Resolved config" in md
    assert "Timing source: server, for all 60 requests" in md
    assert f"Versions: all cells: commit {syn.COMMIT} (clean), server build {syn.BUILD}." in md
    record = json.loads((res / "provenance.json").read_text())
    assert record["entries"]["headline/embedded/arm4/speedup"]["code"] == [
        {"commit": syn.COMMIT, "dirty": False}
    ]


# --- serialisation, Ollama, timing source, pinned output length ---------------------------------


def test_serialised_arm_is_warned_before_the_table_and_not_read_as_the_engine():
    fp = syn.fingerprint(server={"backend": "llamacpp", "flags": {"parallel": 4}})
    md, page, _, _ = syn.rendered(syn.make_requests(slots=1), fingerprints=[fp])
    head = syn.section(md, TARGET)
    warning = ("Warning: parallel-4 was served one request at a time. In 5 of 5 cells no two of "
               "its requests were generating at once (SERIALISED_SHARE = 0.8, OVERLAP_TOLERANCE_S "
               "= 0.005, see docs/method.md#constants: the share of cells that decides it, and "
               "the gap within which two windows still count as one after the other), although "
               "the client had 4 in flight; time to first token grew by")
    assert warning in head and "Warning: parallel-2 was served one request at a time." in head
    assert "Likely cause: OLLAMA_NUM_PARALLEL=1 (or a model architecture" in head
    assert "The stated setting is --parallel 4" in head
    assert head.index(warning) < head.index("| parallel-4 |")
    assert "> ⚠ **Warning: parallel-4" in md and 'class="warning"' in page
    readings = head[head.index("### Batching or pipelining") : head.index("**Per-arm results**")]
    four = next(line for line in readings.splitlines() if "At four-way" in line)
    assert "ran one request at a time" in four and "not what this engine's batching can do" in four
    assert "see the warning above): this is what that server setting costs" in head
    assert re.search(r"\| parallel-4 \| 5 \| 4\.0 \| 1\.0 \| 5 \| n/a \| [\d.]+ \| yes \|", md)


def test_capped_slots_are_noted_not_serialised():
    md, _, _, _ = syn.rendered(syn.make_requests(slots=2))
    assert "Warning: parallel-4 was served" not in md
    assert "At parallel-4 at most 2.0 requests were generating at once in the median cell" in md


OLLAMA = "ollama"
PS_ENTRY = {"name": "gemma3:270m", "model": "gemma3:270m", "size": 1_000_000_000,
            "size_vram": 600_000_000, "context_length": 4096,
            "expires_at": "2025-01-01T00:30:00Z"}


def ollama_fp(ps=(PS_ENTRY,)) -> dict:
    return syn.fingerprint(OLLAMA, backend="ollama", server={
        "backend": "ollama", "version": "0.12.3",
        "model_tag": {"name": "gemma3:270m", "digest": "d" * 64, "size": 291_554_930},
        "show": {"details": {"quantization_level": "Q8_0", "parameter_size": "268.10M",
                             "family": "gemma3"}},
        "ps": list(ps), "requested_num_ctx": 4096,
        "ollama_env": {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_CONTEXT_LENGTH": "4096"},
        "server_config_line": 'level=INFO msg="server config" env="map[OLLAMA_NUM_PARALLEL:4]"',
    }, model={"name": "gemma3:270m", "digest": "d" * 64, "size_bytes": 291_554_930,
              "quantisation": "Q8_0"})


def server_state(rep, ps, target=OLLAMA):
    return {"target": target, "run": "run1", "rep": rep, "raw_file": f"raw/run1/rep{rep}.json",
            "server": {"backend": "ollama", "ps": ps}}


def test_ollama_section_facts_and_cpu_share_warning():
    other = {**PS_ENTRY, "name": "llama3:8b", "model": "llama3:8b", "size_vram": 0}
    servers = [server_state(1, [PS_ENTRY]), server_state(2, [PS_ENTRY, other])]
    md, page, _, _ = syn.rendered(syn.make_requests(OLLAMA, ollama=True),
                                  fingerprints=[ollama_fp()], servers=servers)
    sec = syn.section(md, OLLAMA)
    sec = sec[sec.index("#### Ollama server") :]
    for row in [
        "| version | 0.12.3 |",
        f"| digest | {'d' * 64} |",
        "| size | 291.6 MB (291554930 bytes) |",
        "| quantization_level | Q8_0 |",
        "| requested num_ctx | 4096 |",
        "| stated OLLAMA_NUM_PARALLEL | 4 |",
    ]:
        assert row in sec, row
    assert "| before run1 | gemma3:270m | 1.0 GB | 600.0 MB | 40% | 4096 |" in sec
    assert "| after run1/rep2 | llama3:8b | 1.0 GB | 0 B | 100% |" in sec
    warning = (
        "Warning: gemma3:270m was partly on the CPU: 40% of its 1.0 GB was in system "
        "memory, not VRAM (ollama ps: before run1, after run1/rep1, after run1/rep2)."
    )
    assert warning in sec and sec.index(warning) < sec.index("| version |")
    assert "llama3:8b ran entirely on the CPU" not in md
    assert syn.trap_row(md, "Model placement and context (Ollama)")[1] == "yes"
    assert "<td>gemma3:270m</td>" in page


def test_ollama_entirely_on_cpu_and_context_mismatch():
    on_cpu = {**PS_ENTRY, "size_vram": 0}
    servers = [server_state(1, [{**on_cpu, "context_length": 16384}])]
    md, page, _, _ = syn.rendered(
        syn.make_requests(OLLAMA, ollama=True), fingerprints=[ollama_fp([on_cpu])], servers=servers
    )
    sec = syn.section(md, OLLAMA)
    assert (
        "gemma3:270m ran entirely on the CPU: ollama ps reports none of its 1.0 GB in VRAM "
        "(before run1, after run1/rep1). These are CPU numbers."
    ) in sec
    assert (
        "Warning: ollama ps reports a context length of 16384 for gemma3:270m (after "
        "run1/rep1), but the pipeline requested num_ctx 4096."
    ) in sec
    assert "16384 is 4× 4096" in sec
    assert html_text(page).count("Warning: ollama ps reports a context length") == 1


def test_timing_source_lines():
    md = syn.rendered(syn.make_requests())[0]
    assert (
        "Timing source: server, for all 60 requests: every per-user number (per-user tok/s, "
        "its change, gen_gain, pipelining) comes from the server's own generation timings."
    ) in md
    client = syn.rendered(syn.make_requests(timing="client"))[0]
    assert "Timing source: client, for all 60 requests" in client
    assert (
        "token arrival times measured on the client, because the server sent no timings" in client
    )
    mixed = syn.rendered(syn.make_requests(timing=lambda arm: "client" if arm == 4 else "server"))[
        0
    ]
    assert (
        "Timing source (per-user numbers per arm): serial-1: server; parallel-2: server; "
        "parallel-4: client (client = derived from token arrival times"
    ) in mixed
    head = syn.section(mixed, TARGET)
    assert (
        head.index("| parallel-4 |") < head.index("Timing source") < head.index("### Measurement")
    )


def test_pinned_output_length_lines():
    pinned = syn.fingerprint()
    pinned["config"]["target"]["ignore_eos"] = True
    md = syn.rendered(syn.make_requests(), fingerprints=[pinned])[0]
    assert (
        "Output length pinned: yes. ignore_eos is set, so every request generates up to "
        f"num_predict ({syn.TOKENS} tokens)"
    ) in md
    assert (
        "Output length pinned: no (ignore_eos is not set)." in syn.rendered(syn.make_requests())[0]
    )
    md = syn.rendered(syn.make_requests(OLLAMA, ollama=True), fingerprints=[ollama_fp()])[0]
    assert "Output length pinned: no. Ollama ignores ignore_eos, so output length cannot be" in md
    md = syn.rendered(syn.make_requests(), fingerprints=[])[0]
    assert f"Output length pinned: unknown (no fingerprint recorded for {TARGET})." in md


def test_two_targets_with_different_backends_keep_their_own_facts():
    requests = pd.concat(
        [syn.make_requests(), syn.make_requests(OLLAMA, slots=1, ollama=True, timing="client")]
    )
    pinned = syn.fingerprint()
    pinned["config"]["target"]["ignore_eos"] = True
    md, page, _, _ = syn.rendered(requests, fingerprints=[pinned, ollama_fp()],
                                  servers=[server_state(1, [PS_ENTRY])])
    embedded, ollama = syn.section(md, TARGET), syn.section(md, OLLAMA)
    assert "Output length pinned: yes." in embedded and "Ollama server" not in embedded
    assert "Timing source: server, for all 60 requests" in embedded and "Warning" not in embedded
    assert "Output length pinned: no. Ollama ignores ignore_eos" in ollama
    assert "Timing source: client, for all 60 requests" in ollama
    assert "| version | 0.12.3 |" in ollama and "partly on the CPU: 40%" in ollama
    for arm in ("parallel-2", "parallel-4"):
        warning = f"Warning: {arm} was served one request at a time."
        assert warning in ollama and ollama.index(warning) < ollama.index("| serial-1 |")
    assert "after run1/rep1" in ollama and "after run1/rep1" not in embedded
    assert html_text(page).count("Warning: parallel-4 was served one request at a time.") == 1


def test_markdown_of_a_default_sized_run_stays_small():
    """Two runs of ten reps (the default experiment) with deviant cells: under 30 kB, while
    every table still names its cells through its provenance id."""
    requests = pd.concat([syn.make_requests(run=run, reps=10, tokens=lambda rep, arm: 60 + (
        9 if rep % 3 == 0 and arm == 2 else 0)) for run in ("run1", "run2")])
    md, _, record, _ = syn.rendered(requests, fingerprints=[
        syn.fingerprint(run="run1"), syn.fingerprint(run="run2")])
    assert len(md.encode()) < 30_000, len(md.encode())
    assert "Deviant cells" in md
    ids = re.findall(r"provenance id `([^`]+)`", md)
    assert ids and set(ids) <= set(record["entries"])
    assert all(cellsets.expand(record)["entries"][i]["cells"] for i in ids)


def test_the_servers_evidence_and_a_tokens_cost_sit_beside_the_users_rate():
    """The report's telemetry table gives each arm's batch per step, queue, joules and dollars
    per output token with intervals, beside the per-user rate; what the server did not expose
    reads "not assessable", never 0."""
    from slotbench.analysis import analyse

    requests = syn.make_requests()
    cells = syn.make_cells(requests)
    cells = cells.assign(server_batch=cells["arm"].astype(float), server_queue=0.0,
                         energy_j=cells["tokens_out"] * 0.25,
                         energy_source="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION from http://gpu/m")
    summary = analyse.summarise(analyse.with_costs(analyse.cell_ratios(cells), {syn.TARGET: 2.5}),
                                200, 0.95, 1)
    md, _, _, _ = syn.rendered(requests, cells=cells, summary=summary)
    part = syn.section(md, syn.TARGET)
    assert "### The server's own evidence and a token's cost" in part
    four = next(line for line in part.splitlines() if line.startswith("| parallel-4 | 4.00"))
    assert "| 0.250 [0.250, 0.250] |" in four, four
    cost = float(four.split("|")[5].split()[0])
    agg = float(summary.set_index("arm").loc[4, "agg_tps"])
    assert cost == pytest.approx(2.5 / 3600 / agg * 1e6, rel=0.05), (four, agg)
    assert "Energy from DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in part
    unpriced = analyse.summarise(analyse.cell_ratios(cells.assign(server_queue=float("nan"))),
                                 200, 0.95, 1)
    md, _, _, _ = syn.rendered(requests, cells=cells, summary=unpriced)
    four = next(line for line in syn.section(md, syn.TARGET).splitlines()
                if line.startswith("| parallel-4 | 4.00"))
    assert "not assessable (no usd_per_hour)" in four and "| not assessable |" in four, four
