"""The headline: per-arm table, operator gain vs per-user loss sentences, and the batching vs
pipelining decomposition."""

from __future__ import annotations

import pandas as pd

from slotbench import provenance as prov
from slotbench.report.format import (
    DASH,
    SERIAL_ARM,
    _missing,
    _split,
    _union,
    arm_name,
    fmt_change,
    fmt_num,
    fmt_pct,
    fmt_times,
    way,
    with_ci,
)
from slotbench.report.blocks import Bullets, Heading, Paragraph, Sources, Table


# --------------------------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------------------------


def headline_sentence(row) -> str | None:
    """The article's headline: what the top arm buys the operator and costs each user."""
    s, u, t = row.get("speedup"), row.get("user_ratio"), row.get("ttft_ratio")
    if any(_missing(v) for v in (s, u, t)):
        return None
    gain = (s - 1) * 100
    operator = (
        f"buys the operator {gain:.0f}% more throughput"
        if s >= 1
        else f"costs the operator {-gain:.0f}% of its throughput"
    )
    loss = (1 - u) * 100
    user = (
        f"costs each user {loss:.0f}% of their generation rate"
        if u <= 1
        else f"gives each user {-loss:.0f}% more generation rate"
    )
    ttft = (
        f"multiplies time to first token by {t:.1f}×"
        if t >= 1
        else f"cuts time to first token to {t:.1f}× its serial value"
    )
    text = f"{way(row['arm']).capitalize()} concurrency {operator}. It {user} and {ttft}."
    lo, hi = row.get("speedup_lo"), row.get("speedup_hi")
    if not _missing(lo) and not _missing(hi) and lo <= 1 <= hi:
        text += (
            f" The speedup's 95% interval ({fmt_times(lo)} to {fmt_times(hi)}) includes 1×,"
            " so the operator's gain is not distinguishable from none."
        )
    return text


def decomposition_sentence(row, serialised: bool = False) -> str | None:
    """Batching vs pipelining for one parallel arm: which stage earned the aggregate gain.

    A serialised arm (the server ran one request at a time) had nothing to batch, so its
    reading must not present the missing gain as a property of the engine.
    """
    s, g, p, e = (row.get(k) for k in ("speedup", "gen_gain", "pipelining", "efficiency"))
    if any(_missing(v) for v in (s, g, p)):
        return None
    n, w = int(row["arm"]), way(row["arm"])
    if serialised:
        return (
            f"At {w} the server ran one request at a time (see the warning above), so no batch "
            f"ever formed: gen_gain {g:.2f}× and pipelining {p:.2f}× (aggregate {s:.2f}×) "
            "describe a server limited to one slot, not what this engine's batching can do. "
            "Measure again with the server allowing parallel requests to read batching here."
        )
    if g < 1:
        text = (
            f"At {w} the generation stage delivers {g:.2f}×: {n} streams together produce "
            f"{(1 - g) * 100:.0f}% fewer tokens per second than one stream alone. "
        )
        text += (
            f"The {(s - 1) * 100:.0f}% aggregate gain is therefore pipelining (one request's "
            "prefill overlapping another's decode), not batching."
            if s > 1
            else f"Neither batching nor pipelining pays: the aggregate is {s:.2f}×."
        )
    elif abs(p - 1) <= 0.05:
        text = (
            f"At {w} the generation-side gain is {g:.2f}× and the aggregate gain {s:.2f}×: "
            "batching is the whole story."
        )
    elif p > 1:
        text = (
            f"At {w} batching delivers {g:.2f}× and pipelining adds {p:.2f}× on top, "
            f"for {s:.2f}× in aggregate."
        )
    else:
        text = (
            f"At {w} batching delivers {g:.2f}×, but {(1 - p) * 100:.0f}% of it is lost outside "
            f"the generation stage (pipelining {p:.2f}×), leaving {s:.2f}× in aggregate."
        )
    if not _missing(e):
        text += f" Efficiency {fmt_pct(e)}: {s:.2f}× of the {n}× that perfect scaling promises."
    return text


# --------------------------------------------------------------------------------------------
# Blocks per section
# --------------------------------------------------------------------------------------------

SUMMARY_COLUMNS = [
    "arm",
    "reps",
    "aggregate tok/s",
    "speedup [95% CI]",
    "per-user tok/s",
    "per-user change [95% CI]",
    "TTFT s",
    "TTFT ratio [95% CI]",
    "efficiency [95% CI]",
    "gen_gain [95% CI]",
    "pipelining [95% CI]",
]


def summary_row(row) -> list[str]:
    serial = int(row["arm"]) == SERIAL_ARM
    ratio = (lambda col, fmt: DASH) if serial else (lambda col, fmt: with_ci(row, col, fmt))
    reps = row.get("n_reps")
    return [
        arm_name(row["arm"]),
        "n/a" if _missing(reps) else str(int(reps)),
        fmt_num(row.get("agg_tps")),
        ratio("speedup", fmt_times),
        fmt_num(row.get("user_tps")),
        ratio("user_ratio", fmt_change),
        fmt_num(row.get("ttft_s"), 2),
        ratio("ttft_ratio", lambda x: fmt_times(x, 1)),
        ratio("efficiency", fmt_pct),
        ratio("gen_gain", fmt_times),
        ratio("pipelining", fmt_times),
    ]


def _refusal(target: str, verdict: dict | None, thresholds: dict) -> str | None:
    if verdict is None:
        return f"Refused: no headline for {target}. Reason: the checks gave no verdict for it."
    if not verdict.get("refused"):
        return None
    reason = verdict.get("reason") or (
        f"rotation bias {fmt_pct(verdict.get('rotation_bias'), 1)} against a "
        f"{fmt_pct(thresholds['rotation'])} threshold"
    )
    return f"Refused: no headline for {target}. Reason: {str(reason).rstrip('.')}."


# Which column of the per-arm table prints each headline number.
METRIC_COLUMNS = {
    "agg_tps": 2,
    "speedup": 3,
    "user_tps": 4,
    "user_ratio": 5,
    "ttft_s": 6,
    "ttft_ratio": 7,
    "efficiency": 8,
    "gen_gain": 9,
    "pipelining": 10,
}


def headline_refs(target, records, table_rows, index, cells, refused: bool = False) -> tuple:
    """Provenance of the per-arm table, of each row and of each number in a row.

    A within-rep ratio's cells are the arm's cells and the serial cells of the same reps.
    """
    table_id = prov.headline_id(target)
    title = f"Per-arm results of {target}" + (" (not a headline: refused)" if refused else "")
    target_cells = index.labels(target) if index else cells
    refs = [prov.Ref(table_id, "table", title, prov.with_roles((target_cells, "source")), table_id)]
    for r, text in zip(records, table_rows):
        arm = int(r["arm"])
        row_id = prov.headline_id(target, arm)
        fallback = _split(r.get("cells"))
        metrics = [m for m in METRIC_COLUMNS if arm != SERIAL_ARM or m in prov.ABSOLUTE]
        refs.append(
            prov.Ref(
                row_id,
                "table-row",
                f"Per-arm results of {target}, {arm_name(arm)}",
                prov.metric_cells(index, target, arm, metrics[-1], fallback),
                anchor=row_id,
                parent=table_id,
                row=dict(zip(SUMMARY_COLUMNS, text)),
            )
        )
        for m in metrics:
            refs.append(
                prov.Ref(
                    prov.headline_id(target, arm, m),
                    "table-cell",
                    f"{target}, {arm_name(arm)}: {prov.METRIC_TITLES[m]}",
                    prov.metric_cells(index, target, arm, m, fallback),
                    anchor=row_id,
                    parent=row_id,
                    metric={
                        "name": m,
                        "value": r.get(m),
                        "ci_low": r.get(f"{m}_lo"),
                        "ci_high": r.get(f"{m}_hi"),
                        "text": text[METRIC_COLUMNS[m]],
                    },
                )
            )
    return tuple(refs)


def headline_blocks(
    target,
    rows: pd.DataFrame,
    verdict,
    thresholds,
    serialised: frozenset = frozenset(),
    index: prov.CellIndex | None = None,
) -> list:
    refusal = _refusal(target, verdict, thresholds)
    blocks: list = []
    records = [r for _, r in rows.sort_values("arm").iterrows()]
    if refusal:
        blocks.append(Paragraph(refusal, "refusal"))
    else:
        parallel = [
            r for r in records if int(r["arm"]) != SERIAL_ARM and not _missing(r.get("speedup"))
        ]
        top = headline_sentence(parallel[-1]) if parallel else None
        if top and int(parallel[-1]["arm"]) in serialised:
            top += (
                f" The server served {arm_name(parallel[-1]['arm'])} one request at a time "
                "(see the warning above): this is what that server setting costs, not what "
                "the engine can do."
            )
        if top:
            blocks.append(Paragraph(top, "headline"))
            blocks.append(
                Paragraph(
                    "Both are true at once. The aggregate is the number that sets the "
                    "operator's bill; the per-user rate is the number that decides whether "
                    "anyone wants to use the server."
                )
            )
        else:
            blocks.append(Paragraph("No parallel arm has a speedup to headline.", "note"))
        readings = [
            s
            for s in (decomposition_sentence(r, int(r["arm"]) in serialised) for r in parallel)
            if s
        ]
        if readings:
            blocks.append(Heading(3, "Batching or pipelining"))
            blocks.append(Bullets(readings))
    title = "Per-arm results"
    note = (
        "Ratios are within-rep against serial-1 of the same rep; medians across reps, runs "
        "pooled, with 95% bootstrap intervals. gen_gain = per-user rate × concurrency / serial "
        "rate (batching in the generation stage); pipelining = speedup / gen_gain (overlap)."
    )
    kind = ""
    if refusal:
        title += f" {DASH} not a headline (refused, see above)"
        note = "Not a headline: shown for diagnosis only. " + note
        kind = "not-headline"
    table_rows = [summary_row(r) for r in records]
    table_id = prov.headline_id(target)
    row_ids = [prov.headline_id(target, r["arm"]) for r in records]
    blocks.append(Table(title, SUMMARY_COLUMNS, table_rows, note, kind, table_id, row_ids))
    cells = _union(rows.get("cells", []))
    refs = headline_refs(
        target, records, table_rows, index or prov.CellIndex(), cells, bool(refusal)
    )
    blocks.append(Sources(cells, _union(rows.get("raw_sha256", [])), table_id, refs))
    return blocks
