"""Details of the prefix-cache check: every measured request that reused a cached prefix."""

from __future__ import annotations

from slotbench.core.fmt import count, fmt_int, missing
from slotbench.report.blocks import Heading, Paragraph
from slotbench.report.traps import flagged_table, quiet_evidence

TRAP = "cache"
MAX_ROWS = 30
HOW = (
    "llama.cpp reports cached prompt tokens (cache_n) and the prompt tokens it evaluated; "
    "Ollama reports neither, so there a prompt evaluated at least 4× faster per token than the "
    "target's median, or not at all, counts as a hit."
)


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    if not verdict["fired"]:
        text = (
            f"{verdict['sentence']} No measured request was served, even partly, from a "
            f"prefix cache. {HOW}"
        )
        return [Heading(4, "Prefix cache"), *quiet_evidence(ctx, "cache", text, verdict["title"])]
    rows, n_req, k = ev["rows"], ev["measured_requests"], len(ev["rows"])
    text = (
        f"Warning: {count(k, 'measured request')} of {n_req} {'was' if k == 1 else 'were'} "
        "served, at least partly, from a prefix cache: their prefill was skipped, so their arm "
        "did less work than the others and looks faster than the server is. Every request should "
        "carry its own nonce near the start of the prompt and be sent with the cache off. " + HOW
    )
    columns = ["cell", "position", "request", "prompt tokens", "evaluated", "evidence"]

    def make_row(r):
        return [r["cell"], fmt_int(r["position"]), fmt_int(r["request"]),
                fmt_int(r["prompt_tokens"]), fmt_int(r.get("evaluated")),
                str(r.get("reason") or "")]

    def metric(r):
        return {"name": "evaluated", "value": r.get("evaluated"),
                "text": fmt_int(r.get("evaluated"))}

    return [Heading(4, "Prefix cache"), Paragraph(text, "warning"),
            *flagged_table(ctx, "cache", rows, columns, make_row,
                           "Requests served from a prefix cache", "Prefix-cache hit:", metric,
                           MAX_ROWS)]
