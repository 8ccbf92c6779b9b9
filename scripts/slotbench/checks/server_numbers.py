"""Trap: a server's token counts or timings that disagree with what the client saw
(docs/method.md#server-numbers-are-evidence).

slotbench.tables.crosscheck flags each request whose server-reported output tokens or generation
time cannot be right given the chunks the client received and when (an 800-token count for 8 chunks,
a negative or NaN time, a generation longer than the whole request took). Its cell is kept out of
the headline, the other checks and the figures; this check names them and why.
"""

from __future__ import annotations

from slotbench.checks.base import Tables, Verdict, constant, judged, records
from slotbench.core.cells import label_key, label_series
from slotbench.core.fmt import count
from slotbench.tables import crosscheck as cc

TRAP = "server_numbers"
TITLE = "Server counts and timings (cross-checked with the client)"
ORDER = 5
TABLES = ("server_numbers",)
ALL_CELLS = True  # judged from every request, those out of the headline too
COLUMNS = ["target", "run", "rep", "arm", "position", "request", "output_tokens", "chunks",
           "gen_s", "suspect_reason", "cell"]
# how every verdict of this check names the cross-check's tolerances
TOLERANCES = (" (the cross-check's tolerances: "
              + constant(MAX_TOKENS_PER_CHUNK=cc.MAX_TOKENS_PER_CHUNK, TIME_RATIO=cc.TIME_RATIO,
                         TIME_SLACK_S=cc.TIME_SLACK_S, MIN_SPAN_RATIO=cc.MIN_SPAN_RATIO) + ")")


# The server's generated-token counter over a cell (its /metrics, scraped just before and just
# after) against the tokens the client received: apart by more than this share (and at least
# one token), someone else used the server during the cell, or its counter cannot be trusted.
COUNTER_TOLERANCE = 0.01


def counter_disagreements(cells) -> tuple[int, list[str], str | None]:
    """(cells whose counter could be read, the labels of those that disagree with the client,
    an example) from the cells' server_output_tokens and tokens_out."""
    if "server_output_tokens" not in cells:
        return 0, [], None
    read = cells[cells["server_output_tokens"].notna() & cells["tokens_out"].notna()]
    if read.empty:
        return 0, [], None
    server, client = read["server_output_tokens"].astype(float), read["tokens_out"].astype(float)
    off = (server - client).abs() > (client * COUNTER_TOLERANCE).clip(lower=1.0)
    bad = read[off.to_numpy()]
    if bad.empty:
        return len(read), [], None
    first = bad.iloc[0]
    example = (f"{label_series(bad.iloc[:1]).iloc[0]}: the server counted "
               f"{int(first['server_output_tokens'])} generated tokens, the client received "
               f"{int(first['tokens_out'])}")
    return len(read), sorted(label_series(bad), key=label_key), example


def counter_clause(cells) -> tuple[str, list[str], str | None, bool]:
    """The verdict's words on the token counters, the disagreeing cells, the warning, and
    whether any counter was read at all."""
    n, bad, example = counter_disagreements(cells)
    if not n:
        return ("the server's token counters were not assessable (no /metrics read over any "
                "cell)"), [], None, False
    if not bad:
        return (f"its generated-token counter over each of {count(n, 'cell')} equalled the "
                "client's count"), [], None, True
    warning = (f"Warning: the server's generated-token counter disagreed with what the client "
               f"received in {count(len(bad), 'cell')} of {n} ({example}; "
               + constant(COUNTER_TOLERANCE=COUNTER_TOLERANCE) + "): another client may have "
               "used the server during them, or its counter cannot be trusted.")
    return (f"its generated-token counter disagreed with the client in "
            f"{count(len(bad), 'cell')} of {n} ({example})"), bad, warning, True


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    req = tables.requests
    flagged = req[req["suspect_reason"].notna()] if "suspect_reason" in req else req.iloc[0:0]
    flagged = flagged.assign(cell=label_series(flagged) if len(flagged) else [])
    table = flagged.reindex(columns=COLUMNS)
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target]
        n_req = int((req["target"] == target).sum())
        cells = sorted(set(rows["cell"]), key=label_key)
        clause, off_cells, off_warning, read = counter_clause(
            tables.cells[tables.cells["target"].astype(str) == target])
        if rows.empty:
            summary = f"every server count and timing agreed with the client ({n_req} requests)"
            # the counters' clause joins the summary where they were read; where none was, the
            # detail says so (and the summary reads as it did before servers were scraped)
            detail = f"Server numbers: {summary}; {clause}{TOLERANCES}."
            if read:
                summary = f"{summary}; {clause}"
            if off_warning:
                verdicts.append(judged(
                    TRAP, TITLE, target, True, summary, off_warning.removeprefix("Warning: "),
                    effect="warn", evidence={"warnings": [off_warning]}, cells=off_cells))
                continue
            verdicts.append(judged(TRAP, TITLE, target, False, summary, detail))
            continue
        first = rows.iloc[0]
        example = f"e.g. {first['cell']} request {int(first['request'])}: {first['suspect_reason']}"
        summary = (f"{count(len(rows), 'request')} of {n_req} disagreed with the client "
                   f"({example}); {count(len(cells), 'cell')} kept out of the headline")
        if target not in set(tables.cells["target"].astype(str)):  # no cell left to headline
            reason = (f"the server's numbers for {count(len(rows), 'request')} of {n_req} did not "
                      f"hold up against what the client saw ({example}), and no cell of "
                      f"{target} is left behind the headline")
            verdicts.append(judged(
                TRAP, TITLE, target, True, summary,
                reason[0].upper() + reason[1:] + TOLERANCES + ".",
                effect="refuse", evidence={"rows": records(rows), "reason": reason},
                cells=cells,
            ))
            continue
        warning = (
            f"Warning: the server's numbers for {count(len(rows), 'request')} of {target} did not "
            f"hold up against what the client saw (e.g. {first['cell']} request "
            f"{int(first['request'])}: {first['suspect_reason']}){TOLERANCES}. Their "
            f"{count(len(cells), 'cell')} ({', '.join(cells[:5])}{', …' if len(cells) > 5 else ''})"
            " are kept out of the headline, the checks and the figures."
        )
        verdicts.append(judged(
            TRAP, TITLE, target, True, summary, warning.removeprefix("Warning: "), effect="warn",
            evidence={"rows": records(rows), "warnings": [warning]}, cells=cells,
        ))
    return verdicts, {"server_numbers": table}
