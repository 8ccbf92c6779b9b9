"""The report's workload section of a target (docs/workloads.md): the lengths its requests were
planned to have, those the server counted and, for a trace workload, the trace's own at the
workload's length_scale, as quantiles side by side (analysis/workload.json)."""

from __future__ import annotations

from slotbench.core.fmt import count
from slotbench.report.blocks import Heading, Paragraph, Table

PINNED = {
    "all": "Every output was pinned to its planned length (the server ignored its end-of-sequence "
           "token); Output lengths against the plan holds each request to it.",
    "none": "The outputs' planned lengths were ceilings: this backend cannot pin them, so a "
            "request may stop early at its end-of-sequence token; Output lengths against the "
            "plan compares the arms request for request.",
    "some": "Some outputs were pinned to their planned length and some were ceilings (the runs "
            "differ); Output lengths against the plan says which.",
}


def blocks(lengths: dict, target: str) -> list:
    """The section, or nothing for the article's workload (no analysis/workload.json)."""
    entry = (lengths or {}).get("targets", {}).get(target)
    if not entry:
        return []
    qs = lengths["quantiles"]
    rows = []
    for key, name in (("input_tokens", "prompt"), ("output_tokens", "output")):
        sources = [("planned", entry[key]["planned"]),
                   ("as the server counted", entry[key]["server"])]
        trace = entry.get("trace")
        if trace is not None:
            sources.append((f"the trace, × {trace['length_scale']:g}", trace[key]))
        for source, values in sources:
            rows.append([name, source] + [str(values[q]) if values else "—" for q in qs])
    text = (f"Workload: {entry['workload']}, {count(entry['requests'], 'measured request')}. "
            "A rep draws its requests' lengths once, and every arm of the rep sends the same "
            "lengths in the same order, each request with its own nonce. "
            + PINNED[entry["pinned"]])
    trace = entry.get("trace")
    if trace is not None:
        dropped = ", ".join(f"{n} {why}" for why, n in trace["dropped"].items() if n)
        text += (f" The trace {trace['path']} ({trace['format']}, {trace['rows']:,} rows"
                 + (f"; dropped: {dropped}" if dropped else "")
                 + f", SHA-256 {trace['sha256'][:12]}…) gave each request its lengths, "
                 f"multiplied by {trace['length_scale']:g}; a prompt shorter than "
                 f"{entry['min_input_tokens']} tokens (its nonce and a word) was raised to that.")
    columns = ["length", "of"] + [f"p{round(float(q) * 100):d}" for q in qs]
    return [Heading(3, "Workload"), Paragraph(text),
            Table("Request lengths in tokens, by quantile", columns, rows)]
