"""Details of the rotation check: each arm's median aggregate tok/s at each position."""

from __future__ import annotations

from slotbench.core.cells import arm_name
from slotbench.core.fmt import DASH, fmt_num, fmt_pct, split_list, union
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table

TRAP = "rotation_bias"


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    blocks: list = [Heading(4, "Rotation bias"), Paragraph(verdict["sentence"])]
    rows = ev.get("rows") or []
    if not rows:
        return blocks
    bias = ev.get("effect")
    slots = sorted({int(r["position"]) for r in rows})
    columns = ["arm", *[f"position {p}" for p in slots], "spread"]
    table_id = prov.rotation_id(ctx.target)
    labels = union(r["cells"] for r in rows)
    metric = None if bias is None else {"name": "position_effect", "value": bias,
                                        "text": fmt_pct(bias, 1)}
    refs = [prov.Ref(table_id, "table", f"Rotation bias of {ctx.target}: median aggregate tok/s "
                     "of each arm at each position", prov.with_roles((labels, "source")),
                     table_id, metric=metric)]
    table_rows, row_ids = [], []
    for arm in sorted({int(r["arm"]) for r in rows}):
        by_pos = {int(r["position"]): r for r in rows if int(r["arm"]) == arm}
        texts = [f"{fmt_num(by_pos[p]['median_agg_tps'])} (n={int(by_pos[p]['n_cells'])})"
                 if p in by_pos else DASH for p in slots]
        spread = (ev.get("arms") or {}).get(str(arm), {}).get("spread")
        table_rows.append([arm_name(arm), *texts, fmt_pct(spread, 1)])
        row_id = prov.positions_id(ctx.target, arm)
        row_ids.append(row_id)
        arm_labels = union(r["cells"] for r in by_pos.values())
        refs.append(prov.Ref(
            row_id, "table-row",
            f"Rotation bias of {ctx.target}, {arm_name(arm)}: median aggregate tok/s by position",
            prov.with_roles((arm_labels, "arm")), anchor=row_id, parent=table_id,
            metric={"name": "spread", "value": spread, "text": fmt_pct(spread, 1)},
            row=dict(zip(columns, table_rows[-1])),
        ))
        for p in slots:
            if p not in by_pos:
                continue
            refs.append(prov.Ref(
                prov.positions_id(ctx.target, arm, p), "table-cell",
                f"{ctx.target}, {arm_name(arm)} at position {p}: median aggregate tok/s",
                prov.with_roles((split_list(by_pos[p]["cells"]), "arm")), anchor=row_id,
                parent=row_id, metric={"name": "median_agg_tps",
                                       "value": by_pos[p]["median_agg_tps"],
                                       "text": texts[slots.index(p)]},
            ))
    blocks.append(Table("Median aggregate tok/s by position (n = cells)", columns, table_rows,
                        anchor=table_id, row_ids=row_ids))
    blocks.append(ctx.sources(labels, table_id, tuple(refs)))
    return blocks
