"""Details of the serialisation check: requests generating at once, per parallel arm."""

from __future__ import annotations

from slotbench.core.cells import arm_name
from slotbench.core.fmt import fmt_int, fmt_num, missing, split_list, union
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Bullets, Heading, Paragraph, Table

TRAP = "serialisation"
COLUMNS = [
    "arm", "cells", "in flight (client, median)", "generating at once (median of cell max)",
    "serialised cells", "queue-wait slope s/place (Ollama)", "TTFT-wait slope s/place (client)",
    "served one at a time",
]
HOW = (
    "Whether the server really ran a parallel arm's requests at once, from request timings: "
    "the most requests whose generation windows (first token to last chunk, 5 ms tolerance) "
    "overlap in each cell. A parallel arm is marked as served one at a time when that is 1 in "
    "(nearly) all its cells although the client had more in flight. Corroboration: Ollama's "
    "queue wait (total − load − prompt eval − eval duration) and the client's TTFT over the "
    "serial arm's median, each as a slope in seconds per place in the order of service."
)


def render(verdict: dict, ctx) -> list:
    rows = verdict["evidence"].get("rows") or []
    if not rows:
        return [Heading(4, "Server concurrency"), Paragraph(verdict["sentence"], "note")]
    table_id = prov.serialisation_id(ctx.target)
    table_rows, row_ids, refs = [], [], []
    for r in rows:
        table_rows.append([
            arm_name(r["arm"]), fmt_int(r.get("n_cells")), fmt_num(r.get("in_flight_median"), 1),
            fmt_num(r.get("max_overlap_median"), 1), fmt_int(r.get("serialised_cells")),
            fmt_num(r.get("queue_gap_slope_s"), 3), fmt_num(r.get("wait_slope_s"), 3),
            "yes" if r["serialised"] else "no",
        ])
        row_id = prov.serialisation_id(ctx.target, r["arm"])
        row_ids.append(row_id)
        refs.append(prov.Ref(
            row_id, "table-row",
            f"Server concurrency of {ctx.target}, {arm_name(r['arm'])}: requests generating at "
            "once", prov.with_roles((split_list(r.get("cells")), "arm")), anchor=row_id,
            parent=table_id, row=dict(zip(COLUMNS, table_rows[-1])),
        ))
    labels = union(r.get("cells") for r in rows)
    table_ref = prov.Ref(table_id, "table",
                         f"Server concurrency of {ctx.target}: requests generating at once",
                         prov.with_roles((labels, "source")), table_id)
    blocks = [
        Heading(4, "Server concurrency"),
        Paragraph(HOW),
        Table("Requests generating at once", COLUMNS, table_rows, anchor=table_id,
              row_ids=row_ids),
        ctx.sources(labels, table_id, (table_ref, *refs)),
    ]
    capped = verdict["evidence"].get("capped") or []
    return blocks + ([Bullets(capped)] if capped else [])
