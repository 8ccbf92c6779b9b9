"""Details of the sufficiency check: each headline ratio's interval against the target."""

from __future__ import annotations

from slotbench.core.cells import arm_name
from slotbench.core.fmt import fmt_int, fmt_times, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table
from slotbench.report.headline import interval_kind, interval_words
from slotbench.report.traps import cells_ref

TRAP = "sufficiency"
ORDER = ("speedup", "user_ratio", "ttft_ratio", "gen_gain", "pipelining")


def columns(ci: str) -> list[str]:
    return ["arm", "metric", "reps", f"value [{ci} CI]", "CI half-width", "target",
            "meets target", "reps needed"]


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    if not verdict["assessable"]:
        return [Heading(4, "Enough reps?"), Paragraph(verdict["sentence"], "note")]
    tid = prov.integrity_id(ctx.target, "sufficiency")
    cols = columns(ctx.ratio_ci or ctx.ci)
    rows = sorted(
        ev["rows"],
        key=lambda r: (
            int(r["arm"]),
            ORDER.index(r["metric"]) if r["metric"] in ORDER else len(ORDER),
            r["metric"],
        ),
    )
    table_rows, row_ids, refs = [], [], []
    for r in rows:
        arm, metric = int(r["arm"]), str(r["metric"])
        value = (f"{fmt_times(r['value'])} [{fmt_times(r['lo'])}, {fmt_times(r['hi'])}]"
                 if not missing(r.get("lo")) else fmt_times(r.get("value")))
        rel = "n/a" if missing(r.get("rel")) else f"±{float(r['rel']) * 100:.1f}%"
        table_rows.append([arm_name(arm), metric, fmt_int(r.get("n_reps")), value, rel,
                           ev["target_text"], "yes" if r.get("meets") else "no",
                           fmt_int(r.get("reps_needed"))])
        rid = prov.integrity_id(ctx.target, "sufficiency", f"arm{arm}", metric)
        row_ids.append(rid)
        refs.append(prov.Ref(
            rid, "table-row", f"Interval width of {ctx.target}, {arm_name(arm)}: {metric}",
            prov.metric_cells(ctx.index, ctx.target, arm, metric), anchor=rid, parent=tid,
            metric={"name": "rel_half_width", "value": r.get("rel"), "text": rel},
            row=dict(zip(cols, table_rows[-1])),
        ))
    if verdict["fired"]:
        text = (
            f"{verdict['sentence'][:-1]}. An interval narrows as 1/√reps, so reps needed = reps "
            f"× (half-width / target)²; fewer than {ev['min_reps']} reps never count as meeting "
            f"the target, since the {interval_kind(ctx.ratio_ci or ctx.ci)} of so few is too "
            "narrow to trust. Read the "
            "headline's ratios with their intervals."
        )
    else:
        text = (
            f"{verdict['sentence'][:-2]}: each headline ratio of each parallel arm, "
            f"{interval_words(ctx.ratio_ci or ctx.ci)} half-width relative to the value)."
        )
    table_ref = cells_ref(ctx, tid, f"Interval width of every headline ratio of {ctx.target}")
    return [
        Heading(4, "Enough reps?"),
        Paragraph(text),
        Table("Interval width of each ratio", cols, table_rows,
              f"CI half-width = (high − low) / 2 of the {interval_words(ctx.ratio_ci or ctx.ci)}, relative to "
              "the value.", anchor=tid, row_ids=row_ids),
        ctx.sources(ctx.cells, tid, (table_ref, *refs)),
    ]
