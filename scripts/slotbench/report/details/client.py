"""Details of the client self-check: send lag and the client's CPU per streamed token."""

from __future__ import annotations

from slotbench.core.cells import label_key
from slotbench.core.fmt import fmt_ms, fmt_pct, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table

TRAP = "client"
COLUMNS = ["check", "measured", "threshold", "fired", "cells over it"]


def render(verdict: dict, ctx) -> list:
    info = verdict["evidence"]
    tid = prov.integrity_id(ctx.target, "client")
    assessed, share = info.get("cpu_assessed"), info.get("cpu_share")
    over_lag, over_cpu = info.get("cells_over_lag") or [], info.get("cells_over_cpu") or []
    cpu_measured = (
        f"{fmt_pct(share, 1)} of an inter-token interval ({fmt_ms(info.get('cpu_per_token_s'))} "
        f"of {fmt_ms(info.get('inter_token_s'))}, worst cell {info.get('worst_cpu_cell')})"
        if assessed and not missing(share)
        else "not assessed (no per-cell CPU times or no server generation times)"
    )
    table_rows = [
        ["send lag p95 (max)",
         f"{fmt_ms(info.get('lag_p95_s'))} (max {fmt_ms(info.get('lag_max_s'))})",
         fmt_ms(info.get("lag_threshold_s")), "yes" if info.get("lag_fired") else "no",
         ", ".join(over_lag) or "none"],
        ["client CPU per streamed token", cpu_measured,
         f"{fmt_pct(info.get('cpu_share_threshold'))} of an inter-token interval",
         ("yes" if info.get("cpu_fired") else "no") if assessed else "n/a",
         ", ".join(over_cpu) or "none"],
    ]
    worst = [str(info["worst_cpu_cell"])] if info.get("worst_cpu_cell") else []
    metrics = ({"name": "lag_p95_s", "value": info.get("lag_p95_s"), "text": table_rows[0][1]},
               {"name": "cpu_share", "value": share, "text": table_rows[1][1]})
    row_ids, refs = [], []
    for key, row, flagged, metric, what in zip(
        ("lag", "cpu"), table_rows, (over_lag, over_cpu or worst), metrics,
        ("send lag of every request", "client CPU per streamed token"),
    ):
        rid = prov.integrity_id(ctx.target, "client", key)
        row_ids.append(rid)
        refs.append(prov.Ref(
            rid, "table-row", f"Client self-check of {ctx.target}: {what}",
            prov.with_roles((flagged, "deviant"), (ctx.cells, "source")), anchor=rid,
            parent=tid, metric=metric, row=dict(zip(COLUMNS, row)),
        ))
    flagged = sorted(verdict["cells"], key=label_key)
    table_ref = prov.Ref(tid, "table", f"Client self-check of {ctx.target}",
                         prov.with_roles((flagged, "deviant"), (ctx.cells, "source")), tid,
                         parent=ctx.overview_id)
    return [
        Heading(4, "Client self-check"),
        Paragraph(verdict["sentence"], "warning" if verdict["fired"] else ""),
        Paragraph(
            "The client checks itself: a request sent later than the moment its slot freed "
            "leaves the server idle (send lag), and a client that spends much CPU per "
            "streamed token takes it from a server on the same cores.",
            "note",
        ),
        Table("Client self-check", COLUMNS, table_rows, anchor=tid, row_ids=row_ids),
        ctx.sources(ctx.cells, tid, (table_ref, *refs)),
    ]
