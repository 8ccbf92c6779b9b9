"""Details of the control arm: what a shared, cacheable prompt would have shown."""

from __future__ import annotations

from slotbench.core.cells import label_key
from slotbench.core.fmt import count, fmt_change, union
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph

TRAP = "control"


def render(verdict: dict, ctx) -> list:
    heading = Heading(4, "Control arm")
    if not verdict["assessable"]:
        return [heading, Paragraph(verdict["sentence"], "note")]
    ev = verdict["evidence"]
    tid = prov.integrity_id(ctx.target, "control")
    control = sorted(union(r["cells"] for r in ev["rows"]), key=label_key)
    measured = sorted(union(r["measured_cells"] for r in ev["rows"]), key=label_key)
    explain = (
        "The control arm sends one shared prompt to every request at the largest concurrency and "
        "lets the server cache it (MLPerf TEST04 in spirit), once per rep after the measured arms "
        f"({count(ev['control_cells'], 'control cell')}). The difference is what a benchmark "
        "whose requests share a prefix would have booked as a concurrency gain. The measured "
        "arms never share one; the control's numbers appear only here."
    )
    ref = prov.Ref(
        tid, "table", f"Control arm of {ctx.target}: {verdict['sentence']}",
        # a control cell may share its label with the measured cell of its rep and arm
        prov.with_each_role((control, "control"), (measured, "comparison")), tid,
        parent=ctx.overview_id,
        metric={"name": "inflation", "value": ev["inflation"],
                "text": fmt_change(1 + ev["inflation"])},
    )
    return [heading, Paragraph(verdict["sentence"], anchor=tid), Paragraph(explain, "note"),
            ctx.sources(set(control) | set(measured), tid, (ref,))]
