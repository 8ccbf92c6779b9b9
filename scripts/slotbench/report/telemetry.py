"""The server's own evidence of a target, per arm: how many sequences it decoded per step, how
many requests waited, what an output token cost in energy and in money, beside what each user
got (summary.csv's server_batch, server_queue, j_per_token, usd_per_mtok and user_tps;
slotbench.tables.telemetry derives them from the scrapes). A number the server did not expose
is "not assessable", never zero."""

from __future__ import annotations

import pandas as pd

from slotbench.core.cells import arm_name
from slotbench.core.fmt import fmt_num, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table
from slotbench.report.traps import TargetContext

NOT_ASSESSABLE = "not assessable"
EVIDENCE = ["server_batch", "server_queue", "j_per_token", "usd_per_mtok"]


def interval(row, name: str, digits: int = 2) -> str:
    value, lo, hi = row.get(name), row.get(f"{name}_lo"), row.get(f"{name}_hi")
    if missing(value):
        return NOT_ASSESSABLE
    if missing(lo) or missing(hi):
        return fmt_num(value, digits)
    return f"{fmt_num(value, digits)} [{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]"


def _note(rows: pd.DataFrame, column: str) -> str | None:
    """The first arm's ``column`` (the analysis gives each arm its cells' commonest)."""
    return next((v for v in rows.get(column, ()) if isinstance(v, str) and v), None)


def sentence(rows: pd.DataFrame) -> str:
    """What the server said about batching, in one sentence per measured arm."""
    if "server_batch" not in rows or rows["server_batch"].isna().all():
        why = _note(rows, "telemetry_note")
        return ("The server's batch per decode step is not assessable"
                + (f": {why}." if why else ": it reported no decode counters."))
    parts = [f"{arm_name(int(r['arm']))} {fmt_num(r['server_batch'], 2)}"
             for _, r in rows.iterrows() if not missing(r.get("server_batch"))]
    return ("The server's own count of sequences decoded per step (median over the arm's cells): "
            + ", ".join(parts) + ".")


def blocks(rows: pd.DataFrame, ctx: TargetContext) -> list:
    """The evidence heading, its sentence and the per-arm table; nothing for a summary written
    before telemetry existed (no such columns)."""
    if rows.empty or "server_batch" not in rows:
        return []
    if rows.reindex(columns=EVIDENCE).isna().all().all():  # nothing to tabulate: say why
        why = _note(rows, "telemetry_note") or "the server reported none of it"
        return [Heading(3, "The server's own evidence and a token's cost"),
                Paragraph(f"The server's batch per decode step, its queue, and the energy and "
                          f"cost of a token are not assessable: {why}.")]
    ci = ctx.ci
    energy = _note(rows, "energy_source")
    priced = "usd_per_mtok" in rows and rows["usd_per_mtok"].notna().any()
    columns = ["arm", f"server batch per decode step [{ci}]", f"requests waiting [{ci}]",
               f"J per output token [{ci}]", f"$ per million output tokens [{ci}]",
               "per-user tok/s"]
    table = [[arm_name(int(r["arm"])), interval(r, "server_batch"),
              interval(r, "server_queue"), interval(r, "j_per_token", 3),
              interval(r, "usd_per_mtok", 3) if priced else NOT_ASSESSABLE + " (no usd_per_hour)",
              fmt_num(r.get("user_tps"), 1)]
             for _, r in rows.iterrows()]
    notes = [sentence(rows)]
    notes.append(f"Energy from {energy}." if energy else
                 "Energy is not assessable: no exporter with an energy counter or power gauge "
                 "answered, and this machine's RAPL and NVML counters were not readable.")
    table_id = prov.telemetry_id(ctx.target)
    out: list = [Heading(3, "The server's own evidence and a token's cost"),
                 Paragraph(" ".join(notes)),
                 Table(f"Server evidence and cost of {ctx.target}", columns, table,
                       "From the server's /metrics and the exporters, scraped just before, during "
                       "and just after every cell (results/<experiment>/server_metrics.parquet); "
                       "counters as deltas over the cell, gauges averaged over it. Medians over "
                       "each arm's cells with bootstrap intervals. The cost and the per-user rate "
                       "stand side by side: what the operator pays per token and what each user "
                       "gets.", anchor=table_id)]
    labels = ctx.index.labels(ctx.target)
    ref = prov.Ref(table_id, "table", f"Server evidence and cost of {ctx.target}",
                   prov.with_roles((labels, "source")), table_id)
    out.append(ctx.sources(labels, table_id, (ref,)))
    return out
