"""Details of the deviance check: every cell far from its run's modal output, with its effect."""

from __future__ import annotations

from slotbench.core.fmt import count, fmt_change, fmt_num, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table

TRAP = "deviance"
# Deviant cells listed in the table; beyond it the largest deviations, the rest being in
# results/<experiment>/checks/deviance.csv (a report of a million requests summarises, it
# does not list).
MAX_ROWS = 30
COLUMNS = ["cell", "tokens", "modal", "deviation", "wall s", "wall effect", "agg tok/s",
           "throughput effect"]
WHY = (
    "Each is named below with its wall-clock and throughput effect against the same arm's "
    "normal cells in its run (a wall effect of +13% with a throughput effect of +14% is the "
    "article's cell: more tokens, slower by the clock, faster by throughput). Throughput here is "
    "tokens produced over the wall clock that produced them, so such a cell is still measured "
    "correctly; a wall-over-wall comparison would book its extra output as a concurrency effect."
)


def render(verdict: dict, ctx) -> list:
    dev_id = prov.deviance_id(ctx.target)
    rows = verdict["evidence"].get("rows") or []
    threshold = f"{round(verdict['threshold'] * 100, 6):g}%"
    if not rows:
        ref = prov.Ref(dev_id, "table", f"Output deviance of {ctx.target}: {verdict['sentence']}",
                       prov.with_roles((ctx.cells, "source")), dev_id)
        return [Heading(4, "Output deviance"), Paragraph(verdict["sentence"], anchor=dev_id),
                ctx.sources(ctx.cells, dev_id, (ref,))]
    labels = [r["cell"] for r in rows]
    n = len(rows)
    refs = [prov.Ref(dev_id, "table", f"Output deviance of {ctx.target}: cells more than "
                     f"{threshold} from their run's modal output",
                     prov.with_roles((labels, "deviant")), dev_id)]
    table_rows, row_ids = [], []
    shown = rows if n <= MAX_ROWS else sorted(
        rows, key=lambda r: -abs(r["deviation"]))[:MAX_ROWS]
    deviant = set(labels)
    comparisons: dict[tuple, list[str]] = {}  # (arm, run) → that arm's normal cells in the run
    for r in shown:
        wall, tps = r.get("wall_effect"), r.get("tps_effect")
        table_rows.append([
            r["cell"], str(int(r["tokens_out"])), str(int(r["modal_tokens"])),
            fmt_change(1 + r["deviation"]), fmt_num(r.get("wall_s"), 2),
            "n/a" if missing(wall) else fmt_change(1 + wall), fmt_num(r.get("agg_tps")),
            "n/a" if missing(tps) else fmt_change(1 + tps),
        ])
        row_id = prov.deviance_id(ctx.target, r["cell"])
        row_ids.append(row_id)
        # its effects are against the same arm's normal cells of the same run
        key = (r["arm"], r["run"])
        if key not in comparisons:
            comparisons[key] = [c for c in ctx.index.labels(ctx.target, r["arm"], r["run"])
                                if c not in deviant]
        comparison = comparisons[key]
        refs.append(prov.Ref(
            row_id, "table-row",
            f"Deviant cell {r['cell']}: output, wall-clock and throughput against the same arm's "
            "other cells in its run",
            prov.with_roles(([r["cell"]], "deviant"), (comparison, "comparison")),
            anchor=row_id, parent=dev_id,
            metric={"name": "deviation", "value": r.get("deviation"),
                    "text": fmt_change(1 + r["deviation"])},
            row=dict(zip(COLUMNS, table_rows[-1])),
        ))
    lead = (f"{count(n, 'cell')} deviate{'s' if n == 1 else ''} more than {threshold} from "
            f"{'its' if n == 1 else 'their'} run's modal output. ")
    note = "" if len(shown) == n else (
        f"The {len(shown)} largest deviations of {n}; every deviant cell is in "
        f"{ctx.results}/checks/deviance.csv.")
    return [
        Heading(4, "Output deviance"),
        Paragraph(lead + WHY),
        Table("Deviant cells", COLUMNS, table_rows, note, anchor=dev_id, row_ids=row_ids),
        ctx.sources(labels, dev_id, tuple(refs)),
    ]
