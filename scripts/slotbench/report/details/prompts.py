"""Details of the prompt-length check: the modal length, and every request that differs."""

from __future__ import annotations

from slotbench.core.fmt import count, fmt_int, missing, signed
from slotbench.report.blocks import Heading, Paragraph
from slotbench.report.traps import flagged_table, quiet_evidence

TRAP = "prompts"
MAX_ROWS = 30


def tokenizer_sentence(said: list[str]) -> str:
    """Whether the plan equalised lengths with the server's tokenizer, as the fingerprint says."""
    if not said:
        return ("Whether the plan equalised lengths with the server's own tokenizer is not "
                "recorded in the fingerprint; the equality stated here is measured from the prompt "
                "lengths the server reported.")
    if said == ["server"]:
        return ("The plan equalised lengths with the server's own tokenizer (recorded in the "
                "fingerprint), and the server's reported lengths are checked here.")
    return (f"The plan counted prompt tokens with {', '.join(said)} (recorded in the "
            "fingerprint), not necessarily the server's tokenizer; the server's reported lengths "
            "are what is checked here.")


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    tokenizer = tokenizer_sentence(ev.get("tokenizer") or [])
    if not verdict["assessable"]:
        return [Heading(4, "Prompt length"), Paragraph(f"{verdict['sentence']} {tokenizer}")]
    planned = bool(ev.get("planned_lengths"))
    if not verdict["fired"]:
        same = ("Every arm of a rep sends the same planned lengths in the same order, each "
                "request with its own nonce, so every arm does the same prefill work."
                if planned else "Every request carries its own nonce, and equal length in "
                "tokens gives every arm the same prefill work.")
        text = f"{verdict['sentence'][:-1]}. {same} {tokenizer}"
        return [Heading(4, "Prompt length"),
                *quiet_evidence(ctx, "prompts", text, verdict["title"])]
    rows, n_req = ev["rows"], ev["measured_requests"]
    if planned:
        return _planned(verdict, ctx, rows, n_req, tokenizer)
    modal = ev["modal_prompt_tokens"]
    values = sorted(set(modal.values()))
    modal_text = (f"{values[0]} tokens" if len(values) == 1 else
                  ", ".join(f"{m} tokens in {run}" for run, m in modal.items()))
    k = len(rows)
    text = (
        f"Warning: {count(k, 'measured request')} of {n_req} had a prompt length different from "
        f"{'its' if k == 1 else 'their'} run's modal {modal_text}, as the server counted them. "
        "Their prefill did different work, so an arm holding more of them is not measured on "
        "equivalent requests. The plan must hold prompt length in tokens equal; "
        f"replan with the server's tokenizer. {tokenizer}"
    )
    return _flagged(ctx, rows, text, "modal_prompt_tokens", "run's modal",
                    "Requests with an unequal prompt length", "Unequal prompt length:")


def _planned(verdict: dict, ctx, rows: list, n_req: int, tokenizer: str) -> list:
    """A workload's requests that the server counted at another length than planned."""
    k = len(rows)
    text = (
        f"Warning: {count(k, 'measured request')} of {n_req} had a prompt length other than "
        f"{'its' if k == 1 else 'their'} plan, as the server counted them. Where the server "
        "has a tokenizer endpoint the plan builds every prompt to its exact length; without "
        "one the lengths are estimates, and the differences below are how far they missed. "
        f"{tokenizer}"
    )
    return _flagged(ctx, rows, text, "planned_input_tokens", "planned",
                    "Requests with a prompt length other than planned",
                    "Prompt length other than planned:")


def _flagged(ctx, rows: list, text: str, expected: str, label: str, title: str,
             row_title: str) -> list:
    """The warning and the table of flagged requests, each against its ``expected`` length."""
    columns = ["cell", "position", "request", "prompt tokens", label, "difference"]

    def make_row(r):
        diff = r["prompt_tokens"] - r[expected]
        return [r["cell"], fmt_int(r["position"]), fmt_int(r["request"]),
                fmt_int(r["prompt_tokens"]), fmt_int(r[expected]), signed(f"{int(diff):+d}")]

    def metric(r):
        return {"name": "prompt_tokens", "value": r["prompt_tokens"],
                "text": fmt_int(r["prompt_tokens"])}

    return [Heading(4, "Prompt length"), Paragraph(text, "warning"),
            *flagged_table(ctx, "prompts", rows, columns, make_row, title, row_title, metric,
                           MAX_ROWS)]
