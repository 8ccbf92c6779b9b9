"""The traps table and each trap's details, rendered from verdict records alone.

The table is generic: one row per verdict (trap, verdict, threshold and its config key,
evidence, a link to the details). The details come from the trap's renderer in
``slotbench/report/details/<trap>.py`` (a module with ``render(verdict, ctx) -> blocks``) when
there is one, and otherwise from the verdict's sentence and cells. So a new trap shows up here
with no change to this module.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from slotbench.core.cells import label_key
from slotbench.core.fmt import DASH, fmt_ms, missing
from slotbench.provenance import ids as prov
from slotbench.report import details as details_package
from slotbench.report.blocks import Heading, Paragraph, Sources, Table


@dataclass(frozen=True)
class TargetContext:
    """What every renderer of one target needs to name its cells and raw files."""

    target: str
    cells: list
    index: prov.CellIndex
    overview_id: str = ""
    ci: str | None = None  # the intervals' level, as ci_label gives it; None where none is quoted
    fingerprints: tuple = ()
    results: str = "results/<experiment>"  # the experiment's folder, where the report lies
    # the headline ratios' intervals' label: ci's, or "95% sequential" with reps: auto (the
    # rates, capacity and telemetry keep their bootstrap intervals, labelled ci)
    ratio_ci: str | None = None

    def hashes_for(self, labels) -> list[str]:
        found = {self.index.info(label).get("raw_sha256") for label in labels}
        return sorted(h for h in found if h is not None and not missing(h))

    def sources(self, labels, prov_id: str, refs: tuple) -> Sources:
        labels = sorted(set(labels), key=label_key)
        return Sources(labels, self.hashes_for(labels), prov_id, refs, self.index.scope(labels))


def renderers() -> dict:
    """trap id -> its detail renderer, found in slotbench/report/details/."""
    found = {}
    for info in pkgutil.iter_modules(details_package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{details_package.__name__}.{info.name}")
        if hasattr(module, "render"):
            found[getattr(module, "TRAP", info.name)] = module.render
    return found


def default_details(verdict: dict, ctx: TargetContext) -> list:
    """A trap without a renderer: its sentence, anchored, with the cells behind it."""
    tid = prov.integrity_id(ctx.target, verdict["trap"])
    cells = verdict.get("cells") or ctx.cells
    kind = "warning" if verdict["fired"] else ""
    ref = prov.Ref(tid, "table", f"{verdict['title']} ({ctx.target}): {verdict['summary']}",
                   prov.with_roles((cells, "source")), tid, parent=ctx.overview_id)
    return [Heading(4, verdict["title"]), Paragraph(verdict["sentence"], kind, anchor=tid),
            ctx.sources(cells, tid, (ref,))]


def threshold_text(verdict: dict) -> str:
    value, key = verdict.get("threshold"), verdict.get("config_key")
    if missing(value):
        return DASH
    if str(key or "").endswith("_s"):
        text = fmt_ms(value)
    else:
        text = f"{round(value * 100, 6):g}%" if abs(value) <= 1 else f"{value:g}"
    return f"{text} ({key})" if key else text


def trap_blocks(verdicts: list[dict], ctx: TargetContext) -> list:
    """The traps table of one target, then each trap's details in table order."""
    found = renderers()
    rows, detail_blocks = [], []
    for v in verdicts:
        # a check that had no cell to read has only its sentence to show
        renderer = None if v["evidence"].get("no_cells") else found.get(v["trap"])
        blocks = (renderer or default_details)(v, ctx)
        ids = [b.prov for b in blocks if isinstance(b, Sources) and b.prov]
        rows.append([v["title"], v["verdict"], threshold_text(v), v["summary"],
                     ids[0] if ids else DASH])
        detail_blocks += blocks
    ref = prov.Ref(
        ctx.overview_id, "table",
        f"Measurement integrity of {ctx.target}: each trap, its verdict and the evidence",
        prov.with_roles((ctx.cells, "source")), ctx.overview_id,
    )
    return [
        Heading(3, "Measurement integrity"),
        Paragraph(
            "Each trap that could make these numbers wrong without any error: whether its check "
            "could look (not assessable when it could not: such a check never passes by "
            "default), its verdict, the threshold and the config key that sets it, and the "
            "evidence; the details and sources of each follow. The control arm, when on, is "
            "reported here and never in the per-arm table."
        ),
        Table("Traps and detectors", ["trap", "verdict", "threshold", "evidence", "details"],
              rows, anchor=ctx.overview_id, link_column=4),
        ctx.sources(ctx.cells, ctx.overview_id, (ref,)),
        *detail_blocks,
    ]


def flagged_table(ctx, trap, rows, columns, make_row, title, row_title, metric, max_rows):
    """Table of flagged requests (at most ``max_rows``) with an entry per row and its Sources."""
    tid = prov.integrity_id(ctx.target, trap)
    table_rows, row_ids, refs = [], [], []
    labels = [r["cell"] for r in rows]
    for r in rows[:max_rows]:
        table_rows.append(make_row(r))
        rid = prov.integrity_id(ctx.target, trap, r["run"], f"rep{int(r['rep'])}",
                                f"arm{int(r['arm'])}", f"request{int(r['request'])}")
        row_ids.append(rid)
        refs.append(prov.Ref(
            rid, "table-row", f"{row_title} {r['cell']} request {int(r['request'])}",
            prov.with_roles(([r["cell"]], "deviant")), anchor=rid, parent=tid,
            metric=metric(r), row=dict(zip(columns, table_rows[-1])),
        ))
    note = ""
    if len(rows) > max_rows:
        note = (f"{len(rows) - max_rows} more in {ctx.results}/checks/{trap}.csv "
                f"(first {max_rows} shown).")
    flagged = sorted(set(labels), key=label_key)
    others = [c for c in ctx.cells if c not in set(flagged)]
    table_ref = prov.Ref(tid, "table", f"{title} ({ctx.target})",
                         prov.with_roles((flagged, "deviant"), (others, "comparison")), tid,
                         parent=ctx.overview_id)
    return [Table(title, columns, table_rows, note, anchor=tid, row_ids=row_ids),
            ctx.sources(flagged, tid, (table_ref, *refs))]


def cells_ref(ctx, tid, title):
    """A check's table or sentence, citing every cell of the target as its source."""
    return prov.Ref(
        tid, "table", title, prov.with_roles((ctx.cells, "source")), tid, parent=ctx.overview_id
    )


def quiet_evidence(ctx, trap, text, title) -> list:
    """A quiet check's sentence, anchored, with the cells it looked at."""
    tid = prov.integrity_id(ctx.target, trap)
    ref = cells_ref(ctx, tid, f"{title} ({ctx.target}): {text}")
    return [Paragraph(text, anchor=tid), ctx.sources(ctx.cells, tid, (ref,))]
