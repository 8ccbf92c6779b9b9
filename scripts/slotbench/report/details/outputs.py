"""Details of the output-length check: pinned lengths held request by request, or ceilings
compared arm against arm, with every request that missed its plan."""

from __future__ import annotations

from slotbench.core.fmt import count, fmt_int, signed
from slotbench.report.blocks import Heading, Paragraph
from slotbench.report.traps import default_details, flagged_table, quiet_evidence

TRAP = "outputs"
MAX_ROWS = 30


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    if not verdict["assessable"]:
        return default_details(verdict, ctx)
    if not verdict["fired"]:
        return [Heading(4, verdict["title"]),
                *quiet_evidence(ctx, TRAP, verdict["sentence"], verdict["title"])]
    rows = ev["rows"]
    if ev.get("pinned"):
        lead = (f"Warning: {count(len(rows), 'pinned request')} of {ev['requests']} produced "
                "another length than planned, although the server was asked to ignore its "
                "end-of-sequence token: those requests did other work than the plan, so the arms "
                "are not measured on equal work.")
    else:
        lead = (f"Warning: {verdict['sentence'][:-1]}. The lengths were ceilings, and the arm "
                "that produced less did less work than the others on the same requests: its "
                "throughput counts the tokens it produced, but its wall clock is not comparable. "
                "Its requests that stopped early:")
    columns = ["cell", "position", "request", "output tokens", "planned", "difference"]

    def make_row(r):
        diff = r["output_tokens"] - r["planned_output_tokens"]
        return [r["cell"], fmt_int(r["position"]), fmt_int(r["request"]),
                fmt_int(r["output_tokens"]), fmt_int(r["planned_output_tokens"]),
                signed(f"{int(diff):+d}")]

    def metric(r):
        return {"name": "output_tokens", "value": r["output_tokens"],
                "text": fmt_int(r["output_tokens"])}

    return [Heading(4, verdict["title"]), Paragraph(lead, "warning"),
            *flagged_table(ctx, TRAP, rows, columns, make_row,
                           "Requests whose output missed its planned length",
                           "Output length other than planned:", metric, MAX_ROWS)]
