"""Assembling the report from what the earlier stages wrote: summary.csv (the numbers), the
open loop's openloop.json (a section only with rate arms), a grid of workloads' frontier.json (a
section only with a grid), the checks' verdicts and headline
decision, the figures and their sources, the fingerprints, and cells.parquet for the provenance
of every cell. It computes nothing and decides nothing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from slotbench.checks import read_verdicts
from slotbench.core import defaults
from slotbench.core.cells import arm_name
from slotbench.provenance import ids as prov
from slotbench.report.across import blocks as across_blocks
from slotbench.report.blocks import Bullets, Heading, Paragraph, Sources
from slotbench.report.capacity import blocks as capacity_blocks
from slotbench.report.frontier import blocks as frontier_blocks
from slotbench.report.headline import ci_label, headline_blocks
from slotbench.report.openloop import blocks as openloop_blocks
from slotbench.report.openloop import general_figures
from slotbench.report.stopping import blocks as stopping_blocks
from slotbench.report.stopping import split_arms
from slotbench.report.workload import blocks as workload_blocks
from slotbench.workflow.stopping import settings as stopping_settings
from slotbench.report.paired import blocks as paired_blocks
from slotbench.report.render_html import render_html
from slotbench.report.render_md import render_markdown
from slotbench.report.telemetry import blocks as telemetry_blocks
from slotbench.report.sections import (
    config_blocks,
    figure_blocks,
    fingerprint_blocks,
    model_line,
    model_warnings,
    pinned_line,
    provenance_blocks,
    raw_files_blocks,
    timing_source_line,
)
from slotbench.report.traps import TargetContext, trap_blocks


@dataclass
class ReportData:
    """Everything the report presents (see load)."""

    summary: pd.DataFrame
    verdicts: list[dict]
    decision: dict
    cells: pd.DataFrame
    fingerprints: list[dict] = field(default_factory=list)
    figures_sources: dict = field(default_factory=dict)
    figure_paths: dict = field(default_factory=dict)
    config: dict | None = None
    image_dir: str = "figures"
    capacity: dict = field(default_factory=dict)  # analysis/capacity.json
    openloop: dict = field(default_factory=dict)  # analysis/openloop.json
    paired: dict = field(default_factory=dict)  # analysis/paired.json (design: paired)
    paired_figure: str | None = None
    workload: dict = field(default_factory=dict)  # analysis/workload.json (a workload's lengths)
    frontier: dict = field(default_factory=dict)  # analysis/frontier.json (a grid of workloads)
    stopping: pd.DataFrame | None = None  # analysis/stopping.csv (reps: auto): the looks' trail
    results: str = "results/<experiment>"  # the experiment's folder: the report's own

    @property
    def explain(self) -> str:
        """The command that explains a provenance id of this report."""
        return f"python -m slotbench explain ID --results {self.results}"

    @property
    def ci(self) -> float:
        """The intervals' level: the config's analysis.ci (the schema's without a config)."""
        return float(defaults.value((self.config or {}).get("analysis"), "analysis.ci"))

    @property
    def ci_label(self) -> str:
        """The intervals' level as the report writes it: "95%", or with reps: auto "95%
        sequential" (a confidence sequence: valid although its width decided the stop)."""
        return ci_label(self.ci, sequential=self.stopping is not None)


def load(inputs: dict, config: dict | None = None, md_out: str | None = None) -> ReportData:
    """ReportData from the pipeline's files: ``inputs`` maps summary, checks (the directory),
    cells, sources, figures (PNG paths) and fingerprints (paths) to where they are."""
    sources = json.loads(Path(inputs["sources"]).read_text())
    by_name = {Path(p).name: str(p) for p in inputs.get("figures", [])}
    paths = {fid: by_name[s["file"]] for fid, s in sources.items() if s.get("file") in by_name}
    image_dir = "figures"
    if by_name and md_out is not None:
        image_dir = os.path.relpath(Path(next(iter(by_name.values()))).parent,
                                    Path(md_out).parent).replace(os.sep, "/")
    checks = Path(inputs["checks"])
    return ReportData(
        summary=pd.read_csv(inputs["summary"]),
        verdicts=read_verdicts(checks),
        decision=json.loads((checks / "headline.json").read_text()),
        cells=pd.read_parquet(inputs["cells"]),
        fingerprints=[json.loads(Path(p).read_text()) for p in inputs.get("fingerprints", [])],
        figures_sources=sources, figure_paths=paths, config=config,
        image_dir="" if image_dir == "." else image_dir,
        capacity=json.loads(Path(inputs["capacity"]).read_text()) if inputs.get("capacity")
        else {},
        openloop=json.loads(Path(inputs["openloop"]).read_text()) if inputs.get("openloop")
        else {},
        paired=json.loads(Path(inputs["paired"]).read_text()) if inputs.get("paired") else {},
        paired_figure=str(inputs["paired_figure"]) if inputs.get("paired_figure") else None,
        workload=json.loads(Path(inputs["workload"]).read_text()) if inputs.get("workload")
        else {},
        frontier=json.loads(Path(inputs["frontier"]).read_text()) if inputs.get("frontier")
        else {},
        stopping=pd.read_csv(inputs["stopping"]) if inputs.get("stopping") else None,
        results=(Path(md_out).parent.as_posix() if md_out is not None
                 else ReportData.results),
    )


def _intro(data: ReportData, targets: list[str]) -> list:
    n_req = sorted(set(data.cells["n_requests"].dropna().astype(int))) if len(data.cells) else []
    if len(n_req) == 1:
        same = f"Every arm sends the same {n_req[0]} requests; arms differ only in how many are"
    else:  # requests_per_cell per arm: a wide arm runs several rounds
        per_arm = (data.config or {}).get("requests_per_cell")
        listed = (" (" + ", ".join(f"{n} in {arm_name(a)}" for a, n in sorted(
            per_arm.items(), key=lambda kv: int(kv[0]))) + ")") if isinstance(per_arm, dict) else ""
        same = (f"Every arm sends requests of the same kind and length{listed}; arms differ in "
                "how many are")
    return [
        Heading(1, "slotbench: what concurrency does to an inference server"),
        Paragraph(
            f"{same} in flight at once, so "
            "serial-1 is the queueing control. Arm order rotates by rep. Throughput is tokens "
            "actually produced over the wall clock that produced them. Two numbers move in "
            "opposite directions: aggregate tok/s across the server (what the operator buys) and "
            "tok/s for each user (what each user gets). Targets: " + ", ".join(targets) + "."
        ),
    ]


def read_first(decision: dict | None, fps: list[dict]) -> list:
    """What must be read before anything of a target is read as a result: the checks'
    warnings and the fingerprints' model mismatches."""
    return ([Paragraph(w["text"], "warning") for w in (decision or {}).get("warnings", [])]
            + [Paragraph(text, "warning") for text in model_warnings(fps)])


def target_blocks(data: ReportData, target: str, index: prov.CellIndex) -> list:
    verdicts = [v for v in data.verdicts if v["target"] == target]
    decision = data.decision.get(target)
    fps = sorted((fp for fp in data.fingerprints if str(fp.get("target")) == target),
                 key=lambda fp: str(fp.get("run")))
    cells = index.labels(target)
    ctx = TargetContext(target, cells, index, prov.integrity_id(target), ci_label(data.ci),
                        tuple(fps), data.results, data.ci_label)
    serialised = frozenset(a for v in verdicts if v["trap"] == "serialisation" and v["fired"]
                           for a in v["arms"])
    blocks: list = [Heading(2, f"Target: {target}"), *read_first(decision, fps)]
    rows = data.summary[data.summary["target"] == target]
    blocks += headline_blocks(target, rows, decision, serialised, index, data.ci,
                              sequential=data.stopping is not None)
    slo = data.capacity.get("slo") or {}
    blocks += capacity_blocks(data.capacity.get("targets", {}).get(target), slo, ctx)
    blocks += telemetry_blocks(rows, ctx)
    blocks += workload_blocks(data.workload, target)
    versions = [v["sentence"] for v in verdicts if v["trap"] == "versions" and not v["fired"]]
    measured = [timing_source_line(rows), pinned_line(target, fps, data.config),
                model_line(fps), *versions]
    blocks.append(Bullets([m for m in measured if m]))
    return blocks + trap_blocks(verdicts, ctx)


def build_document(data: ReportData) -> tuple[list, dict]:
    """(blocks, provenance record)."""
    index = prov.CellIndex(data.cells)
    targets = sorted(set(data.summary["target"].astype(str)) | set(data.decision)
                     | set(index.targets()))
    blocks = _intro(data, targets)
    blocks += stopping_blocks(data.stopping, stopping_settings(data.config or {}),
                              split_arms(data.verdicts),
                              len(data.cells[["target", "run"]].drop_duplicates()), index)
    for target in targets:
        blocks += target_blocks(data, target, index)
    blocks += across_blocks(data.summary, index, data.ci_label)
    # a grid of workloads' section, its figure shown there
    blocks += frontier_blocks(data.frontier, data.decision, data.figures_sources,
                              data.figure_paths, index, data.ci_label)
    blocks += paired_blocks(data.paired, data.paired_figure, index, ci_label(data.ci))
    # the open loop's section, only when some target has rate arms (its figures are shown there)
    blocks += openloop_blocks(data.openloop, data.verdicts, data.figures_sources,
                              data.figure_paths, index, ci_label(data.ci))  # bootstrap always

    sources = TargetContext("", [], index).sources
    blocks += figure_blocks(general_figures(data.figures_sources), data.figure_paths, sources)
    blocks += fingerprint_blocks(data.fingerprints, index, sources)
    refs = [ref for b in blocks if isinstance(b, Sources) for ref in b.refs]
    digest = None if data.config is None else prov.config_digest(data.config)
    record = prov.build_record(refs, index, digest)
    blocks += config_blocks(data.config, digest)
    listed = {ref.id: prov.listing(ref, index) for ref in refs if len(ref.cells) <= prov.LIST_LIMIT}
    blocks += provenance_blocks(record, [ref.id for ref in refs], listed, data.explain)
    blocks += raw_files_blocks(index, data.explain)
    return blocks, record


def render(data: ReportData) -> tuple[str, str, dict]:
    """(markdown, html, provenance record): both renderings from one set of blocks."""
    blocks, record = build_document(data)
    return render_markdown(blocks, data.image_dir), render_html(blocks), record


def write_report(inputs: dict, outputs: dict, config: dict | None = None) -> None:
    """Read the pipeline's files (``inputs``, see load) and write ``outputs``: md, html and
    provenance."""
    md, page, record = render(load(inputs, config, outputs["md"]))
    for key, text in (("md", md), ("html", page)):
        Path(outputs[key]).parent.mkdir(parents=True, exist_ok=True)
        Path(outputs[key]).write_text(text, encoding="utf-8")
    prov.write_record(record, outputs["provenance"])
