"""Assembling the document (build_blocks / build_document), rendering it (build_report /
render_report) and the I/O edge used by the Snakemake entry point (write_report)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from slotbench import provenance as prov
from slotbench.cells import cell_label
from slotbench.report.format import _missing
from slotbench.report.blocks import (
    Bullets,
    Heading,
    Paragraph,
    Sources,
    render_html,
    render_markdown,
)
from slotbench.report.headline import headline_blocks
from slotbench.report.checks import (
    config_blocks,
    deviance_blocks,
    figure_blocks,
    fingerprint_blocks,
    ollama_blocks,
    pinned_line,
    provenance_blocks,
    rotation_blocks,
    serialisation_blocks,
    serialisation_rows,
    serialisation_warning,
    timing_source_line,
    version_blocks,
)
from slotbench.report.integrity import (
    TargetContext,
    burst_trap,
    cache_trap,
    checks_traps,
    client_trap,
    client_warning,
    control_trap,
    integrity_blocks,
    prompts_trap,
    sufficiency_trap,
    thermal_trap,
)


def build_blocks(*args, **kwargs) -> list:
    """The neutral document (see build_document)."""
    return build_document(*args, **kwargs)[0]


def build_document(
    summary,
    ratios,
    deviance,
    positions,
    verdict,
    fingerprints,
    figures_sources,
    figure_paths,
    *,
    requests: pd.DataFrame | None = None,
    servers: list[dict] | None = None,
    serialisation: pd.DataFrame | None = None,
    cells: pd.DataFrame | None = None,
    config_sha256: str | None = None,
    resolved_config: dict | None = None,
    prompts: pd.DataFrame | None = None,
    cache_hits: pd.DataFrame | None = None,
    control: pd.DataFrame | None = None,
    thermal_summary: pd.DataFrame | None = None,
    burst: pd.DataFrame | None = None,
    client: dict | None = None,
    sufficiency: pd.DataFrame | None = None,
    thermal: pd.DataFrame | None = None,
) -> tuple[list, dict]:
    """(blocks, provenance record). requests (timing_source, prompt_tokens), servers (each rep's
    server state, e.g. Ollama's /api/ps), serialisation (checks), cells (raw files, code and
    server versions; ratios stand in for it) and the resolved config are optional so that older
    callers work. The integrity inputs (prompts, cache_hits, control, thermal_summary, burst,
    client, sufficiency, thermal samples) feed each target's Measurement integrity section; one
    that is not given is listed there as not checked."""
    if config_sha256 is None and resolved_config is not None:
        config_sha256 = prov.config_digest(resolved_config)
    index = prov.CellIndex(cells if cells is not None else ratios)
    thresholds = {
        "rotation": verdict.get("rotation_threshold", 0.10),
        "deviance": verdict.get("deviance_threshold", 0.05),
    }
    verdicts = verdict.get("targets", {})
    labelled = (
        ratios.assign(
            cell=[
                cell_label(*k)
                for k in ratios[["target", "run", "rep", "arm"]].itertuples(index=False)
            ]
        )
        if not ratios.empty
        else ratios.assign(cell=[])
    )
    hash_of = dict(zip(labelled["cell"], labelled.get("raw_sha256", [])))

    def cells_of(target, run=None):
        sel = labelled[labelled["target"] == target]
        if run is not None:
            sel = sel[sel["run"] == run]
        return sorted(set(sel["cell"]))

    def hashes_of(target, run=None):
        return sorted({hash_of[c] for c in cells_of(target, run) if not _missing(hash_of[c])})

    targets = sorted(
        set(summary["target"])
        | set(verdicts)
        | set(labelled["target"] if not labelled.empty else [])
    )
    n_req = sorted(set(ratios["n_requests"].dropna().astype(int))) if "n_requests" in ratios else []
    same = f"the same {n_req[0]} requests" if len(n_req) == 1 else "the same requests"
    blocks: list = [
        Heading(1, "slotbench: what concurrency does to an inference server"),
        Paragraph(
            f"Every arm sends {same}; arms differ only in how many are in flight at once, so "
            "serial-1 is the queueing control. Arm order rotates by rep. Throughput is tokens "
            "actually produced over the wall clock that produced them. Two numbers move in "
            "opposite directions: aggregate tok/s across the server (what the operator buys) and "
            "tok/s for each user (what each user gets). Targets: " + ", ".join(targets) + "."
        ),
    ]
    for target in targets:
        v = verdicts.get(target)
        fps = sorted(
            (fp for fp in fingerprints if str(fp.get("target")) == target),
            key=lambda fp: str(fp.get("run")),
        )
        ser_rows = serialisation_rows(target, serialisation, v)
        serialised = frozenset(r["arm"] for r in ser_rows if r["serialised"])
        start = len(blocks)
        blocks.append(Heading(2, f"Target: {target}"))
        # Before anything is read as a result: a server that never ran requests together, and
        # a client that could not keep up.
        blocks += [
            Paragraph(serialisation_warning(r, fps), "warning") for r in ser_rows if r["serialised"]
        ]
        distorted = client_warning((client or {}).get(target))
        if distorted is not None:
            blocks.append(distorted)
        mixed, versions = version_blocks(target, index)
        blocks += mixed
        rows = summary[summary["target"] == target]
        blocks += headline_blocks(target, rows, v, thresholds, serialised, index)
        measured = [timing_source_line(target, requests), pinned_line(target, fps), versions]
        blocks.append(Bullets([m for m in measured if m]))
        blocks += serialisation_blocks(target, ser_rows, hash_of)
        blocks += ollama_blocks(target, fps, servers or [], cells_of, hashes_of, hash_of)
        blocks += rotation_blocks(target, positions, v, thresholds, hash_of)
        blocks += deviance_blocks(
            target, deviance, thresholds["deviance"], cells_of(target), hashes_of(target), index
        )
        shown = {b.prov for b in blocks[start:] if isinstance(b, Sources)}
        ctx = TargetContext(
            target, cells_of(target), hashes_of(target), index, prov.integrity_id(target)
        )
        traps = checks_traps(target, v, thresholds, ser_rows, deviance, shown) + [
            prompts_trap(ctx, prompts, requests, fps),
            cache_trap(ctx, cache_hits, requests),
            control_trap(ctx, control),
            thermal_trap(ctx, thermal_summary, thermal, fps, cells_of),
            burst_trap(ctx, burst),
            client_trap(ctx, client),
            sufficiency_trap(ctx, sufficiency),
        ]
        blocks += integrity_blocks(target, ctx, traps)
    blocks += figure_blocks(figures_sources, figure_paths)
    blocks += fingerprint_blocks(fingerprints, cells_of, hashes_of)
    refs = [ref for b in blocks if isinstance(b, Sources) for ref in b.refs]
    record = prov.build_record(refs, index, config_sha256)
    blocks += config_blocks(resolved_config, config_sha256)
    blocks += provenance_blocks(record, [ref.id for ref in refs])
    return blocks, record


def build_report(
    summary: pd.DataFrame,
    ratios: pd.DataFrame,
    deviance: pd.DataFrame,
    positions: pd.DataFrame,
    verdict: dict,
    fingerprints: list[dict],
    figures_sources: dict,
    figure_paths: dict,
    image_dir: str = "figures",
    **optional,
) -> tuple[str, str]:
    """(markdown, html) of the whole report; image_dir is the Markdown's relative figure dir.

    ``optional``: requests, servers, serialisation, cells, config_sha256, resolved_config (see
    build_document)."""
    md, page, _ = render_report(
        summary,
        ratios,
        deviance,
        positions,
        verdict,
        fingerprints,
        figures_sources,
        figure_paths,
        image_dir=image_dir,
        **optional,
    )
    return md, page


def render_report(*args, image_dir: str = "figures", **optional) -> tuple[str, str, dict]:
    """(markdown, html, provenance record): both renderings from one set of blocks, and the
    record those blocks link to."""
    blocks, record = build_document(*args, **optional)
    return render_markdown(blocks, image_dir), render_html(blocks), record


# --------------------------------------------------------------------------------------------
# I/O edge (used by the Snakemake entry point)
# --------------------------------------------------------------------------------------------


def match_figure_paths(figures_sources: dict, paths) -> dict[str, str]:
    """Figure id -> PNG path, matched on the basename recorded in the figures' sources."""
    by_name = {Path(p).name: str(p) for p in paths}
    return {
        fid: by_name[src["file"]]
        for fid, src in figures_sources.items()
        if src.get("file") in by_name
    }


REQUEST_COLUMNS = ["target", "run", "rep", "arm", "request", "timing_source"]
# read when requests.parquet has them: the prompt-length check's modal length, the control flag
OPTIONAL_REQUEST_COLUMNS = ["prompt_tokens", "control"]


def read_requests(path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    names = set(pq.read_schema(path).names)
    return pd.read_parquet(
        path, columns=REQUEST_COLUMNS + [c for c in OPTIONAL_REQUEST_COLUMNS if c in names]
    )


def read_checks_csv(path) -> pd.DataFrame | None:
    """A checks table; a file with no header at all reads as no rows."""
    if path is None:
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def write_report(
    *,
    summary,
    ratios,
    deviance,
    positions,
    verdict,
    sources,
    figures,
    fingerprints,
    md_out,
    html_out,
    requests=None,
    servers=None,
    serialisation=None,
    cells=None,
    provenance_out=None,
    config_sha256=None,
    resolved_config=None,
    prompts=None,
    cache_hits=None,
    control=None,
    thermal_summary=None,
    burst=None,
    client=None,
    sufficiency=None,
    thermal=None,
) -> None:
    """Read the pipeline's files, build the report, write both renderings and (with
    provenance_out) the provenance record they link to. The pipeline passes every file; a
    None leaves that part out (the integrity section then says "not checked")."""
    figures_sources = json.loads(Path(sources).read_text())
    figures = [str(p) for p in figures]
    image_dir = ""
    if figures:
        image_dir = os.path.relpath(Path(figures[0]).parent, Path(md_out).parent).replace(
            os.sep, "/"
        )
    md, page, record = render_report(
        pd.read_csv(summary),
        pd.read_parquet(ratios),
        pd.read_csv(deviance),
        pd.read_csv(positions),
        json.loads(Path(verdict).read_text()),
        [json.loads(Path(p).read_text()) for p in fingerprints],
        figures_sources,
        match_figure_paths(figures_sources, figures),
        image_dir=image_dir if image_dir != "." else "",
        requests=None if requests is None else read_requests(requests),
        servers=None if servers is None else json.loads(Path(servers).read_text()),
        serialisation=None if serialisation is None else pd.read_csv(serialisation),
        cells=None if cells is None else pd.read_parquet(cells),
        config_sha256=config_sha256,
        resolved_config=resolved_config,
        prompts=read_checks_csv(prompts),
        cache_hits=read_checks_csv(cache_hits),
        control=read_checks_csv(control),
        thermal_summary=read_checks_csv(thermal_summary),
        burst=read_checks_csv(burst),
        client=None if client is None else json.loads(Path(client).read_text()),
        sufficiency=read_checks_csv(sufficiency),
        thermal=None if thermal is None else pd.read_parquet(thermal),
    )
    for path, text in ((md_out, md), (html_out, page)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    if provenance_out is not None:
        prov.write_record(record, provenance_out)
