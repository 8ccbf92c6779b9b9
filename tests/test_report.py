"""The report says what the operator gains and each user loses, refuses when it must, and traces
every table and figure back to cells and raw-file hashes."""

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

from slotbench import checks, prompts, report, sufficiency, thermal
from slotbench.cells import cell_label

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"synthetic-figure-bytes"
TARGET = "embedded"
ARMS = (1, 2, 4)
REPS = (0, 1)


def sha(run: str, rep: int) -> str:
    return f"{run}{rep}".encode().hex().ljust(64, "a")


def make_ratios(targets=(TARGET,)) -> pd.DataFrame:
    rows = []
    for target in targets:
        for rep in REPS:
            for position, arm in enumerate(ARMS[rep:] + ARMS[:rep]):
                rows.append(
                    {
                        "target": target,
                        "run": "run1",
                        "rep": rep,
                        "arm": arm,
                        "position": position,
                        "n_requests": 4,
                        "tokens_out": 180,
                        "wall_s": 3.0,
                        "agg_tps": 60.0,
                        "user_tps": 20.0,
                        "ttft_s": 0.5,
                        "raw_file": f"raw/run1/rep{rep}.json",
                        "raw_sha256": sha("run1", rep),
                    }
                )
    return pd.DataFrame(rows)


def make_summary(targets=(TARGET,)) -> pd.DataFrame:
    rows = []
    for target in targets:
        cells = ";".join(cell_label(target, "run1", rep, arm) for rep in REPS for arm in ARMS)
        hashes = ";".join(sha("run1", rep) for rep in REPS)
        common = {"target": target, "n_reps": 10, "cells": cells, "raw_sha256": hashes}
        rows.append(
            {
                **common,
                "arm": 1,
                "agg_tps": 47.0,
                "speedup": 1.0,
                "speedup_lo": 1.0,
                "speedup_hi": 1.0,
                "efficiency": 1.0,
                "user_tps": 47.0,
                "user_ratio": 1.0,
                "ttft_s": 0.30,
                "ttft_ratio": 1.0,
                "gen_gain": 1.0,
                "pipelining": 1.0,
            }
        )
        rows.append(
            {
                **common,
                "arm": 2,
                "agg_tps": 51.2,
                "speedup": 1.09,
                "speedup_lo": 1.05,
                "speedup_hi": 1.12,
                "efficiency": 0.545,
                "efficiency_lo": 0.525,
                "efficiency_hi": 0.56,
                "user_tps": 22.1,
                "user_ratio": 0.47,
                "user_ratio_lo": 0.45,
                "user_ratio_hi": 0.49,
                "ttft_s": 0.48,
                "ttft_ratio": 1.6,
                "ttft_ratio_lo": 1.5,
                "ttft_ratio_hi": 1.7,
                "gen_gain": 0.94,
                "gen_gain_lo": 0.92,
                "gen_gain_hi": 0.96,
                "pipelining": 1.16,
                "pipelining_lo": 1.12,
                "pipelining_hi": 1.2,
            }
        )
        rows.append(
            {
                **common,
                "arm": 4,
                "agg_tps": 65.3,
                "speedup": 1.39,
                "speedup_lo": 1.30,
                "speedup_hi": 1.45,
                "efficiency": 0.3475,
                "efficiency_lo": 0.31,
                "efficiency_hi": 0.38,
                "user_tps": 16.4,
                "user_ratio": 0.35,
                "user_ratio_lo": 0.30,
                "user_ratio_hi": 0.40,
                "ttft_s": 0.87,
                "ttft_ratio": 2.9,
                "ttft_ratio_lo": 2.6,
                "ttft_ratio_hi": 3.1,
                "gen_gain": 1.39,
                "gen_gain_lo": 1.33,
                "gen_gain_hi": 1.44,
                "pipelining": 1.0,
                "pipelining_lo": 0.98,
                "pipelining_hi": 1.03,
            }
        )
    return pd.DataFrame(rows)


DEVIANT = cell_label(TARGET, "run1", 1, 4)


def make_deviance(rows=True) -> pd.DataFrame:
    cols = [
        "target",
        "run",
        "rep",
        "arm",
        "position",
        "tokens_out",
        "modal_tokens",
        "deviation",
        "wall_s",
        "wall_effect",
        "agg_tps",
        "tps_effect",
        "cell",
        "raw_file",
        "raw_sha256",
    ]
    if not rows:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame(
        [
            [
                TARGET,
                "run1",
                1,
                4,
                0,
                233,
                180,
                0.2944,
                3.41,
                0.13,
                68.3,
                0.14,
                DEVIANT,
                "raw/run1/rep1.json",
                sha("run1", 1),
            ]
        ],
        columns=cols,
    )


def make_positions() -> pd.DataFrame:
    rows = []
    for arm in ARMS:
        for position in (0, 1, 2):
            rows.append(
                {
                    "target": TARGET,
                    "arm": arm,
                    "position": position,
                    "median_agg_tps": 40.0 + arm * 5 + position * 0.5,
                    "n_cells": 2,
                    "cells": cell_label(TARGET, "run1", 0, arm),
                }
            )
    return pd.DataFrame(rows)


def make_verdict(refused=False, bias=0.039) -> dict:
    return {
        "rotation_threshold": 0.1,
        "deviance_threshold": 0.05,
        "targets": {
            TARGET: {
                "rotation_bias": bias,
                "worst_arm": 2,
                "refused": refused,
                "reason": ("rotation bias 14.2% exceeds the 10% threshold" if refused else None),
                "arms": {str(a): {"spread": 0.01 * a, "positions_seen": [0, 1, 2]} for a in ARMS},
                "deviant_cells": 1,
                "modal_tokens": {"run1": 180},
            }
        },
    }


FINGERPRINT = {
    "target": TARGET,
    "run": "run1",
    "created_utc": "2025-01-01T00:00:00Z",
    "host": {"cpu_model": "Synthetic CPU 9000", "cores": 2, "memory_gb": 7.5, "os": "Linux"},
    "software": {"python": "3.12.1", "packages": {"pandas": "3.1.1"}},
    "server": {
        "backend": "llamacpp",
        "managed": True,
        "flags": {"parallel": 4, "ctx_size": 4096},
        "props": {"note": "<script>alert(1)</script>"},
    },
    "model": {"name": "gemma3-270m", "sha256": "f" * 64, "quantisation": "Q4_K_M"},
    "pipeline": {"commit": "deadbeef", "dirty": False},
    "config": {"arms": [1, 2, 4]},
}


@pytest.fixture
def figure_inputs(tmp_path):
    path = tmp_path / "figures" / "throughput.png"
    path.parent.mkdir()
    path.write_bytes(PNG_BYTES)
    sources = {
        "throughput": {
            "title": "Operator vs user",
            "file": "throughput.png",
            "caption": "Points are cells.",
            "cells": [cell_label(TARGET, "run1", 0, 2)],
            "raw_sha256": ["c0ffee" * 10 + "beef"],
        }
    }
    return sources, {"throughput": str(path)}


def build(figure_inputs, *, verdict=None, deviance=None, fingerprints=None):
    sources, paths = figure_inputs
    return report.build_report(
        make_summary(),
        make_ratios(),
        make_deviance() if deviance is None else deviance,
        make_positions(),
        verdict or make_verdict(),
        [FINGERPRINT] if fingerprints is None else fingerprints,
        sources,
        paths,
    )


def html_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_headline_table_has_the_right_numbers(figure_inputs):
    md, page = build(figure_inputs)
    expected_4 = (
        "| parallel-4 | 10 | 65.3 | 1.39× [1.30×, 1.45×] | 16.4 | −65% [−70%, −60%] | "
        "0.87 | 2.9× [2.6×, 3.1×] | 35% [31%, 38%] | 1.39× [1.33×, 1.44×] | "
        "1.00× [0.98×, 1.03×] |"
    )
    assert expected_4 in md
    assert "| parallel-2 | 10 | 51.2 | 1.09× [1.05×, 1.12×] | 22.1 | −53% [−55%, −51%] |" in md
    assert "| serial-1 | 10 | 47.0 | — | 47.0 | — | 0.30 |" in md
    for cell in (
        "parallel-4",
        "65.3",
        "1.39× [1.30×, 1.45×]",
        "−65% [−70%, −60%]",
        "35% [31%, 38%]",
    ):
        assert f"<td>{cell}</td>" in page


def test_headline_sentence_reads_like_the_article(figure_inputs):
    md, page = build(figure_inputs)
    sentence = (
        "Four-way concurrency buys the operator 39% more throughput. It costs each user 65% "
        "of their generation rate and multiplies time to first token by 2.9×."
    )
    assert sentence in md
    assert sentence in page
    assert md.index(sentence) < md.index("| parallel-4 |")


def test_batching_vs_pipelining_reading(figure_inputs):
    md, _ = build(figure_inputs)
    assert "At two-way the generation stage delivers 0.94×" in md
    assert "6% fewer tokens per second" in md
    assert "9% aggregate gain is therefore pipelining" in md
    assert "not batching" in md
    assert "At four-way the generation-side gain is 1.39× and the aggregate gain 1.39×" in md
    assert "batching is the whole story" in md


def test_speedup_interval_including_one_is_flagged():
    row = {
        "arm": 2,
        "speedup": 1.03,
        "speedup_lo": 0.97,
        "speedup_hi": 1.08,
        "user_ratio": 0.5,
        "ttft_ratio": 1.5,
    }
    assert "includes 1×" in report.headline_sentence(row)
    row.update(speedup=0.9, speedup_lo=0.85, speedup_hi=0.95, user_ratio=1.1, ttft_ratio=0.8)
    text = report.headline_sentence(row)
    assert "costs the operator 10% of its throughput" in text
    assert "gives each user 10% more" in text
    assert "includes 1×" not in text


@pytest.mark.parametrize(
    "verdict", [make_verdict(refused=True, bias=0.142), {"rotation_threshold": 0.1, "targets": {}}]
)
def test_refusal_comes_first_and_table_is_not_a_headline(figure_inputs, verdict):
    md, page = build(figure_inputs, verdict=verdict)
    for text in (md, html_text(page)):
        refusal = text.index("Refused: no headline for embedded")
        table = text.index("parallel-4")
        assert refusal < table
        assert "not a headline" in text.lower()
        assert text.lower().index("not a headline") < table
        assert "buys the operator" not in text
        assert "costs each user" not in text
        assert "batching is the whole story" not in text
    assert 'class="refusal"' in page
    assert 'class="not-headline"' in page
    if verdict["targets"]:
        assert "rotation bias 14.2% exceeds the 10% threshold" in md
        assert "That is above the 10% threshold" in md


def test_rotation_section(figure_inputs):
    md, _ = build(figure_inputs)
    assert "Rotation bias 3.9% (worst arm parallel-2)" in md
    assert "within the 10% threshold" in md
    assert "| parallel-4 | 60.0 (n=2) | 60.5 (n=2) | 61.0 (n=2) | 4.0% |" in md


def test_deviant_cells_are_named(figure_inputs):
    md, page = build(figure_inputs)
    line = (
        f"{DEVIANT} generated 233 tokens against a modal 180 (+29%); by the wall clock it was "
        "13% slower and its throughput 14% higher."
    )
    assert line in md
    assert f"| {DEVIANT} | 233 | 180 | +29% | 3.41 | +13% | 68.3 | +14% |" in md
    assert f"<td>{DEVIANT}</td>" in page
    assert "1 cell deviates more than 5%" in md
    assert "Sources: 1 cell: `embedded/run1/rep1/arm4`" in md


def test_no_deviance_sentence(figure_inputs):
    md, page = build(figure_inputs, deviance=make_deviance(rows=False))
    assert "No cell deviates more than 5% from its run's modal output." in md
    assert "No cell deviates more than 5% from its run&#x27;s modal output." in page
    assert "Deviant cells" not in md


def test_html_is_self_contained(figure_inputs):
    md, page = build(figure_inputs)
    assert "<link" not in page and "<script" not in page
    assert 'src="figures/' not in page
    srcs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert srcs, "the figure should be embedded"
    # nothing outside the page: embedded images, and links to anchors inside it
    assert all(s.startswith(("data:image/png;base64,", "#")) for s in srcs)
    ids = set(re.findall(r' id="([^"]*)"', page))
    assert {s[1:] for s in srcs if s.startswith("#")} <= ids
    assert "data:image/png;base64," + base64.b64encode(PNG_BYTES).decode() in page
    assert "http://" not in page and "https://" not in page
    # Markdown links the file relatively instead
    assert "![Operator vs user](figures/throughput.png)" in md
    assert "data:image" not in md


def test_fingerprint_is_flattened_and_escaped(figure_inputs):
    md, page = build(figure_inputs)
    for key, value in [
        ("host.cpu_model", "Synthetic CPU 9000"),
        ("server.flags.parallel", "4"),
        ("model.sha256", "f" * 64),
        ("software.packages.pandas", "3.1.1"),
        ("config.arms", "1, 2, 4"),
        ("pipeline.dirty", "False"),
    ]:
        assert f"| {key} | {value} |" in md
        assert f"<td>{key}</td><td>{value}</td>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "| server.props.note | &lt;script&gt;alert(1)&lt;/script&gt; |" in md
    assert "<script" not in md


def test_fingerprint_survives_new_keys(figure_inputs):
    fp = copy.deepcopy(FINGERPRINT)
    fp["gpu"] = {"devices": [{"name": "Imaginary GPU", "vram_gb": 8}], "driver": None}
    md, _ = build(figure_inputs, fingerprints=[fp])
    assert "| gpu.devices[0].name | Imaginary GPU |" in md
    assert "| gpu.driver | null |" in md


def test_every_table_and_figure_is_followed_by_sources(figure_inputs):
    sources, paths = figure_inputs
    blocks = report.build_blocks(
        make_summary(),
        make_ratios(),
        make_deviance(),
        make_positions(),
        make_verdict(),
        [FINGERPRINT],
        sources,
        paths,
    )
    kinds = [type(b).__name__ for b in blocks]
    # per-arm, positions, deviant cells, fingerprint and the integrity overview
    assert kinds.count("Table") == 5 and kinds.count("Figure") == 1
    for i, block in enumerate(blocks):
        if isinstance(block, (report.Table, report.Figure)):
            assert isinstance(blocks[i + 1], report.Sources), f"{block} has no sources"
            assert blocks[i + 1].cells and blocks[i + 1].hashes
    md, page = report.render_markdown(blocks), report.render_html(blocks)
    n_sources = kinds.count("Sources")
    assert md.count("Sources:") == n_sources
    assert page.count('<details class="sources">') == n_sources


def test_sources_name_cells_and_hashes(figure_inputs):
    md, page = build(figure_inputs)
    table_end = md.index("| parallel-4 |")
    summary_sources = md[table_end : md.index("### Rotation bias")]
    for rep in REPS:
        assert f"`{cell_label(TARGET, 'run1', rep, 4)}`" in summary_sources
        assert sha("run1", rep) in summary_sources
        assert f"<code>{sha('run1', rep)}</code>" in page
    assert "c0ffee" * 10 + "beef" in md  # the figure's own sources


def test_two_targets_get_their_own_sections(figure_inputs):
    sources, paths = figure_inputs
    verdict = make_verdict()
    verdict["targets"]["ollama"] = {
        **verdict["targets"][TARGET],
        "refused": True,
        "reason": "too few positions",
    }
    md, _ = report.build_report(
        make_summary((TARGET, "ollama")),
        make_ratios((TARGET, "ollama")),
        make_deviance(),
        make_positions(),
        verdict,
        [FINGERPRINT],
        sources,
        paths,
    )
    embedded = md[md.index("## Target: embedded") : md.index("## Target: ollama")]
    ollama = md[md.index("## Target: ollama") : md.index("## Figures")]
    assert "Four-way concurrency buys the operator" in embedded
    assert "Refused: no headline for ollama. Reason: too few positions" in ollama
    assert "buys the operator" not in ollama
    assert DEVIANT in embedded and DEVIANT not in ollama


def test_entry_point_writes_both_files(tmp_path, figure_inputs):
    sources, paths = figure_inputs
    res = tmp_path / "results"
    (res / "analysis").mkdir(parents=True)
    (res / "checks").mkdir()
    make_summary().to_csv(res / "analysis/summary.csv", index=False)
    make_ratios().to_parquet(res / "analysis/ratios.parquet")
    make_deviance(rows=False).to_csv(res / "checks/deviance.csv", index=False)
    make_positions().to_csv(res / "checks/positions.csv", index=False)
    make_serialisation({TARGET: {4}}).to_csv(res / "checks/serialisation.csv", index=False)
    (res / "checks/verdict.json").write_text(json.dumps(make_verdict()))
    (res / "figures.json").write_text(json.dumps(sources))
    (res / "fp.json").write_text(json.dumps(FINGERPRINT))
    make_requests().to_parquet(res / "requests.parquet")
    (res / "servers.json").write_text(json.dumps([]))
    cells = make_ratios().assign(code_commit="c0de" * 10, code_dirty=False, server_build="b 1")
    cells.to_parquet(res / "cells.parquet")
    # the integrity checks' files, all quiet: headers only, no thermal source, no self-check
    integrity = {
        "prompts": ("checks/prompts.csv", prompts.LENGTH_COLUMNS),
        "cache_hits": ("checks/cache_hits.csv", prompts.CACHE_COLUMNS),
        "control": ("checks/control.csv", ["target", "arm", "control_cells", "cells"]),
        "thermal_summary": ("checks/thermal.csv", thermal.SUMMARY_COLUMNS),
        "burst": ("checks/burst.csv", thermal.BURST_COLUMNS),
        "sufficiency": ("checks/sufficiency.csv", sufficiency.SUFFICIENCY_COLUMNS),
    }
    for rel, columns in integrity.values():
        pd.DataFrame(columns=columns).to_csv(res / rel, index=False)
    (res / "checks/client.json").write_text("{}")
    thermal.thermal_frame([]).to_parquet(res / "thermal.parquet")
    config = {"reps": 2, "checks": {"rotation_threshold": 0.1}}
    snakemake = SimpleNamespace(
        input=SimpleNamespace(
            summary=str(res / "analysis/summary.csv"),
            ratios=str(res / "analysis/ratios.parquet"),
            deviance=str(res / "checks/deviance.csv"),
            positions=str(res / "checks/positions.csv"),
            serialisation=str(res / "checks/serialisation.csv"),
            verdict=str(res / "checks/verdict.json"),
            sources=str(res / "figures.json"),
            figures=[paths["throughput"]],
            fingerprints=[str(res / "fp.json")],
            requests=str(res / "requests.parquet"),
            servers=str(res / "servers.json"),
            cells=str(res / "cells.parquet"),
            client=str(res / "checks/client.json"),
            thermal=str(res / "thermal.parquet"),
            **{name: str(res / rel) for name, (rel, _) in integrity.items()},
        ),
        output=SimpleNamespace(
            md=str(res / "report.md"),
            html=str(res / "report.html"),
            provenance=str(res / "provenance.json"),
        ),
        params=SimpleNamespace(config_sha256="f00d" * 16, resolved_config=config),
    )
    runpy.run_path(str(SCRIPTS / "report.py"))["main"](snakemake)
    md = (res / "report.md").read_text()
    page = (res / "report.html").read_text()
    # figures live in tmp_path/figures, the report in tmp_path/results
    assert "](../figures/throughput.png)" in md
    assert base64.b64encode(PNG_BYTES).decode() in page
    assert "Four-way concurrency buys the operator 39% more throughput." in page
    assert "Warning: parallel-4 was served one request at a time." in md
    assert "Timing source: server, for all 24 requests" in md
    assert f"Versions: all cells: commit {'c0de' * 10} (clean), server build b 1." in md
    assert "provenance: headline/embedded" in md and "## Resolved config" in md
    assert "### Measurement integrity" in md and "Control arm off: set control_arm: true" in md
    assert "Thermal state: no thermal source readable on this machine." in md
    record = json.loads((res / "provenance.json").read_text())
    assert record["config_sha256"] == "f00d" * 16
    assert record["entries"]["headline/embedded/arm4/speedup"]["code"] == [
        {"commit": "c0de" * 10, "dirty": False}
    ]


# --- serialisation, Ollama, timing source, pinned output length ---------------------------------


def make_requests(targets=(TARGET,), source=lambda target, arm: "server") -> pd.DataFrame:
    rows = [
        {"target": target, "run": "run1", "rep": rep, "arm": arm, "request": request,
         "timing_source": source(target, arm)}
        for target in targets for rep in REPS for arm in ARMS for request in range(4)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def make_serialisation(serialised: dict) -> pd.DataFrame:
    """Rows of checks.serialisation for arms 2 and 4; ``serialised`` = {target: {arms}}."""
    rows = []
    for target, arms in serialised.items():
        for arm in (2, 4):
            yes = arm in arms
            rows.append(
                {
                    "target": target, "arm": arm, "n_cells": 2,
                    "in_flight_median": float(arm), "max_overlap_median": 1.0 if yes else arm,
                    "serialised_cells": 2 if yes else 0,
                    "queue_gap_slope_s": 1.1 if yes else 0.0, "queue_gap_trend": 1.0,
                    "wait_slope_s": 1.05 if yes else 0.01, "wait_trend": 1.0, "serialised": yes,
                    "cause": checks.SERIALISED_CAUSE if yes else None,
                    "cells": ";".join(cell_label(target, "run1", rep, arm) for rep in REPS),
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=checks.SERIALISATION_COLUMNS)


def serialised_verdict(target=TARGET, arms=(4,)) -> dict:
    verdict = make_verdict()
    verdict["targets"][target] = {
        **verdict["targets"][TARGET],
        "serialisation": {
            str(a): {
                "serialised": a in arms,
                "max_overlap_median": 1.0 if a in arms else float(a),
                "queue_gap_slope_s": 1.1 if a in arms else 0.0,
                "cause": checks.SERIALISED_CAUSE if a in arms else None,
            }
            for a in (2, 4)
        },
    }
    return verdict


def build_full(figure_inputs, targets=(TARGET,), **kwargs):
    sources, paths = figure_inputs
    args = {
        "summary": make_summary(targets),
        "ratios": make_ratios(targets),
        "deviance": make_deviance(),
        "positions": make_positions(),
        "verdict": make_verdict(),
        "fingerprints": [FINGERPRINT],
        "figures_sources": sources,
        "figure_paths": paths,
    } | kwargs
    return report.build_report(**args)


def section(md: str, target: str) -> str:
    start = md.index(f"## Target: {target}")
    nxt = md.find("## Target: ", start + 1)
    return md[start : nxt if nxt != -1 else md.index("## Figures")]


def test_serialised_arm_is_warned_before_the_table_and_not_read_as_the_engine(figure_inputs):
    md, page = build_full(
        figure_inputs,
        verdict=serialised_verdict(),
        serialisation=make_serialisation({TARGET: {4}}),
        fingerprints=[OLLAMA_FP | {"target": TARGET}],
    )
    warning = (
        "Warning: parallel-4 was served one request at a time. In 2 of 2 cells no two of its "
        "requests were generating at once, although the client had 4 in flight; Ollama's own "
        "queue wait grew by 1.10 s for each place a request stood in the order of service."
    )
    for text in (md, html_text(page)):
        assert warning in text
        assert "Likely cause: OLLAMA_NUM_PARALLEL=1 (or a model architecture" in text
        assert "--parallel 1 on llama-server" in text and "not a property of the engine" in text
        assert "The stated setting is OLLAMA_NUM_PARALLEL=4" in text
        assert text.index(warning) < text.index("Four-way concurrency buys")
        assert text.index(warning) < text.index("parallel-4 | 10" if text is md else "Per-arm")
    assert "parallel-2 was served" not in md
    assert 'class="warning"' in page and "> ⚠ **Warning: parallel-4" in md
    # the four-way reading says why there is no batching instead of blaming the engine
    readings = md[md.index("### Batching or pipelining") : md.index("**Per-arm results**")]
    assert "batching is the whole story" not in readings
    four = next(line for line in readings.splitlines() if "At four-way" in line)
    assert "ran one request at a time" in four and "not what this engine's batching can do" in four
    assert "not batching" not in four and "Neither batching" not in four
    assert "At two-way the generation stage delivers 0.94×" in readings  # untouched
    assert "see the warning above): this is what that server setting costs" in md
    # the evidence table, with its sources
    assert "| parallel-4 | 2 | 4.0 | 1.0 | 2 | 1.100 | 1.050 | yes |" in md
    assert "| parallel-2 | 2 | 2.0 | 2.0 | 0 | 0.000 | 0.010 | no |" in md


def test_serialisation_warning_from_the_verdict_alone(figure_inputs):
    md, _ = build_full(figure_inputs, verdict=serialised_verdict())
    head = section(md, TARGET)
    assert "Warning: parallel-4 was served one request at a time." in head
    assert head.index("Warning: parallel-4") < head.index("| parallel-4 |")
    assert "Requests generating at once" not in md  # no detail without serialisation.csv


def test_no_warning_when_nothing_is_serialised(figure_inputs):
    md, page = build_full(
        figure_inputs, serialisation=make_serialisation({TARGET: set()}), verdict=make_verdict()
    )
    assert "Warning" not in md and 'class="warning"' not in page
    assert "| parallel-4 | 2 | 4.0 | 4.0 | 0 | 0.000 | 0.010 | no |" in md


def test_capped_slots_are_noted():
    rows = [
        {"arm": 4, "n_cells": 3, "in_flight_median": 4.0, "max_overlap_median": 2.0,
         "serialised_cells": 0, "serialised": False, "cells": "t/run1/rep0/arm4"}
    ]  # fmt: skip
    blocks = report.serialisation_blocks("t", rows, {"t/run1/rep0/arm4": "ab" * 32})
    assert "at most 2.0 requests were generating at once" in blocks[-1].items[0]


OLLAMA = "ollama"
PS_ENTRY = {
    "name": "gemma3:270m",
    "model": "gemma3:270m",
    "size": 1_000_000_000,
    "size_vram": 600_000_000,
    "context_length": 4096,
    "expires_at": "2025-01-01T00:30:00Z",
}
OLLAMA_FP = {
    "target": OLLAMA,
    "run": "run1",
    "host": {"cpu_model": "Synthetic GPU box"},
    "server": {
        "backend": "ollama",
        "managed": True,
        "version": "0.12.3",
        "model_tag": {"name": "gemma3:270m", "digest": "d" * 64, "size": 291_554_930},
        "show": {"details": {"quantization_level": "Q8_0", "parameter_size": "268.10M",
                             "family": "gemma3"}},  # fmt: skip
        "ps": [PS_ENTRY],
        "requested_num_ctx": 4096,
        "ollama_env": {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_CONTEXT_LENGTH": "4096"},
        "server_config_line": 'time=... level=INFO msg="server config" env="map[OLLAMA_NUM_PARALLEL:4]"',
    },
    "model": {"name": "gemma3:270m", "digest": "d" * 64, "size_bytes": 291_554_930,
              "quantisation": "Q8_0"},  # fmt: skip
    "config": {
        "target": {"name": OLLAMA, "backend": "ollama", "model": "gemma3:270m", "num_ctx": 4096},
        "measurement": {"num_predict": 256},
    },
}
LLAMA_FP = copy.deepcopy(FINGERPRINT) | {
    "config": {
        "target": {"name": TARGET, "backend": "llamacpp", "ignore_eos": True},
        "measurement": {"num_predict": 256},
    }
}


def server_state(rep, ps, target=OLLAMA):
    return {
        "target": target,
        "run": "run1",
        "rep": rep,
        "raw_file": f"raw/run1/rep{rep}.json",
        "server": {"backend": "ollama", "ps": ps},
    }


def test_ollama_section_facts_and_cpu_share_warning(figure_inputs):
    servers = [
        server_state(0, [PS_ENTRY]),
        # another client's model, entirely on the CPU: shown, but not our warning
        server_state(1, [PS_ENTRY, {**PS_ENTRY, "name": "llama3:8b", "model": "llama3:8b",
                                    "size_vram": 0}]),  # fmt: skip
    ]
    md, page = build_full(
        figure_inputs, targets=(OLLAMA,), fingerprints=[OLLAMA_FP], servers=servers
    )
    ours = section(md, OLLAMA)
    sec = ours[ours.index("### Ollama server") : ours.index("### Rotation bias")]
    for row in [
        "| version | 0.12.3 |",
        f"| digest | {'d' * 64} |",
        "| size | 291.6 MB (291554930 bytes) |",
        "| quantization_level | Q8_0 |",
        "| parameter_size | 268.10M |",
        "| family | gemma3 |",
        "| requested num_ctx | 4096 |",
        "| stated OLLAMA_NUM_PARALLEL | 4 |",
        "| stated OLLAMA_CONTEXT_LENGTH | 4096 |",
    ]:
        assert row in sec, row
    assert "server config line (managed server's log)" in sec and "server config" in sec
    assert (
        "| before run1 | gemma3:270m | 1.0 GB | 600.0 MB | 40% | 4096 | 2025-01-01T00:30:00Z |"
        in sec
    )
    assert "| after run1/rep0 | gemma3:270m |" in sec
    assert "| after run1/rep1 | llama3:8b | 1.0 GB | 0 B | 100% |" in sec
    warning = (
        "Warning: gemma3:270m was partly on the CPU: 40% of its 1.0 GB was in system memory, "
        "not VRAM (ollama ps: before run1, after run1/rep0, after run1/rep1)."
    )
    assert warning in sec
    assert sec.index(warning) < sec.index("| version |")
    assert "llama3:8b ran entirely on the CPU" not in md
    assert "context length of" not in md
    assert "<td>gemma3:270m</td>" in page


def test_ollama_entirely_on_cpu_and_context_mismatch(figure_inputs):
    fp = copy.deepcopy(OLLAMA_FP)
    fp["server"]["ps"] = [{**PS_ENTRY, "size_vram": 0}]
    servers = [server_state(0, [{**PS_ENTRY, "size_vram": 0, "context_length": 16384}])]
    md, page = build_full(figure_inputs, targets=(OLLAMA,), fingerprints=[fp], servers=servers)
    sec = section(md, OLLAMA)
    assert (
        "gemma3:270m ran entirely on the CPU: ollama ps reports none of its 1.0 GB in VRAM "
        "(before run1, after run1/rep0). These are CPU numbers."
    ) in sec
    assert "partly on the CPU" not in sec
    ctx = (
        "Warning: ollama ps reports a context length of 16384 for gemma3:270m (after run1/rep0), "
        "but the pipeline requested num_ctx 4096."
    )
    assert ctx in sec and "16384 is 4× 4096" in sec
    assert html_text(page).count("Warning: ollama ps reports a context length") == 1


def test_timing_source_lines(figure_inputs):
    md, _ = build_full(figure_inputs, requests=make_requests())
    assert (
        "Timing source: server, for all 24 requests: every per-user number (per-user tok/s, its "
        "change, gen_gain, pipelining) comes from the server's own generation timings."
    ) in md
    client = build_full(figure_inputs, requests=make_requests(source=lambda t, a: "client"))[0]
    assert "Timing source: client, for all 24 requests" in client
    assert (
        "comes from token arrival times measured on the client, because the server sent no timings"
        in client
    )
    mixed = build_full(
        figure_inputs,
        requests=make_requests(source=lambda t, a: "client" if a == 4 else "server"),
    )[0]
    assert (
        "Timing source (per-user numbers per arm): serial-1: server; parallel-2: server; "
        "parallel-4: client (client = derived from token arrival times"
    ) in mixed
    # the line sits with the per-arm table, inside the target's section
    head = section(mixed, TARGET)
    assert head.index("| parallel-4 |") < head.index("Timing source") < head.index("### Rotation")


def test_pinned_output_length_lines(figure_inputs):
    md, _ = build_full(figure_inputs, fingerprints=[LLAMA_FP])
    assert (
        "Output length pinned: yes. ignore_eos is set, so every request generates up to "
        "num_predict (256 tokens)"
    ) in md
    md, _ = build_full(figure_inputs)  # the plain fingerprint records no ignore_eos
    assert "Output length pinned: no (ignore_eos is not set)." in md
    md, _ = build_full(figure_inputs, targets=(OLLAMA,), fingerprints=[OLLAMA_FP])
    assert "Output length pinned: no. Ollama ignores ignore_eos, so output length cannot be" in md
    md, _ = build_full(figure_inputs, fingerprints=[])
    assert f"Output length pinned: unknown (no fingerprint recorded for {TARGET})." in md


def test_two_targets_with_different_backends_keep_their_own_facts(figure_inputs):
    sources, paths = figure_inputs
    verdict = serialised_verdict(OLLAMA, arms=(2, 4))
    verdict["targets"][TARGET] = make_verdict()["targets"][TARGET]
    md, page = build_full(
        figure_inputs,
        targets=(TARGET, OLLAMA),
        verdict=verdict,
        fingerprints=[LLAMA_FP, OLLAMA_FP],
        servers=[server_state(0, [PS_ENTRY])],
        requests=make_requests(
            (TARGET, OLLAMA), lambda t, a: "client" if t == OLLAMA else "server"
        ),
        serialisation=pd.concat(
            [make_serialisation({TARGET: set()}), make_serialisation({OLLAMA: {2, 4}})]
        ),
    )
    embedded, ollama = section(md, TARGET), section(md, OLLAMA)
    # llama.cpp target: pinned, server timings, no Ollama section, no warnings
    assert "Output length pinned: yes." in embedded
    assert "Timing source: server, for all 24 requests" in embedded
    assert "### Ollama server" not in embedded and "Warning" not in embedded
    assert "Four-way concurrency buys the operator 39% more throughput." in embedded
    assert "batching is the whole story" in embedded
    assert "| parallel-4 | 2 | 4.0 | 4.0 | 0 |" in embedded
    # Ollama target: its own facts, warnings and readings
    assert "Output length pinned: no. Ollama ignores ignore_eos" in ollama
    assert "Timing source: client, for all 24 requests" in ollama
    assert "### Ollama server" in ollama and "| version | 0.12.3 |" in ollama
    assert "Warning: gemma3:270m was partly on the CPU: 40%" in ollama
    for arm in ("parallel-2", "parallel-4"):
        warning = f"Warning: {arm} was served one request at a time."
        assert warning in ollama and ollama.index(warning) < ollama.index("| serial-1 |")
    assert "batching is the whole story" not in ollama
    assert "| parallel-4 | 2 | 4.0 | 1.0 | 2 | 1.100 | 1.050 | yes |" in ollama
    # the ps snapshot after rep0 belongs to the Ollama target only
    assert "after run1/rep0" in ollama and "after run1/rep0" not in embedded
    assert html_text(page).count("Warning: parallel-4 was served one request at a time.") == 1


def test_every_new_table_lists_its_sources(figure_inputs):
    sources, paths = figure_inputs
    blocks = report.build_blocks(
        make_summary((TARGET, OLLAMA)),
        make_ratios((TARGET, OLLAMA)),
        make_deviance(),
        make_positions(),
        serialised_verdict(OLLAMA),
        [LLAMA_FP, OLLAMA_FP],
        sources,
        paths,
        requests=make_requests((TARGET, OLLAMA)),
        servers=[server_state(0, [PS_ENTRY]), server_state(1, [])],
        serialisation=pd.concat(
            [make_serialisation({TARGET: set()}), make_serialisation({OLLAMA: {4}})]
        ),
    )
    titles = [b.title for b in blocks if isinstance(b, report.Table)]
    assert "Requests generating at once" in titles
    assert "Ollama facts of ollama/run1" in titles
    assert "Loaded models (ollama ps) before each run and after each rep" in titles
    for i, block in enumerate(blocks):
        if isinstance(block, (report.Table, report.Figure)):
            assert isinstance(blocks[i + 1], report.Sources), f"{block.title} has no sources"
            assert blocks[i + 1].cells and blocks[i + 1].hashes, block.title
    at = next(i for i, b in enumerate(blocks) if getattr(b, "title", "").startswith("Loaded"))
    ps_sources = blocks[at + 1]
    assert cell_label(OLLAMA, "run1", 1, 4) in ps_sources.cells
    assert all(c.startswith(f"{OLLAMA}/") for c in ps_sources.cells)
