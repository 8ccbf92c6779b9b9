"""Details of the host-contention check: what else used the machine, per rep; the machine is
the one the verdict names (this machine as client and server, or the client host alone, whose
table has no server CPU: the server's processes are not on it)."""

from __future__ import annotations

from slotbench.core import hosts
from slotbench.core.fmt import fmt_num, fmt_pct, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table

TRAP = "host"
# Up to this many reps, every rep is listed; beyond it only those that shared the machine (or,
# when none did, the busiest), the rest being in results/<experiment>/checks/host.csv.
ALL_ROWS_UP_TO = 10
BUSIEST = 3
MAX_ROWS = 30  # at most this many shared reps listed, the busiest
COLUMNS = ["rep", "samples", "other CPU, cores (share)", "other CPU max", "steal (share)",
           "load avg", "server CPU", "top other processes", "shared machine"]


def render(verdict: dict, ctx) -> list:
    # a verdict from before the machine was named reads as one with no fingerprint would
    machine = verdict["evidence"].get("machine") or hosts.SHARED
    the, server_here = hosts.the(machine), machine == hosts.SHARED
    heading = Heading(4, hosts.titled("Host contention", machine))
    rows = verdict["evidence"].get("rows") or []
    if not verdict["assessable"]:
        return [heading, Paragraph(verdict["sentence"], "note")]
    columns = COLUMNS if server_here else [c for c in COLUMNS if c != "server CPU"]
    tid = prov.integrity_id(ctx.target, "host")
    shown = rows
    if len(rows) > ALL_ROWS_UP_TO:
        busiest = sorted(rows, key=lambda r: -(r["other_share"] or 0))
        keep = {id(r) for r in ([r for r in busiest if r["contended"]][:MAX_ROWS]
                                or busiest[:BUSIEST])}
        shown = [r for r in rows if id(r) in keep]  # in rep order
    table_rows, row_ids, refs = [], [], []
    for r in shown:
        steal = "n/a" if missing(r.get("steal_share")) else fmt_pct(r["steal_share"], 1)
        table_rows.append([
            f"{r['run']} rep {r['rep']}", str(r["samples"]),
            f"{fmt_num(r['other_cores'], 2)} ({fmt_pct(r['other_share'], 1)})",
            fmt_num(r["other_max_cores"], 2), steal, fmt_num(r["load1"], 2),
            *([fmt_num(r["server_cores"], 2)] if server_here else []), r["top"] or "none",
            "yes" if r["contended"] else "no",
        ])
        rid = prov.integrity_id(ctx.target, "host", r["run"], f"rep{r['rep']}")
        row_ids.append(rid)
        prefix = f"{ctx.target}/{r['run']}/rep{r['rep']}/"
        cells = [c for c in ctx.cells if c.startswith(prefix)]
        refs.append(
            prov.Ref(
                rid,
                "table-row",
                f"What else ran on {the} during {r['run']} "
                f"rep {r['rep']} of {ctx.target}",
                prov.with_roles((cells, "source")),
                anchor=rid,
                parent=tid,
                row=dict(zip(columns, table_rows[-1])),
            )
        )
    note = (
        "CPU in cores over each rep's measured cells (1.00 = one core busy throughout); "
        + ("other = everything but the target server and the harness." if server_here else
           "other = everything on the client host but the harness (the server runs on another "
           "machine, whose CPU is not sampled).")
    )
    if len(shown) < len(rows):
        quiet = [r for r in rows if r not in shown]
        busiest = max(quiet, key=lambda r: r["other_share"] or 0)
        n_shared = sum(1 for r in rows if r["contended"])
        which = ("the busiest reps" if not shown[0]["contended"] else
                 "the reps that shared the machine" if len(shown) == n_shared else
                 f"the {len(shown)} busiest of the {n_shared} reps that shared the machine")
        note += (
            f" Listed: {which}; the other {len(quiet)} (at most "
            f"{fmt_pct(busiest['other_share'], 1)} other CPU, {busiest['run']} rep "
            f"{busiest['rep']}) are in {ctx.results}/checks/host.csv."
        )
    contended = {f"{ctx.target}/{r['run']}/rep{r['rep']}/" for r in rows if r["contended"]}
    flagged = [c for c in ctx.cells if c[: c.rfind("/") + 1] in contended]
    table_ref = prov.Ref(tid, "table", f"Host contention of {ctx.target} ({the})",
                         prov.with_roles((flagged, "deviant"), (ctx.cells, "source")), tid,
                         parent=ctx.overview_id)
    # fired, the whole sentence is the warning at the top of the target: here its summary
    said = (f"{verdict['summary']} (what to do is in the warning at the top of this target)"
            if verdict["fired"] else verdict["sentence"])
    return [heading, Paragraph(said, "warning" if verdict["fired"] else ""),
            Table(f"What else ran on {the}, per rep", columns, table_rows, note, anchor=tid,
                  row_ids=row_ids),
            ctx.sources(ctx.cells, tid, (table_ref, *refs))]
