"""Details of the rounds check: per parallel arm split into two states, each side's rounds,
per-user rate, the server's batch per step, slots and positions."""

from __future__ import annotations

from slotbench.core.cells import arm_name
from slotbench.core.fmt import fmt_num
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table

TRAP = "rounds"
COLUMNS = ["arm", "rounds", "per-user tok/s (median round)", "server batch per step", "slots",
           "rounds by position", "median lands here"]
HOW = (
    "A round is one set of requests in flight together: a cell's requests in the order they "
    "were sent, in consecutive groups of the arm's N. An arm whose round rates fall into two "
    "separated groups ran in two states, and its median describes only the one it lands in "
    "(rounds.csv has every round)."
)


def render(verdict: dict, ctx) -> list:
    tid = prov.integrity_id(ctx.target, TRAP)
    kind = "warning" if verdict["fired"] else ""
    blocks = [Heading(4, verdict["title"]), Paragraph(verdict["sentence"], kind, anchor=tid)]
    split = [a for a in verdict["evidence"].get("arms") or [] if a.get("bimodal")]
    if not split:
        cells = verdict.get("cells") or ctx.cells
        ref = prov.Ref(tid, "table", f"{verdict['title']} ({ctx.target}): {verdict['summary']}",
                       prov.with_roles((cells, "source")), tid, parent=ctx.overview_id)
        return blocks + [ctx.sources(cells, tid, (ref,))]
    rows, cells = [], set()
    for arm in split:
        for side in arm["clusters"]:
            positions = ", ".join(f"{p}: {n}" for p, n in (side.get("positions") or {}).items())
            rows.append([
                f"{arm_name(arm['arm'])}, {side['cluster']}", str(side["rounds"]),
                fmt_num(side.get("user_tps_median")), fmt_num(side.get("server_batch"), 2),
                side.get("slots") or "n/a", positions or "n/a",
                "yes" if arm.get("lands") == side["cluster"] else "no",
            ])
            cells |= set(side.get("cells") or [])
    table_id = prov.integrity_id(ctx.target, TRAP, "clusters")
    ref = prov.Ref(table_id, "table", f"Rounds of {ctx.target} in two states",
                   prov.with_roles((sorted(cells), "source")), table_id, parent=ctx.overview_id)
    return blocks + [Paragraph(HOW), Table("Rounds in two states", COLUMNS, rows,
                                           anchor=table_id),
                     ctx.sources(sorted(cells), table_id, (ref,))]
