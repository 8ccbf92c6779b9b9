"""The report: operator gain vs per-user loss, batching vs pipelining, and the checks behind them.

build_report assembles one neutral list of blocks (headings, paragraphs, tables, figures,
sources) and renders it twice, as Markdown and as a self-contained HTML page, so the two never
disagree. Every table and figure is followed by the cells and raw-file SHA-256s behind it and by
its provenance id; each table row has one too. The same references make results/provenance.json
(see slotbench.provenance) and the report's closing Provenance section, so a link in the report
and an entry in the record cannot drift apart.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from slotbench import provenance as prov
from slotbench.cells import cell_label

SERIAL_ARM = 1
WAYS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 16: "sixteen"}
MINUS = "\u2212"
DASH = "\u2014"


def arm_name(arm) -> str:
    """serial-1 / parallel-N: the arm names used in every table and figure."""
    arm = int(arm)
    return f"serial-{arm}" if arm == SERIAL_ARM else f"parallel-{arm}"


def way(arm) -> str:
    arm = int(arm)
    return f"{WAYS.get(arm, str(arm))}-way"


# --------------------------------------------------------------------------------------------
# Neutral document structure
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str
    kind: str = ""  # "", "headline", "refusal", "warning", "note"
    anchor: str = ""  # HTML id, for a provenance entry shown as text rather than a table


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    kind: str = ""  # "", "not-headline", "kv"
    anchor: str = ""  # the table's provenance id (HTML id)
    row_ids: list[str] = field(default_factory=list)  # one provenance id per row, or none
    link_column: int | None = None  # a column whose cells are provenance ids (HTML: links)


@dataclass(frozen=True)
class Figure:
    fig_id: str
    title: str
    caption: str
    file: str
    path: str | None


@dataclass(frozen=True)
class Sources:
    cells: list[str] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    prov: str = ""  # provenance id of the table or figure above
    refs: tuple = ()  # the provenance.Ref entries it stands for (table, rows, numbers)


@dataclass(frozen=True)
class Code:
    text: str
    lang: str = ""


@dataclass(frozen=True)
class ProvenanceIndex:
    """Every provenance entry, in report order: the record's entries as the report lists them."""

    entries: tuple = ()


# --------------------------------------------------------------------------------------------
# Number formatting
# --------------------------------------------------------------------------------------------


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or pd.isna(x)


def _signed(text: str) -> str:
    return text.replace("-", MINUS)


def fmt_num(x, digits: int = 1) -> str:
    return "n/a" if _missing(x) else _signed(f"{float(x):.{digits}f}")


def fmt_times(x, digits: int = 2) -> str:
    return "n/a" if _missing(x) else f"{float(x):.{digits}f}×"


def fmt_pct(x, digits: int = 0) -> str:
    return "n/a" if _missing(x) else _signed(f"{float(x) * 100:.{digits}f}%")


def fmt_change(ratio, digits: int = 0) -> str:
    """A ratio as a signed percent change: 0.35 -> −65%, 1.09 -> +9%."""
    return "n/a" if _missing(ratio) else _signed(f"{(float(ratio) - 1) * 100:+.{digits}f}%")


def with_ci(row, col: str, fmt) -> str:
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if _missing(lo) or _missing(hi):
        return fmt(row.get(col))
    return f"{fmt(row.get(col))} [{fmt(lo)}, {fmt(hi)}]"


def _split(value) -> list[str]:
    if _missing(value) or value == "":
        return []
    return [v for v in str(value).split(";") if v]


def _union(values) -> list[str]:
    return sorted({item for v in values for item in _split(v)})


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


def rotation_blocks(target, positions: pd.DataFrame, verdict, thresholds, hash_of) -> list:
    blocks: list = [Heading(3, "Rotation bias")]
    verdict = verdict or {}
    bias, worst = verdict.get("rotation_bias"), verdict.get("worst_arm")
    thr = thresholds["rotation"]
    if _missing(bias):
        blocks.append(Paragraph("No rotation bias was computed for this target.", "note"))
    else:
        side = "within" if bias <= thr else "above"
        worst_txt = "" if _missing(worst) else f" (worst arm {arm_name(worst)})"
        blocks.append(
            Paragraph(
                f"Rotation bias {fmt_pct(bias, 1)}{worst_txt}: the widest relative spread of an "
                f"arm's median aggregate tok/s across the positions it occupied. That is {side} "
                f"the {fmt_pct(thr)} threshold (above it the report refuses a headline)."
            )
        )
    rows = positions[positions["target"] == target] if not positions.empty else positions
    if rows.empty:
        return blocks
    slots = sorted(rows["position"].astype(int).unique())
    arms_info = verdict.get("arms", {})
    columns = ["arm", *[f"position {p}" for p in slots], "spread"]
    table_id = prov.rotation_id(target)
    labels = _union(rows["cells"])
    refs = [
        prov.Ref(
            table_id,
            "table",
            f"Rotation bias of {target}: median aggregate tok/s of each arm at each position",
            prov.with_roles((labels, "source")),
            table_id,
            metric=(
                None
                if _missing(bias)
                else {"name": "rotation_bias", "value": bias, "text": fmt_pct(bias, 1)}
            ),
        )
    ]
    table_rows, row_ids = [], []
    for arm, grp in rows.groupby("arm", sort=True):
        by_pos = {int(p): r for p, r in zip(grp["position"], grp.itertuples())}
        cells = [
            (
                f"{fmt_num(by_pos[p].median_agg_tps)} (n={int(by_pos[p].n_cells)})"
                if p in by_pos
                else DASH
            )
            for p in slots
        ]
        spread = arms_info.get(str(int(arm)), {}).get("spread")
        table_rows.append([arm_name(arm), *cells, fmt_pct(spread, 1)])
        row_id = prov.positions_id(target, arm)
        row_ids.append(row_id)
        refs.append(
            prov.Ref(
                row_id,
                "table-row",
                f"Rotation bias of {target}, {arm_name(arm)}: median aggregate tok/s by position",
                prov.with_roles((_union(grp["cells"]), "arm")),
                anchor=row_id,
                parent=table_id,
                metric={"name": "spread", "value": spread, "text": fmt_pct(spread, 1)},
                row=dict(zip(columns, table_rows[-1])),
            )
        )
        for p in slots:
            if p not in by_pos:
                continue
            refs.append(
                prov.Ref(
                    prov.positions_id(target, arm, p),
                    "table-cell",
                    f"{target}, {arm_name(arm)} at position {p}: median aggregate tok/s",
                    prov.with_roles((_split(by_pos[p].cells), "arm")),
                    anchor=row_id,
                    parent=row_id,
                    metric={
                        "name": "median_agg_tps",
                        "value": by_pos[p].median_agg_tps,
                        "text": cells[slots.index(p)],
                    },
                )
            )
    blocks.append(
        Table(
            "Median aggregate tok/s by position (n = cells)",
            columns,
            table_rows,
            anchor=table_id,
            row_ids=row_ids,
        )
    )
    hashes = sorted({hash_of[c] for c in labels if c in hash_of})
    blocks.append(Sources(labels, hashes, table_id, tuple(refs)))
    return blocks


def deviance_blocks(
    target,
    deviance: pd.DataFrame,
    threshold,
    target_cells,
    target_hashes,
    index: prov.CellIndex | None = None,
) -> list:
    blocks: list = [Heading(3, "Output deviance")]
    rows = deviance[deviance["target"] == target] if not deviance.empty else deviance
    dev_id = prov.deviance_id(target)
    if rows.empty:
        text = f"No cell deviates more than {fmt_pct(threshold)} from its run's modal output."
        blocks.append(Paragraph(text, anchor=dev_id))
        ref = prov.Ref(
            dev_id,
            "table",
            f"Output deviance of {target}: {text}",
            prov.with_roles((target_cells, "source")),
            dev_id,
        )
        blocks.append(Sources(target_cells, target_hashes, dev_id, (ref,)))
        return blocks
    rows = rows.sort_values(["run", "rep", "arm"])
    labels = [
        (
            r["cell"]
            if "cell" in r and not _missing(r["cell"])
            else cell_label(r["target"], r["run"], r["rep"], r["arm"])
        )
        for _, r in rows.iterrows()
    ]
    n = len(rows)
    blocks.append(
        Paragraph(
            f"{n} cell{'s' if n != 1 else ''} deviate{'s' if n == 1 else ''} more than "
            f"{fmt_pct(threshold)} from {'its' if n == 1 else 'their'} run's modal output. Each is "
            "named with its wall-clock and throughput effect against the same arm's other cells. "
            "Throughput here is tokens produced over the wall clock that produced them, so such a "
            "cell is still measured correctly; a wall-over-wall comparison would book its extra "
            "output as a concurrency effect."
        )
    )
    index = index or prov.CellIndex()
    columns = [
        "cell",
        "tokens",
        "modal",
        "deviation",
        "wall s",
        "wall effect",
        "agg tok/s",
        "throughput effect",
    ]
    refs = [
        prov.Ref(
            dev_id,
            "table",
            f"Output deviance of {target}: cells more than {fmt_pct(threshold)} from their run's "
            "modal output",
            prov.with_roles((labels, "deviant")),
            dev_id,
        )
    ]
    items, table_rows, row_ids = [], [], []
    for label, (_, r) in zip(labels, rows.iterrows()):
        wall, tps = r.get("wall_effect"), r.get("tps_effect")
        wall_txt = (
            "n/a"
            if _missing(wall)
            else f"{abs(wall) * 100:.0f}% {'slower' if wall > 0 else 'faster'}"
        )
        tps_txt = (
            "n/a" if _missing(tps) else f"{abs(tps) * 100:.0f}% {'higher' if tps > 0 else 'lower'}"
        )
        items.append(
            f"{label} generated {int(r['tokens_out'])} tokens against a modal "
            f"{int(r['modal_tokens'])} ({fmt_change(1 + r['deviation'])}); by the wall clock it "
            f"was {wall_txt} and its throughput {tps_txt}."
        )
        table_rows.append(
            [
                label,
                str(int(r["tokens_out"])),
                str(int(r["modal_tokens"])),
                fmt_change(1 + r["deviation"]),
                fmt_num(r.get("wall_s"), 2),
                "n/a" if _missing(wall) else fmt_change(1 + wall),
                fmt_num(r.get("agg_tps")),
                "n/a" if _missing(tps) else fmt_change(1 + tps),
            ]
        )
        row_id = prov.deviance_id(target, label)
        row_ids.append(row_id)
        # its effects are against the same arm's normal cells of the same run
        comparison = [c for c in index.labels(target, r["arm"], r["run"]) if c not in set(labels)]
        refs.append(
            prov.Ref(
                row_id,
                "table-row",
                f"Deviant cell {label}: output, wall-clock and throughput against the same "
                "arm's other cells in its run",
                prov.with_roles(([label], "deviant"), (comparison, "comparison")),
                anchor=row_id,
                parent=dev_id,
                metric={
                    "name": "deviation",
                    "value": r.get("deviation"),
                    "text": fmt_change(1 + r["deviation"]),
                },
                row=dict(zip(columns, table_rows[-1])),
            )
        )
    blocks.append(Bullets(items))
    blocks.append(Table("Deviant cells", columns, table_rows, anchor=dev_id, row_ids=row_ids))
    blocks.append(Sources(sorted(labels), _union(rows.get("raw_sha256", [])), dev_id, tuple(refs)))
    return blocks


# --------------------------------------------------------------------------------------------
# Serialisation: a parallel arm the server served one request at a time
# --------------------------------------------------------------------------------------------


def _truthy(x) -> bool:
    if isinstance(x, str):
        return x.strip().lower() in ("true", "1", "yes")
    return not _missing(x) and bool(x)


def serialisation_rows(target, serialisation: pd.DataFrame | None, verdict) -> list[dict]:
    """The target's parallel arms from serialisation.csv, else from the verdict's summary."""
    if serialisation is not None and not serialisation.empty:
        rows = serialisation[serialisation["target"] == target].sort_values("arm")
        if not rows.empty:
            return [
                {**r, "arm": int(r["arm"]), "serialised": _truthy(r["serialised"])}
                for r in rows.to_dict("records")
            ]
    arms = (verdict or {}).get("serialisation") or {}
    return [
        {**info, "arm": int(arm), "serialised": _truthy(info.get("serialised"))}
        for arm, info in sorted(arms.items(), key=lambda kv: int(kv[0]))
    ]


def _stated_parallel(fps: list[dict]) -> tuple[str, int | None] | None:
    """The parallel setting the target claims (stated OLLAMA_NUM_PARALLEL or -np), if any."""
    for fp in fps:
        server = fp.get("server") or {}
        env = server.get("ollama_env") or {}
        if "OLLAMA_NUM_PARALLEL" in env:
            value = env["OLLAMA_NUM_PARALLEL"]
            return f"OLLAMA_NUM_PARALLEL={value}", _int_or_none(value)
        flags = server.get("flags") or {}
        if "parallel" in flags:
            return f"--parallel {flags['parallel']}", _int_or_none(flags["parallel"])
    return None


def serialisation_warning(row: dict, fps: list[dict]) -> str:
    name = arm_name(row["arm"])
    text = f"Warning: {name} was served one request at a time."
    n, k = row.get("n_cells"), row.get("serialised_cells")
    if not _missing(n) and not _missing(k):
        flight = row.get("in_flight_median")
        flight = row["arm"] if _missing(flight) else int(flight)
        text += (
            f" In {int(k)} of {_count(int(n), 'cell')} no two of its requests were generating at "
            f"once, although the client had {flight} in flight"
        )
        gap, wait = row.get("queue_gap_slope_s"), row.get("wait_slope_s")
        if not _missing(gap):
            text += (
                f"; Ollama's own queue wait grew by {fmt_num(gap, 2)} s for each place a "
                "request stood in the order of service"
            )
        elif not _missing(wait):
            text += (
                f"; time to first token grew by {fmt_num(wait, 2)} s for each place a request "
                "stood in the order of service"
            )
        text += "."
    elif not _missing(row.get("max_overlap_median")):
        text += " At most one of its requests was generating at any moment."
    cause = row.get("cause")
    cause = cause if isinstance(cause, str) and cause else "a server limited to one slot"
    # the checks' wording: the sentence above already says its first half
    lead = "the server served one request at a time: likely "
    if cause.startswith(lead):
        cause = cause[len(lead) :]
    text += f" Likely cause: {cause.rstrip('.')}."
    stated = _stated_parallel(fps)
    if stated and (stated[1] is None or stated[1] > 1):
        text += (
            f" The stated setting is {stated[0]}, so the server either did not run with it or "
            "forced this model to one slot."
        )
    text += (
        f" Read {name}'s speedup, gen_gain and pipelining as the cost of a queue, not as the "
        "engine's batching."
    )
    return text


SERIALISATION_TABLE_COLUMNS = [
    "arm",
    "cells",
    "in flight (client, median)",
    "generating at once (median of cell max)",
    "serialised cells",
    "queue-wait slope s/place (Ollama)",
    "TTFT-wait slope s/place (client)",
    "served one at a time",
]


def serialisation_blocks(target, rows: list[dict], hash_of) -> list:
    rows = [r for r in rows if "n_cells" in r]  # the table needs serialisation.csv's detail
    if not rows:
        return []
    blocks: list = [
        Heading(3, "Server concurrency"),
        Paragraph(
            "Whether the server really ran a parallel arm's requests at once, from request "
            "timings: the most requests whose generation windows (first token to last chunk, "
            "5 ms tolerance) overlap in each cell. A parallel arm is marked as served one at a "
            "time when that is 1 in (nearly) all its cells although the client had more in "
            "flight. Corroboration: Ollama's queue wait (total − load − prompt eval − eval "
            "duration) and the client's TTFT over the serial arm's median, each as a slope in "
            "seconds per place in the order of service."
        ),
    ]
    table_id = prov.serialisation_id(target)
    table_rows, capped, row_ids, refs = [], [], [], []
    for r in rows:
        table_rows.append(
            [
                arm_name(r["arm"]),
                "n/a" if _missing(r.get("n_cells")) else str(int(r["n_cells"])),
                fmt_num(r.get("in_flight_median"), 1),
                fmt_num(r.get("max_overlap_median"), 1),
                "n/a" if _missing(r.get("serialised_cells")) else str(int(r["serialised_cells"])),
                fmt_num(r.get("queue_gap_slope_s"), 3),
                fmt_num(r.get("wait_slope_s"), 3),
                "yes" if r["serialised"] else "no",
            ]
        )
        row_id = prov.serialisation_id(target, r["arm"])
        row_ids.append(row_id)
        refs.append(
            prov.Ref(
                row_id,
                "table-row",
                f"Server concurrency of {target}, {arm_name(r['arm'])}: requests generating at "
                "once",
                prov.with_roles((_split(r.get("cells")), "arm")),
                anchor=row_id,
                parent=table_id,
                row=dict(zip(SERIALISATION_TABLE_COLUMNS, table_rows[-1])),
            )
        )
        overlap = r.get("max_overlap_median")
        if not r["serialised"] and not _missing(overlap) and 1 < overlap < r["arm"]:
            capped.append(
                f"At {arm_name(r['arm'])} at most {fmt_num(overlap, 1)} requests were generating "
                f"at once in the median cell, fewer than the {r['arm']} in flight: the server "
                "seems to run fewer slots than this arm asks for."
            )
    blocks.append(
        Table(
            "Requests generating at once",
            SERIALISATION_TABLE_COLUMNS,
            table_rows,
            anchor=table_id,
            row_ids=row_ids,
        )
    )
    labels = _union(r.get("cells") for r in rows)
    table_ref = prov.Ref(
        table_id,
        "table",
        f"Server concurrency of {target}: requests generating at once",
        prov.with_roles((labels, "source")),
        table_id,
    )
    hashes = sorted({hash_of[c] for c in labels if c in hash_of})
    blocks.append(Sources(labels, hashes, table_id, (table_ref, *refs)))
    if capped:
        blocks.append(Bullets(capped))
    return blocks


# --------------------------------------------------------------------------------------------
# How the numbers were measured: timing source, pinned output length
# --------------------------------------------------------------------------------------------

CLIENT_TIMING = (
    "client = derived from token arrival times on the client, because the server sent no timings"
)
CLIENT_WHAT = "token arrival times measured on the client, because the server sent no timings"


def timing_source_line(target, requests: pd.DataFrame | None) -> str | None:
    """Which clock each arm's per-user numbers came from: the server's timings or the client's."""
    if requests is None or requests.empty or "timing_source" not in requests:
        return None
    rows = _measured_requests(requests, target)
    if rows.empty:
        return None
    source = rows["timing_source"].fillna("unknown").astype(str)
    if source.nunique() == 1:
        only = source.iloc[0]
        what = {
            "server": "the server's own generation timings",
            "client": CLIENT_WHAT,
        }.get(only, "an unrecorded source")
        text = (
            f"Timing source: {only}, for all {_count(len(rows), 'request')}: every per-user "
            f"number (per-user tok/s, its change, gen_gain, pipelining) comes from {what}."
        )
        if only == "client":
            text += " Client timings include streaming and network delays."
        return text
    parts = []
    for arm, grp in rows.assign(_src=source).groupby("arm", sort=True):
        counts = grp["_src"].value_counts().sort_index()
        if len(counts) == 1:
            parts.append(f"{arm_name(arm)}: {counts.index[0]}")
        else:
            parts.append(
                f"{arm_name(arm)}: "
                + ", ".join(f"{src} for {_count(int(n), 'request')}" for src, n in counts.items())
            )
    return "Timing source (per-user numbers per arm): " + "; ".join(parts) + f" ({CLIENT_TIMING})."


def _backend(fp: dict) -> str | None:
    return (fp.get("server") or {}).get("backend") or (
        (fp.get("config") or {}).get("target") or {}
    ).get("backend")


def pinned_line(target, fps: list[dict]) -> str:
    """Whether output length was pinned (ignore_eos), which Ollama cannot do."""
    if not fps:
        return f"Output length pinned: unknown (no fingerprint recorded for {target})."
    answers = {}
    for fp in fps:
        conf = fp.get("config") or {}
        ignore = ((conf.get("target") or {}).get("ignore_eos")) is True
        answers[str(fp.get("run"))] = (ignore, _backend(fp), (conf.get("measurement") or {}))
    values = {a[0] for a in answers.values()}
    if len(values) > 1:
        per_run = ", ".join(f"{'yes' if a[0] else 'no'} in {run}" for run, a in answers.items())
        return f"Output length pinned: {per_run} (ignore_eos differs between runs)."
    ignore, backend, measurement = next(iter(answers.values()))
    predict = measurement.get("num_predict")
    if ignore:
        budget = f" ({predict} tokens)" if predict is not None else ""
        return (
            "Output length pinned: yes. ignore_eos is set, so every request generates up to "
            f"num_predict{budget} instead of stopping at its end-of-sequence token."
        )
    if backend == "ollama":
        return (
            "Output length pinned: no. Ollama ignores ignore_eos, so output length cannot be "
            "pinned on this target: each request stops at its end-of-sequence token or at "
            "num_predict, and throughput counts the tokens actually produced (cells far from "
            "their run's modal output are named under Output deviance)."
        )
    return (
        "Output length pinned: no (ignore_eos is not set). Each request stops at its "
        "end-of-sequence token or at num_predict; throughput counts the tokens actually produced "
        "(cells far from their run's modal output are named under Output deviance)."
    )


# --------------------------------------------------------------------------------------------
# Ollama: server facts, loaded models (ollama ps) before the run and after each rep
# --------------------------------------------------------------------------------------------


def fmt_bytes(x) -> str:
    if _missing(x):
        return "n/a"
    x = float(x)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= size:
            return f"{x / size:.1f} {unit}"
    return f"{x:.0f} B"


def _int_or_none(x):
    try:
        return None if _missing(x) else int(x)
    except (TypeError, ValueError):
        return None  # e.g. a stated setting written as text


def _full_name(name) -> str:
    name = str(name or "")
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _when_text(whens: list[str], total: int) -> str:
    if len(whens) <= 3:
        return ", ".join(whens)
    return f"{len(whens)} of {total} snapshots, {whens[0]} to {whens[-1]}"


def ollama_facts(fp: dict) -> list[list[str]]:
    server, model = fp.get("server") or {}, fp.get("model") or {}
    tag = server.get("model_tag") or {}
    details = (server.get("show") or {}).get("details") or {}
    target_conf = _target_conf(fp)

    def val(*candidates):
        return next((c for c in candidates if not _missing(c) and c != ""), None)

    size = val(model.get("size_bytes"), tag.get("size"))
    num_ctx = val(server.get("requested_num_ctx"), target_conf.get("num_ctx"))
    rows = [
        ["version", val(server.get("version"))],
        ["model", val(model.get("name"), target_conf.get("model"), tag.get("name"))],
        ["digest", val(model.get("digest"), tag.get("digest"))],
        ["size", None if size is None else f"{fmt_bytes(size)} ({int(size)} bytes)"],
        ["quantization_level", val(details.get("quantization_level"), model.get("quantisation"))],
        ["parameter_size", val(details.get("parameter_size"), model.get("parameter_size"))],
        ["family", val(details.get("family"), model.get("family"))],
        ["requested num_ctx", num_ctx],
    ]
    env = server.get("ollama_env")
    if isinstance(env, dict) and env:
        rows += [[f"stated {k}", v] for k, v in sorted(env.items())]
    else:
        rows.append(["stated OLLAMA_* settings", "none stated (they are not visible over HTTP)"])
    if server.get("server_config_line"):
        rows.append(["server config line (managed server's log)", server["server_config_line"]])
    return [[k, "n/a" if v is None else str(v)] for k, v in rows]


def _target_conf(fp: dict) -> dict:
    return (fp.get("config") or {}).get("target") or {}


def ps_snapshots(target, fps: list[dict], servers: list[dict], cells_of) -> list[tuple]:
    """(when, server section, cells) for each /api/ps seen: before each run, after each rep."""
    snapshots = [
        (f"before {fp.get('run', '?')}", fp.get("server") or {}, cells_of(target, fp.get("run")))
        for fp in fps
    ]
    states = sorted(
        (s for s in servers if s.get("target") == target),
        key=lambda s: (str(s.get("run")), int(s.get("rep", 0))),
    )
    for state in states:
        server = state.get("server") or {}
        if server.get("backend", "ollama") != "ollama":
            continue
        run, rep = str(state.get("run")), int(state.get("rep", 0))
        rep_cells = [c for c in cells_of(target, run) if c.startswith(f"{target}/{run}/rep{rep}/")]
        snapshots.append((f"after {run}/rep{rep}", server, rep_cells))
    return snapshots


PS_COLUMNS = ["when", "model", "size", "in VRAM", "on CPU", "context length", "expires at"]


def _ps_rows(when: str, server: dict) -> list[tuple[list[str], dict | None]]:
    """Table rows of one snapshot, each with the parsed model entry (None for a placeholder)."""
    ps = server.get("ps")
    if not isinstance(ps, list):
        why = ps.get("unavailable") if isinstance(ps, dict) else None
        text = f"(unavailable: {why})" if why else "(ps not recorded)"
        return [([when, text, *["n/a"] * 5], None)]
    if not ps:
        return [([when, "(no model loaded)", *["n/a"] * 5], None)]
    rows = []
    for m in (m for m in ps if isinstance(m, dict)):
        size, vram = _int_or_none(m.get("size")), _int_or_none(m.get("size_vram"))
        entry = {
            "name": str(m.get("name") or m.get("model") or "?"),
            "names": {_full_name(m.get("name")), _full_name(m.get("model"))},
            "size": size,
            "vram": vram,
            "ctx": _int_or_none(m.get("context_length")),
            "cpu_share": None if not size or vram is None else max(0.0, 1 - vram / size),
        }
        row = [
            when,
            entry["name"],
            fmt_bytes(size),
            fmt_bytes(vram),
            "n/a" if entry["cpu_share"] is None else fmt_pct(entry["cpu_share"]),
            "n/a" if entry["ctx"] is None else str(entry["ctx"]),
            str(m.get("expires_at") or "n/a"),
        ]
        rows.append((row, entry))
    return rows


def ps_warnings(seen: list[tuple[str, dict]], models: set, requested: set, total: int) -> list:
    """CPU share and context warnings for the target's own model, grouped over snapshots."""
    partial, on_cpu, ctx_diff = {}, {}, {}
    for when, e in seen:
        if models and not e["names"] & models:
            continue  # another client's model: shown in the table, not ours to warn about
        if e["size"] and e["vram"] == 0:
            on_cpu.setdefault((e["name"], e["size"]), []).append(when)
        elif e["size"] and e["vram"] is not None and e["vram"] < e["size"]:
            partial.setdefault((e["name"], round(e["cpu_share"], 3), e["size"]), []).append(when)
        for req in requested:
            if e["ctx"] is not None and e["ctx"] != req:
                ctx_diff.setdefault((e["name"], e["ctx"], req), []).append(when)
    blocks: list = []
    for (name, share, size), whens in partial.items():
        blocks.append(
            Paragraph(
                f"Warning: {name} was partly on the CPU: {fmt_pct(share)} of its "
                f"{fmt_bytes(size)} was in system memory, not VRAM (ollama ps: "
                f"{_when_text(whens, total)}). The CPU part sets the pace of every pass over the "
                "weights, so these numbers describe a split model, not this GPU; a smaller "
                "num_ctx, fewer parallel slots or a smaller model may fit it entirely.",
                "warning",
            )
        )
    for (name, size), whens in on_cpu.items():
        blocks.append(
            Paragraph(
                f"{name} ran entirely on the CPU: ollama ps reports none of its {fmt_bytes(size)} "
                f"in VRAM ({_when_text(whens, total)}). These are CPU numbers."
            )
        )
    for (name, ctx, req), whens in ctx_diff.items():
        text = (
            f"Warning: ollama ps reports a context length of {ctx} for {name} "
            f"({_when_text(whens, total)}), but the pipeline requested num_ctx {req}. The loaded "
            "model does not match the measured requests' load-time options: another client may "
            "have loaded it, or Ollama chose another context, and a request may have paid a "
            "reload."
        )
        if req and ctx > req and ctx % req == 0:
            text += (
                f" {ctx} is {ctx // req}× {req}: some Ollama versions report the context of "
                "all parallel slots together."
            )
        blocks.append(Paragraph(text, "warning"))
    return blocks


def ollama_blocks(target, fps: list[dict], servers: list[dict], cells_of, hashes_of, hash_of):
    """Version, model, stated settings and every /api/ps snapshot of an Ollama target."""
    fps = [fp for fp in fps if (fp.get("server") or {}).get("backend") == "ollama"]
    if not fps:
        return []
    models = {
        _full_name(m)
        for fp in fps
        for m in ((fp.get("model") or {}).get("name"), _target_conf(fp).get("model"))
        if m
    }
    requested = {
        _int_or_none(
            (fp.get("server") or {}).get("requested_num_ctx") or _target_conf(fp).get("num_ctx")
        )
        for fp in fps
    } - {None}
    snapshots = ps_snapshots(target, fps, servers, cells_of)
    table_rows, seen, labels = [], [], set()
    for when, server, snap_cells in snapshots:
        labels.update(snap_cells)
        for row, entry in _ps_rows(when, server):
            table_rows.append(row)
            if entry is not None:
                seen.append((when, entry))

    blocks: list = [Heading(3, "Ollama server")]
    blocks += ps_warnings(seen, models, requested, len(snapshots))
    for fp in fps:
        run = str(fp.get("run", "?"))
        facts = ollama_facts(fp)
        title, fid = f"Ollama facts of {target}/{run}", prov.ollama_id(target, run)
        blocks.append(Table(title, ["fact", "value"], facts, kind="kv", anchor=fid))
        cells = cells_of(target, run)
        ref = prov.Ref(fid, "table", title, prov.with_roles((cells, "source")), fid)
        blocks.append(Sources(cells, hashes_of(target, run), fid, (ref,)))
    title, ps_id = "Loaded models (ollama ps) before each run and after each rep", prov.ollama_id(
        target, "ps"
    )
    blocks.append(
        Table(
            title,
            PS_COLUMNS,
            table_rows,
            note="size, size_vram and context_length as /api/ps reports them; on CPU = 1 − "
            "size_vram / size.",
            anchor=ps_id,
        )
    )
    labels = sorted(labels)
    ref = prov.Ref(
        ps_id, "table", f"{title} ({target})", prov.with_roles((labels, "source")), ps_id
    )
    hashes = sorted({hash_of[c] for c in labels if c in hash_of})
    blocks.append(Sources(labels, hashes, ps_id, (ref,)))
    return blocks


def flatten(obj, prefix: str = "") -> list[tuple[str, str]]:
    """Nested dicts/lists as dotted key/value pairs, so new fingerprint keys need no code."""
    if isinstance(obj, dict):
        if not obj:
            return [(prefix, "{}")] if prefix else []
        out = []
        for key in obj:
            out += flatten(obj[key], f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return [(prefix, ", ".join("null" if v is None else str(v) for v in obj))]
        out = []
        for i, v in enumerate(obj):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, "null" if obj is None else str(obj))]


def fingerprint_blocks(fingerprints: list[dict], cells_of, hashes_of) -> list:
    blocks: list = [Heading(2, "Fingerprints")]
    if not fingerprints:
        blocks.append(Paragraph("No fingerprint was recorded.", "note"))
        return blocks
    for fp in sorted(fingerprints, key=lambda f: (str(f.get("target")), str(f.get("run")))):
        target, run = str(fp.get("target", "?")), str(fp.get("run", "?"))
        pairs = [(k, v) for k, v in flatten(fp) if k not in ("target", "run")]
        blocks.append(Heading(3, f"{target} / {run}"))
        title, fid = f"Fingerprint of {target}/{run}", prov.fingerprint_id(target, run)
        blocks.append(
            Table(title, ["key", "value"], [list(p) for p in pairs], kind="kv", anchor=fid)
        )
        cells = cells_of(target, run)
        ref = prov.Ref(fid, "table", title, prov.with_roles((cells, "source")), fid)
        blocks.append(Sources(cells, hashes_of(target, run), fid, (ref,)))
    return blocks


def figure_blocks(figures_sources: dict, figure_paths: dict) -> list:
    blocks: list = [Heading(2, "Figures")]
    for fig_id, src in figures_sources.items():
        path = figure_paths.get(fig_id)
        blocks.append(
            Figure(
                fig_id,
                src.get("title", fig_id),
                src.get("caption", ""),
                src.get("file", f"{fig_id}.png"),
                None if path is None else str(path),
            )
        )
        cells = list(src.get("cells", []))
        fid = prov.figure_id(fig_id)
        ref = prov.Ref(
            fid,
            "figure",
            src.get("title", fig_id),
            prov.with_roles((cells, "source")),
            f"fig-{fig_id}",
        )
        blocks.append(Sources(cells, list(src.get("raw_sha256", [])), fid, (ref,)))
    return blocks


# --------------------------------------------------------------------------------------------
# Measurement integrity: each trap, whether its detector fired, and the evidence
# --------------------------------------------------------------------------------------------

INTEGRITY_INPUTS = (
    "prompts", "cache_hits", "control", "thermal_summary", "burst", "client", "sufficiency",
    "thermal",
)  # fmt: skip
# A serial-arm loss from burst to plateau beyond this is flagged (the article lost 8.2%).
DRIFT_THRESHOLD = 0.05
ARTICLE_DRIFT = 0.082
# Rows shown in a table of flagged requests; the rest stay in the checks' CSV.
MAX_ROWS = 30
CONTROL_OFF = (
    "Control arm off: set control_arm: true to measure how much a shared prefix would inflate "
    "the parallel arms."
)


@dataclass(frozen=True)
class Trap:
    """One line of the integrity overview and the blocks with its evidence."""

    name: str
    fired: str  # "yes", "no", "not checked", "off", …
    evidence: str
    ref_id: str = ""  # provenance id of the evidence, when it is shown
    blocks: tuple = ()


@dataclass(frozen=True)
class TargetContext:
    """What every trap of one target needs to name its cells and raw files."""

    target: str
    cells: list
    hashes: list
    index: prov.CellIndex
    overview_id: str

    def hashes_for(self, labels) -> list[str]:
        found = {self.index.info(label).get("raw_sha256") for label in labels}
        return sorted(h for h in found if h is not None and not _missing(h))


def _rows_of(frame: pd.DataFrame | None, target) -> pd.DataFrame:
    if frame is None or frame.empty or "target" not in frame:
        return pd.DataFrame()
    return frame[frame["target"].astype(str) == str(target)]


def _labels_of(rows: pd.DataFrame) -> list[str]:
    if "cell" in rows:
        return [
            str(c) if not _missing(c) else cell_label(t, r, p, a)
            for c, t, r, p, a in zip(rows["cell"], rows["target"], rows["run"], rows["rep"],
                                     rows["arm"])
        ]  # fmt: skip
    return [cell_label(*k) for k in rows[["target", "run", "rep", "arm"]].itertuples(index=False)]


def _ms(seconds) -> str:
    return "n/a" if _missing(seconds) else f"{float(seconds) * 1000:.1f} ms"


def _duration(seconds) -> str:
    if _missing(seconds):
        return "n/a"
    s = float(seconds)
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


def _int_text(x) -> str:
    return "n/a" if _missing(x) else str(int(x))


def _signed_int(x) -> str:
    return "n/a" if _missing(x) else _signed(f"{int(x):+d}")


def _measured_requests(requests: pd.DataFrame | None, target) -> pd.DataFrame:
    """The target's requests of the measured arms (the control arm repeats prompts on purpose)."""
    rows = _rows_of(requests, target)
    if rows.empty:
        return rows
    if "control" in rows:
        rows = rows[~rows["control"].map(_truthy)]
    return rows


def _modal_lengths(requests: pd.DataFrame) -> dict[str, int]:
    """run -> modal server-reported prompt length (the smallest mode, as the check uses)."""
    if requests.empty or "prompt_tokens" not in requests:
        return {}
    rows = requests.dropna(subset=["prompt_tokens"])
    return {
        str(run): int(grp["prompt_tokens"].mode().min())
        for run, grp in rows.groupby("run", sort=True)
    }


def _fp_measurement(fp: dict) -> dict:
    return (fp.get("config") or {}).get("measurement") or {}


def tokenizer_sentence(fps: list[dict]) -> str:
    """Whether the plan equalised lengths with the server's tokenizer, if the fingerprint says."""
    said = {
        str(v)
        for fp in fps
        for v in ((fp.get("plan") or {}).get("tokenizer"), _fp_measurement(fp).get("tokenizer"))
        if v is not None
    }
    if not said:
        return (
            "Whether the plan equalised lengths with the server's own tokenizer is not recorded "
            "in the fingerprint; the equality stated here is measured from the prompt lengths "
            "the server reported."
        )
    if said == {"server"}:
        return (
            "The plan equalised lengths with the server's own tokenizer (recorded in the "
            "fingerprint), and the server's reported lengths are checked here."
        )
    return (
        f"The plan counted prompt tokens with {', '.join(sorted(said))} (recorded in the "
        "fingerprint), not necessarily the server's tokenizer; the server's reported lengths "
        "are what is checked here."
    )


def cooldown_line(fps: list[dict]) -> str:
    """Cooldown between reps as the fingerprint recorded it (0 = none)."""
    values = {str(fp.get("run", "?")): _fp_measurement(fp).get("cooldown_s") for fp in fps}
    known = {run: v for run, v in values.items() if v is not None}
    if not known:
        return "Cooldown between reps: not recorded in the fingerprint."

    def text(v) -> str:
        v = float(v)
        return "none, 0 s" if v == 0 else f"{v:g} s"

    if len(set(known.values())) == 1 and len(known) == len(values):
        return f"Cooldown between reps: {text(next(iter(known.values())))} (recorded in the fingerprint)."
    per_run = ", ".join(
        f"{text(v)} in {run}" if v is not None else f"not recorded in {run}"
        for run, v in sorted(values.items())
    )
    return f"Cooldown between reps: {per_run} (recorded in the fingerprint)."


def _flagged_table(ctx, trap, rows, labels, columns, make_row, title, row_title, metric):
    """Table of flagged requests (capped at MAX_ROWS) with an entry per row and its Sources."""
    tid = prov.integrity_id(ctx.target, trap)
    table_rows, row_ids, refs = [], [], []
    shown = list(zip(labels, rows.to_dict("records")))[:MAX_ROWS]
    for label, r in shown:
        table_rows.append(make_row(label, r))
        key = prov.rep_of(label)
        where = (
            [key[1], f"rep{key[2]}", f"arm{int(r['arm'])}"]
            if key is not None
            else [str(r.get("run")), f"rep{int(r['rep'])}", f"arm{int(r['arm'])}"]
        )
        rid = prov.integrity_id(ctx.target, trap, *where, f"request{int(r['request'])}")
        row_ids.append(rid)
        refs.append(
            prov.Ref(
                rid,
                "table-row",
                f"{row_title} {label} request {int(r['request'])}",
                prov.with_roles(([label], "deviant")),
                anchor=rid,
                parent=tid,
                metric=metric(r),
                row=dict(zip(columns, table_rows[-1])),
            )
        )
    note = ""
    if len(labels) > len(shown):
        note = f"{len(labels) - len(shown)} more in results/checks/{trap}.csv (first {MAX_ROWS} shown)."
    flagged = sorted(set(labels), key=prov.label_key)
    others = [c for c in ctx.cells if c not in set(flagged)]
    table_ref = prov.Ref(
        tid,
        "table",
        f"{title} ({ctx.target})",
        prov.with_roles((flagged, "deviant"), (others, "comparison")),
        tid,
        parent=ctx.overview_id,
    )
    return [
        Table(title, columns, table_rows, note, anchor=tid, row_ids=row_ids),
        Sources(flagged, ctx.hashes_for(flagged), tid, (table_ref, *refs)),
    ]


def _quiet_evidence(ctx, trap, text, title) -> list:
    """A quiet detector's sentence, anchored, with the cells it looked at."""
    tid = prov.integrity_id(ctx.target, trap)
    ref = prov.Ref(
        tid,
        "table",
        f"{title} ({ctx.target}): {text}",
        prov.with_roles((ctx.cells, "source")),
        tid,
        parent=ctx.overview_id,
    )
    return [Paragraph(text, anchor=tid), Sources(ctx.cells, ctx.hashes, tid, (ref,))]


def prompts_trap(ctx, prompts, requests, fps) -> Trap:
    name = "Unequal prompt lengths"
    if prompts is None:
        return Trap(name, "not checked", "prompts.csv was not given")
    measured = _measured_requests(requests, ctx.target)
    modal = _modal_lengths(measured)
    n_req = int(measured["prompt_tokens"].notna().sum()) if "prompt_tokens" in measured else 0
    rows = _rows_of(prompts, ctx.target)
    tid = prov.integrity_id(ctx.target, "prompts")
    tokenizer = tokenizer_sentence(fps)
    values = sorted(set(modal.values()))
    if len(values) == 1:
        modal_text = f"{values[0]} tokens"
    elif values:
        modal_text = ", ".join(f"{m} tokens in {run}" for run, m in modal.items())
    else:
        modal_text = None
    if rows.empty:
        counted = f" ({_count(n_req, 'measured request')})" if n_req else ""
        if len(values) == 1:
            evidence = f"all prompts {values[0]} tokens{counted}"
        elif values:
            evidence = f"all prompts equal within their run ({modal_text}){counted}"
        else:
            evidence = f"all prompts had their run's modal length{counted}"
        text = (
            f"Prompt length: {evidence}, as the server counted them. Every request carries its "
            "own nonce, and equal length in tokens gives every arm the same prefill work. "
            + tokenizer
        )
        return Trap(name, "no", evidence, tid, (Heading(4, "Prompt length"),
                                                *_quiet_evidence(ctx, "prompts", text, name)))  # fmt: skip
    rows = rows.sort_values(["run", "rep", "position", "request"])
    labels = _labels_of(rows)
    k = len(rows)
    first_label, first = labels[0], rows.iloc[0]
    modal_first = int(first["modal_prompt_tokens"])
    of = f" of {n_req}" if n_req else ""
    evidence = (
        f"{_count(k, 'request')}{of} differ{'s' if k == 1 else ''} from "
        f"{'its' if k == 1 else 'their'} run's modal length "
        f"(e.g. {first_label} request {int(first['request'])}: {int(first['prompt_tokens'])} "
        f"tokens, modal {modal_first})"
    )
    text = (
        f"Warning: {_count(k, 'measured request')}{of} had a prompt length different from "
        f"{'its' if k == 1 else 'their'} run's modal {modal_text or f'{modal_first} tokens'}, as the server counted them. "
        "Their prefill did different work, so an arm holding more of them is not measured on "
        "the same requests (method rule 2). The plan must hold prompt length in tokens equal; "
        "replan with the server's tokenizer. " + tokenizer
    )
    columns = ["cell", "position", "request", "prompt tokens", "run's modal", "difference"]

    def make_row(label, r):
        return [label, _int_text(r["position"]), _int_text(r["request"]),
                _int_text(r["prompt_tokens"]), _int_text(r["modal_prompt_tokens"]),
                _signed_int(r["prompt_tokens"] - r["modal_prompt_tokens"])]  # fmt: skip

    def metric(r):
        return {"name": "prompt_tokens", "value": r["prompt_tokens"],
                "text": _int_text(r["prompt_tokens"])}  # fmt: skip

    blocks = [Heading(4, "Prompt length"), Paragraph(text, "warning")]
    blocks += _flagged_table(ctx, "prompts", rows, labels, columns, make_row,
                             "Requests with an unequal prompt length", "Unequal prompt length:",
                             metric)  # fmt: skip
    return Trap(name, "yes", evidence, tid, tuple(blocks))


def cache_trap(ctx, cache_hits, requests) -> Trap:
    name = "Prefix-cache hits"
    if cache_hits is None:
        return Trap(name, "not checked", "cache_hits.csv was not given")
    measured = _measured_requests(requests, ctx.target)
    n_req = len(measured)
    rows = _rows_of(cache_hits, ctx.target)
    tid = prov.integrity_id(ctx.target, "cache")
    how = (
        "llama.cpp reports cached prompt tokens (cache_n) and the prompt tokens it evaluated; "
        "Ollama reports neither, so there a prompt evaluated at least "
        "4× faster per token than the target's median, or not at all, counts as a hit."
    )
    if rows.empty:
        counted = f" in {_count(n_req, 'measured request')}" if n_req else ""
        evidence = f"no cache hits{counted}"
        text = (
            f"Prefix cache: {evidence}. No measured request was served, even partly, from a "
            f"prefix cache. {how}"
        )
        return Trap(name, "no", evidence, tid, (Heading(4, "Prefix cache"),
                                                *_quiet_evidence(ctx, "cache", text, name)))  # fmt: skip
    rows = rows.sort_values(["run", "rep", "position", "request"])
    labels = _labels_of(rows)
    k = len(rows)
    of = f" of {n_req}" if n_req else ""
    first = rows.iloc[0]
    evidence = (
        f"{_count(k, 'request')}{of} served (partly) from a prefix cache (e.g. {labels[0]} "
        f"request {int(first['request'])}: {first['reason']})"
    )
    text = (
        f"Warning: {_count(k, 'measured request')}{of} {'was' if k == 1 else 'were'} served, "
        "at least partly, from a "
        "prefix cache: their prefill was skipped, so their arm did less work than the others "
        "and looks faster than the server is. Every request should carry its own nonce near the "
        f"start of the prompt and be sent with the cache off. {how}"
    )
    columns = ["cell", "position", "request", "prompt tokens", "evaluated", "evidence"]

    def make_row(label, r):
        return [label, _int_text(r["position"]), _int_text(r["request"]),
                _int_text(r["prompt_tokens"]), _int_text(r.get("evaluated")),
                str(r.get("reason") or "")]  # fmt: skip

    def metric(r):
        return {"name": "evaluated", "value": r.get("evaluated"),
                "text": _int_text(r.get("evaluated"))}  # fmt: skip

    blocks = [Heading(4, "Prefix cache"), Paragraph(text, "warning")]
    blocks += _flagged_table(ctx, "cache", rows, labels, columns, make_row,
                             "Requests served from a prefix cache", "Prefix-cache hit:",
                             metric)  # fmt: skip
    return Trap(name, "yes", evidence, tid, tuple(blocks))


def control_line(row) -> str:
    arm = arm_name(row["arm"])
    return (
        f"Control (shared prompt, cache allowed): {arm} would have shown "
        f"{fmt_num(row['control_agg_tps'])} tok/s instead of {fmt_num(row['measured_agg_tps'])} "
        f"tok/s ({fmt_change(1 + row['inflation'])}) {DASH} not part of the headline."
    )


def control_trap(ctx, control) -> Trap:
    name = "Shared-prefix inflation (control arm)"
    if control is None:
        return Trap(name, "not checked", "control.csv was not given")
    rows = _rows_of(control, ctx.target)
    heading = Heading(4, "Control arm")
    if rows.empty:
        if control.empty:
            return Trap(
                name, "off", "control arm off", "", (heading, Paragraph(CONTROL_OFF, "note"))
            )
        text = f"The control arm measured no cell of {ctx.target}."
        return Trap(name, "off", "no control cells for this target", "",
                    (heading, Paragraph(text, "note")))  # fmt: skip
    tid = prov.integrity_id(ctx.target, "control")
    rows = rows.sort_values("arm")
    lines = [control_line(r) for r in rows.to_dict("records")]
    control_cells = sorted(_union(rows["cells"]), key=prov.label_key)
    measured = (
        sorted(_union(rows["measured_cells"]), key=prov.label_key)
        if "measured_cells" in rows
        else []
    )
    n_control = int(rows["control_cells"].sum()) if "control_cells" in rows else len(control_cells)
    top = rows.iloc[-1]
    evidence = (
        f"measured: a shared prompt would have shown {fmt_change(1 + top['inflation'])} at "
        f"{arm_name(top['arm'])} (not in the headline)"
    )
    explain = (
        f"The control arm sends one shared prompt to every request at the largest concurrency "
        "and lets the server cache it (MLPerf TEST04 in spirit), once per rep after the measured "
        f"arms ({_count(n_control, 'control cell')}). The difference is what a benchmark whose "
        "requests share a prefix would have booked as a concurrency gain. The measured arms "
        "never share one; the control's numbers appear only here."
    )
    ref = prov.Ref(
        tid,
        "table",
        f"Control arm of {ctx.target}: " + " ".join(lines),
        # a control cell may share its label with the measured cell of its rep and arm
        prov.with_each_role((control_cells, "control"), (measured, "comparison")),
        tid,
        parent=ctx.overview_id,
        metric={"name": "inflation", "value": top["inflation"],
                "text": fmt_change(1 + top["inflation"])},
    )  # fmt: skip
    cells = sorted(set(control_cells) | set(measured), key=prov.label_key)
    blocks = (heading, Paragraph(" ".join(lines), anchor=tid), Paragraph(explain, "note"),
              Sources(cells, ctx.hashes_for(cells), tid, (ref,)))  # fmt: skip
    return Trap(name, "n/a (a measurement)", evidence, tid, blocks)


def _event_rows(thermal: pd.DataFrame | None, target) -> tuple[pd.DataFrame, bool | None]:
    """(the target's throttle/pressure readings, whether any source could report them)."""
    from slotbench.thermal import _event_mask

    rows = _rows_of(thermal, target)
    if rows.empty:
        return pd.DataFrame(), None
    rows = rows.copy()
    for col in ("throttled", "pressure", "detail", "t_s", "t_unix", "sensor", "rep"):
        if col not in rows:
            rows[col] = None
    observable = bool(rows["throttled"].notna().any() or rows["pressure"].notna().any())
    return rows.loc[_event_mask(rows)].sort_values("t_unix", kind="stable"), observable


def _rep_text(run, rep) -> str:
    return f"{run}" if _missing(rep) else f"{run} rep {int(rep)}"


def thermal_trap(ctx, summary, thermal, fps, cells_of) -> Trap:
    name = "Thermal throttling"
    heading = Heading(4, "Thermal state")
    cooldown = Paragraph(cooldown_line(fps))
    if summary is None:
        return Trap(name, "not checked", "thermal.csv was not given", "", (heading, cooldown))
    rows = _rows_of(summary, ctx.target)
    tid = prov.integrity_id(ctx.target, "thermal")
    if rows.empty or int(rows["samples"].fillna(0).sum()) == 0:
        evidence = "no thermal source readable on this machine"
        text = (
            "Thermal state: no thermal source readable on this machine. The sampler found no "
            "thermal zone, CPU clock, pmset or nvidia-smi it could read, so throttling was "
            "neither seen nor ruled out; the serial arm's burst-vs-plateau drift below is the "
            "only evidence of thermal decay."
        )
        blocks = (heading, cooldown, *_quiet_evidence(ctx, "thermal", text, name))
        return Trap(name, "n/a (no source)", evidence, tid, blocks)
    rows = rows.sort_values("run")
    events, observable = _event_rows(thermal, ctx.target)
    if observable is None:  # no samples given: judge by the source names
        sources = set(_union(rows["sources"]))
        observable = None if not sources else not sources <= {"cpuinfo"}
    n_events = int(rows["throttle_events"].fillna(0).sum())
    first_by_run = {}
    if not events.empty:
        for run, grp in events.groupby("run", sort=True):
            first_by_run[str(run)] = grp.iloc[0]
    columns = ["run", "samples", "sources", "max °C", "clock MHz (min–max)",
               "throttle/pressure events", "first event", "read errors"]  # fmt: skip
    table_rows, row_ids, refs = [], [], []
    for r in rows.to_dict("records"):
        run = str(r["run"])
        first = "—"
        if run in first_by_run:
            e = first_by_run[run]
            first = f"rep {_int_text(e['rep'])} at {fmt_num(e['t_s'])} s"
        elif not _missing(r.get("first_event_t_s")):
            first = f"at {fmt_num(r['first_event_t_s'])} s"
        lo, hi = r.get("min_freq_mhz"), r.get("max_freq_mhz")
        clock = "n/a" if _missing(lo) else f"{fmt_num(lo, 0)}–{fmt_num(hi, 0)}"
        table_rows.append([run, _int_text(r["samples"]), str(r.get("sources") or "none"),
                           fmt_num(r.get("max_temp_c")), clock,
                           _int_text(r.get("throttle_events")), first,
                           _int_text(r.get("errors"))])  # fmt: skip
        rid = prov.integrity_id(ctx.target, "thermal", run)
        row_ids.append(rid)
        run_cells = cells_of(ctx.target, run)
        refs.append(
            prov.Ref(
                rid, "table-row", f"Thermal samples of {ctx.target}/{run} (during its reps)",
                prov.with_roles((run_cells, "source")), anchor=rid, parent=tid,
                metric={"name": "throttle_events", "value": r.get("throttle_events"),
                        "text": table_rows[-1][5]},
                row=dict(zip(columns, table_rows[-1])),
            )
        )  # fmt: skip
    samples = int(rows["samples"].fillna(0).sum())
    sources = ", ".join(_union(rows["sources"])) or "none"
    temps = pd.to_numeric(rows["max_temp_c"], errors="coerce")
    lo = pd.to_numeric(rows["min_freq_mhz"], errors="coerce").min()
    hi = pd.to_numeric(rows["max_freq_mhz"], errors="coerce").max()
    facts = []
    if temps.notna().any():
        facts.append(f"hottest reading {fmt_num(temps.max())} °C")
    if not _missing(lo):
        same = fmt_num(lo, 0) == fmt_num(hi, 0)
        facts.append(
            f"clock {fmt_num(lo, 0)} MHz throughout"
            if same
            else f"clock {fmt_num(lo, 0)}–{fmt_num(hi, 0)} MHz"
        )
    facts_text = f"; {'; '.join(facts)}" if facts else ""
    bullets = []
    if n_events:
        fired = "yes"
        where = ""
        if not events.empty:
            e = events.iloc[0]
            where = f" (first: {_rep_text(e['run'], e['rep'])}, {fmt_num(e['t_s'])} s into the rep)"
        evidence = (
            f"{_count(n_events, 'throttle/pressure reading')} in {_count(samples, 'sample')}{where}"
        )
        text = (
            f"Warning: the machine reported throttling or thermal pressure in "
            f"{_count(n_events, 'reading')} during the reps of {ctx.target}{where}; sources: "
            f"{sources}{facts_text}. Cells measured while it was throttled ran slower than the "
            "machine can: rotation spreads the loss over the arms, but absolute tok/s are lower, "
            "and a loss that grows over the run shows in the serial arm's drift below."
        )
        kind = "warning"
        if not events.empty:
            for (run, rep), grp in list(events.groupby(["run", "rep"], sort=True, dropna=False))[
                :10
            ]:
                details = "; ".join(
                    sorted({f"{s}: {d}" if isinstance(d, str) and d else str(s)
                            for s, d in zip(grp["sensor"], grp["detail"])})[:3]
                )  # fmt: skip
                bullets.append(
                    f"{_rep_text(run, rep)}: {_count(len(grp), 'reading')} from "
                    f"{fmt_num(grp['t_s'].min())} s into the rep ({details})"
                )
    elif observable is False:
        fired = "no (not observable)"
        evidence = (
            f"no source reports throttling here (only {sources}); {_count(samples, 'sample')}"
            f"{facts_text}"
        )
        text = (
            f"Thermal state: only {sources} was readable, and no source on this machine reports "
            "throttling or thermal pressure, so zero events does not rule throttling out. "
            f"{_count(samples, 'sample')} during the reps{facts_text}. The article's machine "
            "reported no pressure in 424 samples while losing 8.2%: the serial arm's drift below "
            "is the better evidence."
        )
        kind = ""
    else:
        fired = "no"
        evidence = f"no throttling or pressure in {_count(samples, 'sample')}{facts_text}"
        text = (
            f"Thermal state: no throttling or thermal pressure reported in "
            f"{_count(samples, 'sample')} during the reps (sources: {sources}{facts_text}). A "
            "quiet sensor is weak evidence (the article's machine reported no pressure while "
            "losing 8.2%): read it with the serial arm's drift below."
        )
        kind = ""
    errors = int(rows["errors"].fillna(0).sum()) if "errors" in rows else 0
    if errors:
        text += f" {_count(errors, 'reading')} failed (detail \"error: …\" in thermal.parquet)."
    table_ref = prov.Ref(
        tid, "table", f"Thermal state of {ctx.target} during its reps",
        prov.with_roles((ctx.cells, "source")), tid, parent=ctx.overview_id,
        metric={"name": "throttle_events", "value": n_events, "text": str(n_events)},
    )  # fmt: skip
    blocks = [heading, cooldown, Paragraph(text, kind)]
    if bullets:
        blocks.append(Bullets(bullets))
    blocks.append(
        Table(
            "Thermal samples per run",
            columns,
            table_rows,
            "Sampled about once a second from before each rep's warm-up to its last cell; an "
            "event is a reading with throttled set or a pressure other than nominal. The first "
            "event's time is seconds into its rep.",
            anchor=tid,
            row_ids=row_ids,
        )
    )
    blocks.append(Sources(ctx.cells, ctx.hashes, tid, (table_ref, *refs)))
    return Trap(name, fired, evidence, tid, tuple(blocks))


def burst_sentence(row) -> str:
    change = row.get("change")
    return (
        f"serial arm: burst {fmt_num(row['burst_tps'])} tok/s, plateau "
        f"{fmt_num(row['plateau_tps'])} tok/s ({fmt_change(1 + change, 1)})"
    )


def burst_trap(ctx, burst) -> Trap:
    name = "Drift (serial arm, burst vs plateau)"
    if burst is None:
        return Trap(name, "not checked", "burst.csv was not given")
    rows = _rows_of(burst, ctx.target)
    if rows.empty:
        return Trap(name, "n/a", "no serial cells to compare")
    r = rows.iloc[0].to_dict()
    tid = prov.integrity_id(ctx.target, "burst")
    change, n = r.get("change"), int(r.get("n_serial") or 0)
    burst_cells = sorted(_split(r.get("burst_cells")), key=prov.label_key)
    plateau_cells = sorted(_split(r.get("plateau_cells")), key=prov.label_key)
    if _missing(change):
        evidence = f"too few serial cells ({n}) to see a trend"
        text = f"Drift: {evidence}; run more reps to compare the first serial cells with the last."
        fired = "n/a"
    else:
        evidence = burst_sentence(r)
        fired = "yes" if change <= -DRIFT_THRESHOLD else "no"
        text = (
            f"Drift: {evidence} over {_count(n, 'serial cell')} spanning "
            f"{_duration(r.get('span_s'))}; the article lost {fmt_pct(ARTICLE_DRIFT, 1)}. Burst is "
            "the median of the first quarter of the serial cells in time order (runs pooled), "
            "plateau the median of the last half. The serial arm does the same work in every rep, "
            "so a trend in it is the machine drifting, not concurrency."
        )
        if fired == "yes":
            text += (
                f" A loss beyond {fmt_pct(DRIFT_THRESHOLD)} means the machine slowed during the "
                "run (heat, power or background load): rotation spreads it over the arms, but "
                "absolute tok/s depend on when they were measured; a cooldown between reps or "
                "a cooler machine narrows it."
            )
    ref = prov.Ref(
        tid, "table", f"Burst vs plateau of {ctx.target}'s serial arm: {evidence}",
        prov.with_roles((burst_cells, "burst"), (plateau_cells, "plateau")),
        tid, parent=ctx.overview_id,
        metric={"name": "change", "value": change,
                "text": "n/a" if _missing(change) else fmt_change(1 + change, 1)},
    )  # fmt: skip
    cells = sorted(set(burst_cells) | set(plateau_cells), key=prov.label_key)
    kind = "warning" if fired == "yes" else ""
    blocks = (Heading(4, "Drift"), Paragraph(text, kind, anchor=tid),
              Sources(cells, ctx.hashes_for(cells), tid, (ref,)))  # fmt: skip
    return Trap(name, fired, evidence, tid, blocks)


CLIENT_LEAD = "The client may have distorted these numbers: "


def client_warning(info: dict | None) -> Paragraph | None:
    """The warning shown before the headline table when the client self-check fired."""
    if not info or not _truthy(info.get("distorted")):
        return None
    sentence = str(info.get("sentence") or "")
    detail = sentence[len(CLIENT_LEAD) :] if sentence.startswith(CLIENT_LEAD) else sentence
    text = "Warning: the client could have distorted these numbers"
    return Paragraph(f"{text}: {detail}" if detail else f"{text}.", "warning")


def client_trap(ctx, client: dict | None) -> Trap:
    name = "Client distortion (self-check)"
    if client is None:
        return Trap(name, "not checked", "client.json was not given")
    info = client.get(ctx.target)
    if not info:
        return Trap(name, "not checked", f"client.json has no self-check for {ctx.target}")
    tid = prov.integrity_id(ctx.target, "client")
    distorted = _truthy(info.get("distorted"))
    lag_fired, cpu_fired = _truthy(info.get("lag_fired")), _truthy(info.get("cpu_fired"))
    assessed = _truthy(info.get("cpu_assessed"))
    over_lag = [str(c) for c in info.get("cells_over_lag") or []]
    over_cpu = [str(c) for c in info.get("cells_over_cpu") or []]
    early = [str(c) for c in info.get("early_cells") or []]
    columns = ["check", "measured", "threshold", "fired", "cells over it"]
    share = info.get("cpu_share")
    cpu_measured = (
        f"{fmt_pct(share, 1)} of an inter-token interval ({_ms(info.get('cpu_per_token_s'))} "
        f"of {_ms(info.get('inter_token_s'))}, worst cell {info.get('worst_cpu_cell')})"
        if assessed and not _missing(share)
        else "not assessed (no per-cell CPU times or no server generation times)"
    )
    table_rows = [
        ["send lag p95 (max)",
         f"{_ms(info.get('lag_p95_s'))} (max {_ms(info.get('lag_max_s'))})",
         _ms(info.get("lag_threshold_s")), "yes" if lag_fired else "no",
         ", ".join(over_lag) or "none"],
        ["client CPU per streamed token", cpu_measured,
         f"{fmt_pct(info.get('cpu_share_threshold'))} of an inter-token interval",
         ("yes" if cpu_fired else "no") if assessed else "n/a",
         ", ".join(over_cpu) or "none"],
    ]  # fmt: skip
    keys = ("lag", "cpu")
    row_ids = [prov.integrity_id(ctx.target, "client", k) for k in keys]
    worst = [str(info["worst_cpu_cell"])] if info.get("worst_cpu_cell") else []
    refs = []
    metrics = (
        {"name": "lag_p95_s", "value": info.get("lag_p95_s"), "text": table_rows[0][1]},
        {"name": "cpu_share", "value": share, "text": table_rows[1][1]},
    )
    for rid, row, flagged, metric, what in zip(
        row_ids, table_rows, (over_lag, over_cpu or worst), metrics,
        ("send lag of every request", "client CPU per streamed token"),
    ):  # fmt: skip
        refs.append(
            prov.Ref(
                rid, "table-row", f"Client self-check of {ctx.target}: {what}",
                prov.with_roles((flagged, "deviant"), (ctx.cells, "source")),
                anchor=rid, parent=tid, metric=metric, row=dict(zip(columns, row)),
            )
        )  # fmt: skip
    flagged = sorted(set(over_lag) | set(over_cpu) | set(early), key=prov.label_key)
    table_ref = prov.Ref(
        tid, "table", f"Client self-check of {ctx.target}",
        prov.with_roles((flagged, "deviant"), (ctx.cells, "source")), tid,
        parent=ctx.overview_id,
    )  # fmt: skip
    sentence = str(info.get("sentence") or "")
    if distorted:
        evidence = (
            "the client could have distorted these numbers ("
            + ", ".join(w for w, f in (("late sends", lag_fired), ("client CPU", cpu_fired)) if f)
            + f"): p95 send lag {_ms(info.get('lag_p95_s'))}"
        )
        if assessed and not _missing(share):
            evidence += f", CPU {fmt_pct(share, 1)} of an inter-token interval"
    else:
        evidence = f"client kept up: p95 send lag {_ms(info.get('lag_p95_s'))}"
        evidence += (
            f", CPU {fmt_pct(share, 1)} of an inter-token interval"
            if assessed and not _missing(share)
            else ", CPU not assessed"
        )
    how = (
        "The client checks itself: a request sent later than the moment its slot freed leaves "
        "the server idle (send lag), and a client that spends much CPU per streamed token takes "
        "it from a server on the same cores."
    )
    blocks = (
        Heading(4, "Client self-check"),
        Paragraph(sentence, "warning" if distorted else ""),
        Paragraph(how, "note"),
        Table("Client self-check", columns, table_rows, anchor=tid, row_ids=row_ids),
        Sources(ctx.cells, ctx.hashes, tid, (table_ref, *refs)),
    )
    return Trap(name, "yes" if distorted else "no", evidence, tid, blocks)


def _pct_g(x) -> str:
    """A precision target as a percent with the digits it was given: 0.05 -> 5%, 0.001 -> 0.1%."""
    return "n/a" if _missing(x) else f"{round(float(x) * 100, 6):g}%"


SUFFICIENCY_COLUMNS = ["arm", "metric", "reps", "value [95% CI]", "CI half-width", "target",
                       "meets target", "reps needed"]  # fmt: skip


def sufficiency_trap(ctx, suff) -> Trap:
    name = "Too few reps (interval width)"
    if suff is None:
        return Trap(name, "not checked", "sufficiency.csv was not given")
    rows = _rows_of(suff, ctx.target)
    if rows.empty:
        return Trap(name, "n/a", "no parallel arm to assess")
    tid = prov.integrity_id(ctx.target, "sufficiency")
    order = {m: i for i, m in enumerate(("speedup", "user_ratio", "ttft_ratio", "gen_gain",
                                         "pipelining"))}  # fmt: skip
    rows = rows.assign(_o=rows["metric"].map(lambda m: order.get(m, len(order))))
    rows = rows.sort_values(["arm", "_o", "metric"])
    table_rows, row_ids, refs = [], [], []
    for r in rows.to_dict("records"):
        arm, metric = int(r["arm"]), str(r["metric"])
        meets = _truthy(r.get("meets"))
        target_rel = r.get("target_rel")
        value = (
            f"{fmt_times(r['value'])} [{fmt_times(r['lo'])}, {fmt_times(r['hi'])}]"
            if not _missing(r.get("lo"))
            else fmt_times(r.get("value"))
        )
        rel = "n/a" if _missing(r.get("rel")) else f"±{float(r['rel']) * 100:.1f}%"
        table_rows.append([arm_name(arm), metric, _int_text(r.get("n_reps")), value, rel,
                           f"±{_pct_g(target_rel)}", "yes" if meets else "no",
                           _int_text(r.get("reps_needed"))])  # fmt: skip
        rid = prov.integrity_id(ctx.target, "sufficiency", f"arm{arm}", metric)
        row_ids.append(rid)
        refs.append(
            prov.Ref(
                rid, "table-row",
                f"Interval width of {ctx.target}, {arm_name(arm)}: {metric}",
                prov.metric_cells(ctx.index, ctx.target, arm, metric),
                anchor=rid, parent=tid,
                metric={"name": "rel_half_width", "value": r.get("rel"), "text": rel},
                row=dict(zip(SUFFICIENCY_COLUMNS, table_rows[-1])),
            )
        )  # fmt: skip
    misses = rows[~rows["meets"].map(_truthy)]
    n_reps = sorted({int(n) for n in rows["n_reps"].dropna()})
    reps_text = f"{n_reps[0]} reps" if len(n_reps) == 1 else "their reps"
    targets = sorted({float(t) for t in rows["target_rel"].dropna()})
    target_text = f"±{_pct_g(targets[0])}" if len(targets) == 1 else "their target"
    m = len(rows)
    if misses.empty:
        fired = "no"
        evidence = f"every interval meets {target_text} with {reps_text}"
        text = (
            f"Enough reps: every interval meets {target_text} with {reps_text} "
            f"({_count(m, 'interval')}: each headline ratio of each parallel arm, 95% bootstrap "
            "interval half-width relative to the value)."
        )
    else:
        fired = "yes"
        needed = pd.to_numeric(misses["reps_needed"], errors="coerce").max()
        widest = misses.loc[pd.to_numeric(misses["rel"], errors="coerce").fillna(float("inf"))
                            .idxmax()]  # fmt: skip
        need_text = "" if _missing(needed) else f"; about {int(needed)} reps would meet them all"
        evidence = (
            f"{len(misses)} of {_count(m, 'interval')} miss {target_text} with {reps_text}"
            f"{need_text}"
        )
        widest_rel = "n/a" if _missing(widest.get("rel")) else f"±{float(widest['rel']) * 100:.1f}%"
        text = (
            f"Too few reps: {evidence} if the spread stays as it is (widest: "
            f"{arm_name(widest['arm'])} {widest['metric']} {widest_rel}). An interval narrows "
            "as 1/√reps, so reps needed = reps × (half-width / target)²; fewer than 5 reps never "
            "count as meeting the target, since the bootstrap interval of so few is too narrow "
            "to trust. Read the headline's ratios with their intervals."
        )
    table_ref = prov.Ref(
        tid, "table", f"Interval width of every headline ratio of {ctx.target}",
        prov.with_roles((ctx.cells, "source")), tid, parent=ctx.overview_id,
    )  # fmt: skip
    blocks = (
        Heading(4, "Enough reps?"),
        Paragraph(text),
        Table("Interval width of each ratio", SUFFICIENCY_COLUMNS, table_rows,
              "CI half-width = (high − low) / 2 of the 95% bootstrap interval, relative to the "
              "value.", anchor=tid, row_ids=row_ids),
        Sources(ctx.cells, ctx.hashes, tid, (table_ref, *refs)),
    )  # fmt: skip
    return Trap(name, fired, evidence, tid, blocks)


def checks_traps(target, verdict, thresholds, ser_rows, deviance, shown: set) -> list[Trap]:
    """The checks shown earlier in the target's section, as overview lines."""
    traps = []
    detailed = [r for r in ser_rows if "n_cells" in r]
    if ser_rows:
        serialised = [arm_name(r["arm"]) for r in ser_rows if r["serialised"]]
        traps.append(
            Trap(
                "Serialised arm (server ran one request at a time)",
                "yes" if serialised else "no",
                (
                    f"{', '.join(serialised)} served one request at a time"
                    if serialised
                    else "every parallel arm ran its requests together"
                ),
                prov.serialisation_id(target) if detailed else "",
            )
        )
    verdict = verdict or {}
    bias, thr = verdict.get("rotation_bias"), thresholds["rotation"]
    if _missing(bias):
        traps.append(Trap("Rotation bias", "not checked", "no rotation bias was computed"))
    else:
        rid = prov.rotation_id(target)
        traps.append(
            Trap(
                "Rotation bias",
                "yes" if bias > thr else "no",
                f"rotation bias {fmt_pct(bias, 1)} against a {fmt_pct(thr)} threshold"
                + ("; headline refused" if verdict.get("refused") else ""),
                rid if rid in shown else "",
            )
        )
    rows = deviance[deviance["target"] == target] if not deviance.empty else deviance
    n = len(rows)
    traps.append(
        Trap(
            "Output deviance",
            "yes" if n else "no",
            (
                f"{_count(n, 'cell')} more than {fmt_pct(thresholds['deviance'])} from the modal "
                "output"
                if n
                else f"no cell more than {fmt_pct(thresholds['deviance'])} from the modal output"
            ),
            prov.deviance_id(target),
        )
    )
    return traps


def integrity_blocks(target, ctx: TargetContext, traps: list[Trap]) -> list:
    blocks: list = [
        Heading(3, "Measurement integrity"),
        Paragraph(
            "Each trap that could make these numbers wrong without any error, whether its "
            "detector fired, and the evidence; details and sources follow (those of the checks "
            "above are in their own sections). The control arm, when on, is reported here and "
            "never in the per-arm table."
        ),
    ]
    columns = ["trap", "fired", "evidence", "details"]
    rows = [[t.name, t.fired, t.evidence, t.ref_id or DASH] for t in traps]
    ref = prov.Ref(
        ctx.overview_id,
        "table",
        f"Measurement integrity of {target}: each trap, whether its detector fired, the evidence",
        prov.with_roles((ctx.cells, "source")),
        ctx.overview_id,
    )
    blocks.append(
        Table("Traps and detectors", columns, rows, anchor=ctx.overview_id, link_column=3)
    )
    blocks.append(Sources(ctx.cells, ctx.hashes, ctx.overview_id, (ref,)))
    for t in traps:
        blocks += list(t.blocks)
    return blocks


# --------------------------------------------------------------------------------------------
# Versions behind the cells, resolved config, provenance
# --------------------------------------------------------------------------------------------


def version_blocks(target, index: prov.CellIndex) -> tuple[list, str | None]:
    """(warning, line): a warning when the target's cells come from several pipeline code
    versions (commit or dirty flag) or server builds, naming which runs and reps used each;
    otherwise one line saying which single version produced all of them."""
    if not index.labels(target):
        return [], None
    code, server = prov.version_groups(index, target)

    def describe(groups: dict, name, plural: str, unrecorded: str) -> str:
        if not groups:
            return unrecorded
        if len(groups) == 1:
            return f"all cells: {name(next(iter(groups)))}"
        return f"{len(groups)} {plural}: " + "; ".join(
            f"{name(v)} for {prov.reps_text(pairs)}" for v, pairs in groups.items()
        )

    code_txt = describe(
        code,
        lambda cd: prov.code_text(*cd),
        "pipeline code versions",
        "pipeline code version not recorded",
    )
    server_txt = describe(server, lambda b: b, "server builds", "server build not recorded")
    if len(code) <= 1 and len(server) <= 1:
        code_one = prov.code_text(*next(iter(code))) if code else None
        build_one = f"server build {next(iter(server))}" if server else None
        if code_one and build_one:
            return [], f"Versions: all cells: {code_one}, {build_one}."
        known = code_one or build_one
        missing = "server build" if code_one else "pipeline code version"
        if known:
            return [], f"Versions: all cells: {known}; {missing} not recorded."
        return [], "Versions: pipeline code version and server build not recorded."
    text = (
        f"Warning: the cells of {target} were not all produced by the same versions. "
        f"Pipeline code: {code_txt}. Server build: {server_txt}. Every number in this section "
        "pools them; if a version change may have moved the numbers, compare those runs "
        "separately or measure again with one version."
    )
    if any(dirty for _, dirty in code):
        text += " A dirty work tree's changes are not recorded, so dirty cells of one commit may differ too."
    return [Paragraph(text, "warning")], None


def config_yaml(cfg: dict) -> str:
    """The resolved config as YAML (sorted keys), or as JSON (which is YAML) without PyYAML."""
    try:
        import yaml
    except ImportError:  # the report's conda env need not carry PyYAML
        return json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    return yaml.safe_dump(cfg, sort_keys=True, allow_unicode=True, default_flow_style=False)


def config_blocks(resolved_config, config_sha256) -> list:
    if resolved_config is None:
        return []
    return [
        Heading(2, "Resolved config"),
        Paragraph(
            "The configuration the pipeline ran with, every default filled in, as the rules "
            f"received it. Its SHA-256 (of its JSON with sorted keys) is {config_sha256}; every "
            "provenance entry records it."
        ),
        Code(config_yaml(resolved_config), "yaml"),
    ]


def provenance_blocks(record: dict, order: list[str]) -> list:
    entries = record["entries"]
    example = next(
        (i for i in order if entries[i]["kind"] == "table-cell"), next(iter(order), "ID")
    )
    digest = record.get("config_sha256") or "not recorded"
    return [
        Heading(2, "Provenance"),
        Paragraph(
            "Every table, table row and figure above names its provenance id. Here is what each "
            "id stands for: the cells (target/run/repN/armM) behind it, the SHA-256 of each raw "
            "file they came from, the pipeline commit and dirty flag and the server build that "
            f"produced them, and the SHA-256 of the resolved config ({digest}). Each number in "
            "the per-arm table has its own id, its row's id and the metric (e.g. "
            f"{example}); a within-rep ratio also names the serial cells of the same reps, its "
            "denominators. The same record is in provenance.json next to this report; "
            "`python -m slotbench explain ID` prints the raw request rows behind an id and "
            "checks each raw file against its recorded SHA-256."
        ),
        ProvenanceIndex(tuple(entries[i] for i in order)),
    ]


def build_blocks(*args, **kwargs) -> list:
    """The neutral document (see build_document)."""
    return build_document(*args, **kwargs)[0]


def build_document(
    summary,
    ratios,
    deviance,
    positions,
    verdict,
    fingerprints,
    figures_sources,
    figure_paths,
    *,
    requests: pd.DataFrame | None = None,
    servers: list[dict] | None = None,
    serialisation: pd.DataFrame | None = None,
    cells: pd.DataFrame | None = None,
    config_sha256: str | None = None,
    resolved_config: dict | None = None,
    prompts: pd.DataFrame | None = None,
    cache_hits: pd.DataFrame | None = None,
    control: pd.DataFrame | None = None,
    thermal_summary: pd.DataFrame | None = None,
    burst: pd.DataFrame | None = None,
    client: dict | None = None,
    sufficiency: pd.DataFrame | None = None,
    thermal: pd.DataFrame | None = None,
) -> tuple[list, dict]:
    """(blocks, provenance record). requests (timing_source, prompt_tokens), servers (each rep's
    server state, e.g. Ollama's /api/ps), serialisation (checks), cells (raw files, code and
    server versions; ratios stand in for it) and the resolved config are optional so that older
    callers work. The integrity inputs (prompts, cache_hits, control, thermal_summary, burst,
    client, sufficiency, thermal samples) feed each target's Measurement integrity section; one
    that is not given is listed there as not checked."""
    if config_sha256 is None and resolved_config is not None:
        config_sha256 = prov.config_digest(resolved_config)
    index = prov.CellIndex(cells if cells is not None else ratios)
    thresholds = {
        "rotation": verdict.get("rotation_threshold", 0.10),
        "deviance": verdict.get("deviance_threshold", 0.05),
    }
    verdicts = verdict.get("targets", {})
    labelled = (
        ratios.assign(
            cell=[
                cell_label(*k)
                for k in ratios[["target", "run", "rep", "arm"]].itertuples(index=False)
            ]
        )
        if not ratios.empty
        else ratios.assign(cell=[])
    )
    hash_of = dict(zip(labelled["cell"], labelled.get("raw_sha256", [])))

    def cells_of(target, run=None):
        sel = labelled[labelled["target"] == target]
        if run is not None:
            sel = sel[sel["run"] == run]
        return sorted(set(sel["cell"]))

    def hashes_of(target, run=None):
        return sorted({hash_of[c] for c in cells_of(target, run) if not _missing(hash_of[c])})

    targets = sorted(
        set(summary["target"])
        | set(verdicts)
        | set(labelled["target"] if not labelled.empty else [])
    )
    n_req = sorted(set(ratios["n_requests"].dropna().astype(int))) if "n_requests" in ratios else []
    same = f"the same {n_req[0]} requests" if len(n_req) == 1 else "the same requests"
    blocks: list = [
        Heading(1, "slotbench: what concurrency does to an inference server"),
        Paragraph(
            f"Every arm sends {same}; arms differ only in how many are in flight at once, so "
            "serial-1 is the queueing control. Arm order rotates by rep. Throughput is tokens "
            "actually produced over the wall clock that produced them. Two numbers move in "
            "opposite directions: aggregate tok/s across the server (what the operator buys) and "
            "tok/s for each user (what each user gets). Targets: " + ", ".join(targets) + "."
        ),
    ]
    for target in targets:
        v = verdicts.get(target)
        fps = sorted(
            (fp for fp in fingerprints if str(fp.get("target")) == target),
            key=lambda fp: str(fp.get("run")),
        )
        ser_rows = serialisation_rows(target, serialisation, v)
        serialised = frozenset(r["arm"] for r in ser_rows if r["serialised"])
        start = len(blocks)
        blocks.append(Heading(2, f"Target: {target}"))
        # Before anything is read as a result: a server that never ran requests together, and
        # a client that could not keep up.
        blocks += [
            Paragraph(serialisation_warning(r, fps), "warning") for r in ser_rows if r["serialised"]
        ]
        distorted = client_warning((client or {}).get(target))
        if distorted is not None:
            blocks.append(distorted)
        mixed, versions = version_blocks(target, index)
        blocks += mixed
        rows = summary[summary["target"] == target]
        blocks += headline_blocks(target, rows, v, thresholds, serialised, index)
        measured = [timing_source_line(target, requests), pinned_line(target, fps), versions]
        blocks.append(Bullets([m for m in measured if m]))
        blocks += serialisation_blocks(target, ser_rows, hash_of)
        blocks += ollama_blocks(target, fps, servers or [], cells_of, hashes_of, hash_of)
        blocks += rotation_blocks(target, positions, v, thresholds, hash_of)
        blocks += deviance_blocks(
            target, deviance, thresholds["deviance"], cells_of(target), hashes_of(target), index
        )
        shown = {b.prov for b in blocks[start:] if isinstance(b, Sources)}
        ctx = TargetContext(
            target, cells_of(target), hashes_of(target), index, prov.integrity_id(target)
        )
        traps = checks_traps(target, v, thresholds, ser_rows, deviance, shown) + [
            prompts_trap(ctx, prompts, requests, fps),
            cache_trap(ctx, cache_hits, requests),
            control_trap(ctx, control),
            thermal_trap(ctx, thermal_summary, thermal, fps, cells_of),
            burst_trap(ctx, burst),
            client_trap(ctx, client),
            sufficiency_trap(ctx, sufficiency),
        ]
        blocks += integrity_blocks(target, ctx, traps)
    blocks += figure_blocks(figures_sources, figure_paths)
    blocks += fingerprint_blocks(fingerprints, cells_of, hashes_of)
    refs = [ref for b in blocks if isinstance(b, Sources) for ref in b.refs]
    record = prov.build_record(refs, index, config_sha256)
    blocks += config_blocks(resolved_config, config_sha256)
    blocks += provenance_blocks(record, [ref.id for ref in refs])
    return blocks, record


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _md(text: str) -> str:
    """Text safe for Markdown: raw HTML in data (e.g. server props) must not become markup."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _md_cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def render_markdown(blocks: list, image_dir: str = "figures") -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {_md(b.text)}")
        elif isinstance(b, Paragraph):
            text = _md(b.text)
            out.append(
                {
                    "refusal": f"> **{text}**",
                    "warning": f"> ⚠ **{text}**",
                    "headline": f"**{text}**",
                    "note": f"_{text}_",
                }.get(b.kind, text)
            )
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {_md(item)}" for item in b.items))
        elif isinstance(b, Table):
            title = _md(b.title.upper() if b.kind == "not-headline" else b.title)
            title = f"**{title}**"
            columns, rows = _with_row_ids(b)
            lines = [
                title,
                "",
                "| " + " | ".join(map(_md_cell, columns)) + " |",
                "|" + "|".join(" --- " for _ in columns) + "|",
            ]
            lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in rows]
            if b.note:
                lines += ["", f"_{_md(b.note)}_"]
            out.append("\n".join(lines))
        elif isinstance(b, Figure):
            link = f"{image_dir.rstrip('/')}/{b.file}" if image_dir else b.file
            img = f"![{_md(b.title)}]({link})" if b.path is not None else "_(figure file missing)_"
            out.append(f"### {_md(b.title)}\n\n{img}\n\n_{_md(b.caption)}_")
        elif isinstance(b, Sources):
            cells = ", ".join(f"`{c}`" for c in b.cells) or "none"
            hashes = ", ".join(f"`{h}`" for h in b.hashes) or "none"
            if b.prov:
                out.append(f"provenance: {_md(b.prov)}")
            out.append(
                f"<sub>Sources: {_count(len(b.cells), 'cell')}: {cells}. "
                f"Raw SHA-256 ({len(b.hashes)}): {hashes}.</sub>"
            )
        elif isinstance(b, Code):
            fence = "`" * max(3, _longest_backtick_run(b.text) + 1)
            out.append(f"{fence}{b.lang}\n{b.text.rstrip()}\n{fence}")
        elif isinstance(b, ProvenanceIndex):
            out.append("\n".join(_md_provenance_line(e) for e in b.entries) or "_(no entries)_")
    return "\n\n".join(out) + "\n"


def _with_row_ids(table: Table) -> tuple[list[str], list[list[str]]]:
    """Columns and rows, with a provenance column when every row has an id."""
    if not table.row_ids or len(table.row_ids) != len(table.rows):
        return list(table.columns), [list(r) for r in table.rows]
    rows = [[*r, rid] for r, rid in zip(table.rows, table.row_ids)]
    return [*table.columns, "provenance"], rows


def _longest_backtick_run(text: str) -> int:
    """So a fenced code block can use a longer fence than any backtick run it contains."""
    longest = current = 0
    for ch in text:
        current = current + 1 if ch == "`" else 0
        longest = max(longest, current)
    return longest


def _roles_text(cells: list[dict]) -> str:
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["role"]] = counts.get(c["role"], 0) + 1
    if len(counts) <= 1:
        return _count(len(cells), "cell")
    order = sorted(
        counts, key=lambda r: prov.ROLES.index(r) if r in prov.ROLES else len(prov.ROLES)
    )
    detail = ", ".join(f"{counts[role]} {role}" for role in order)
    return f"{_count(len(cells), 'cell')} ({detail})"


def _versions_text(entry: dict) -> str:
    code = ", ".join(prov.code_text(c.get("commit"), c.get("dirty")) for c in entry["code"])
    builds = ", ".join(entry["server_builds"])
    return f"{code or 'code version not recorded'}; server build {builds or 'not recorded'}"


def _md_provenance_line(entry: dict) -> str:
    value = f" = {entry['metric'].get('text')}" if entry.get("metric") else ""
    n_raw = len(entry["raw_files"])
    return _md(
        f"- `{entry['id']}` ({entry['kind']}): {entry['title']}{value}. "
        f"{_roles_text(entry['cells'])}, {_count(n_raw, 'raw file')}; {_versions_text(entry)}."
    )


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;line-height:1.5;color:#222;
max-width:70rem;margin:2rem auto;padding:0 1rem}
h1{font-size:1.6rem}h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.2rem}
table{border-collapse:collapse;font-size:.88rem;margin:.6rem 0}
caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right;vertical-align:top}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}
table.kv td{text-align:left;font-family:ui-monospace,monospace;font-size:.8rem}
.wrap{overflow-x:auto}
p.headline{font-size:1.1rem;font-weight:600}
p.refusal{background:#fdecea;border-left:4px solid #c62828;padding:.6rem .8rem;font-weight:600}
p.warning{background:#fff4e5;border-left:4px solid #ef6c00;padding:.6rem .8rem;font-weight:600}
table.not-headline{opacity:.8}table.not-headline caption{color:#c62828}
p.note{color:#555;font-size:.88rem;font-style:italic}
figure{margin:1rem 0}figure img{max-width:100%;height:auto}figcaption{font-size:.88rem;color:#444}
details.sources{font-size:.8rem;color:#555;margin:.3rem 0 1.2rem}
details.sources code{word-break:break-all}
p.provenance{font-size:.8rem;margin:.2rem 0 0}td.provenance{font-size:.75rem;text-align:left}
pre{background:#f6f6f6;padding:.6rem .8rem;overflow-x:auto;font-size:.8rem}
div.prov-entry{font-size:.82rem;border-top:1px solid #eee;padding:.3rem 0}
div.prov-entry p{margin:.15rem 0}div.prov-entry code{word-break:break-all}
div.prov-entry details{color:#555}span.kind{color:#777}
tr:target,div.prov-entry:target,table:target,figure:target{background:#fffbe6}
""".strip()


def _data_uri(path: str | None) -> str | None:
    if path is None or not os.path.exists(path):
        return None
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"data:image/png;base64,{data}"


def render_html(blocks: list, title: str = "slotbench report") -> str:
    e = html.escape
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            cls = f' class="{b.kind}"' if b.kind else ""
            anchor = f' id="{e(b.anchor)}"' if b.anchor else ""
            out.append(f"<p{cls}{anchor}>{e(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            cls = f' class="{b.kind}"' if b.kind else ""
            anchor = f' id="{e(b.anchor)}"' if b.anchor else ""
            with_ids = bool(b.row_ids) and len(b.row_ids) == len(b.rows)
            columns = [*b.columns, "provenance"] if with_ids else b.columns
            head = "".join(f"<th>{e(c)}</th>" for c in columns)
            body = ""
            for i, r in enumerate(b.rows):
                tds = "".join(
                    (
                        f'<td><a href="#prov-{e(v)}">{e(v)}</a></td>'
                        if j == b.link_column and v and v != DASH
                        else f"<td>{e(v)}</td>"
                    )
                    for j, v in enumerate(r)
                )
                if with_ids:
                    rid = b.row_ids[i]
                    tds += f'<td class="provenance"><a href="#prov-{e(rid)}">{e(rid)}</a></td>'
                    body += f'<tr id="{e(rid)}">{tds}</tr>'
                else:
                    body += f"<tr>{tds}</tr>"
            note = f'<p class="note">{e(b.note)}</p>' if b.note else ""
            out.append(
                f'<div class="wrap"><table{cls}{anchor}><caption>{e(b.title)}</caption>'
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{note}"
            )
        elif isinstance(b, Figure):
            uri = _data_uri(b.path)
            img = (
                f'<img src="{uri}" alt="{e(b.title)}">'
                if uri
                else '<p class="note">(figure file missing)</p>'
            )
            out.append(
                f'<figure id="fig-{e(b.fig_id)}"><h3>{e(b.title)}</h3>{img}'
                f"<figcaption>{e(b.caption)}</figcaption></figure>"
            )
        elif isinstance(b, Sources):
            cells = ", ".join(f"<code>{e(c)}</code>" for c in b.cells) or "none"
            hashes = "".join(f"<li><code>{e(h)}</code></li>" for h in b.hashes)
            if b.prov:
                out.append(
                    f'<p class="provenance"><a href="#prov-{e(b.prov)}">provenance: '
                    f"{e(b.prov)}</a></p>"
                )
            out.append(
                f'<details class="sources"><summary>Sources: {_count(len(b.cells), "cell")}, '
                f'{_count(len(b.hashes), "raw file")}</summary><p>Cells: {cells}</p>'
                f"<p>Raw-file SHA-256:</p><ul>{hashes}</ul></details>"
            )
        elif isinstance(b, Code):
            lang = f' class="language-{e(b.lang)}"' if b.lang else ""
            out.append(f"<pre><code{lang}>{e(b.text.rstrip())}</code></pre>")
        elif isinstance(b, ProvenanceIndex):
            out += [_html_provenance_entry(entry) for entry in b.entries]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{e(title)}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n"
        + "\n".join(out)
        + "\n</body>\n</html>\n"
    )


def _html_provenance_entry(entry: dict) -> str:
    e = html.escape
    eid = entry["id"]
    links = []
    if entry.get("anchor"):
        links.append(f'<a href="#{e(entry["anchor"])}">shown in the report</a>')
    if entry.get("parent"):
        links.append(f'part of <a href="#prov-{e(entry["parent"])}">{e(entry["parent"])}</a>')
    value = f" = {e(str(entry['metric'].get('text')))}" if entry.get("metric") else ""
    head = (
        f'<p><code>{e(eid)}</code> <span class="kind">({e(entry["kind"])})</span> '
        f"{e(entry['title'])}{value}" + (" · " + " · ".join(links) if links else "") + "</p>"
    )
    kids = entry.get("children") or []
    parts = (
        "<p>Parts: "
        + ", ".join(f'<a href="#prov-{e(k)}"><code>{e(k)}</code></a>' for k in kids)
        + "</p>"
        if kids
        else ""
    )
    cells = ", ".join(
        f"<code>{e(c['cell'])}</code>" + ("" if c["role"] == "source" else f" ({e(c['role'])})")
        for c in entry["cells"]
    )
    raw = "".join(
        f"<li><code>{e(str(r['sha256']))}</code> {e(str(r['path']))}</li>"
        for r in entry["raw_files"]
    )
    n_raw = len(entry["raw_files"])
    details = (
        f"<details><summary>{e(_roles_text(entry['cells']))}, {_count(n_raw, 'raw file')}"
        f"</summary><p>Cells: {cells or 'none'}</p><p>Raw-file SHA-256:</p><ul>{raw}</ul>"
        "</details>"
    )
    digest = entry.get("config_sha256") or "not recorded"
    versions = f"<p>{e(_versions_text(entry))}; config SHA-256 <code>{e(str(digest))}</code></p>"
    return f'<div class="prov-entry" id="prov-{e(eid)}">{head}{parts}{details}{versions}</div>'


def build_report(
    summary: pd.DataFrame,
    ratios: pd.DataFrame,
    deviance: pd.DataFrame,
    positions: pd.DataFrame,
    verdict: dict,
    fingerprints: list[dict],
    figures_sources: dict,
    figure_paths: dict,
    image_dir: str = "figures",
    **optional,
) -> tuple[str, str]:
    """(markdown, html) of the whole report; image_dir is the Markdown's relative figure dir.

    ``optional``: requests, servers, serialisation, cells, config_sha256, resolved_config (see
    build_document)."""
    md, page, _ = render_report(
        summary,
        ratios,
        deviance,
        positions,
        verdict,
        fingerprints,
        figures_sources,
        figure_paths,
        image_dir=image_dir,
        **optional,
    )
    return md, page


def render_report(*args, image_dir: str = "figures", **optional) -> tuple[str, str, dict]:
    """(markdown, html, provenance record): both renderings from one set of blocks, and the
    record those blocks link to."""
    blocks, record = build_document(*args, **optional)
    return render_markdown(blocks, image_dir), render_html(blocks), record


# --------------------------------------------------------------------------------------------
# I/O edge (used by the Snakemake entry point)
# --------------------------------------------------------------------------------------------


def match_figure_paths(figures_sources: dict, paths) -> dict[str, str]:
    """Figure id -> PNG path, matched on the basename recorded in the figures' sources."""
    by_name = {Path(p).name: str(p) for p in paths}
    return {
        fid: by_name[src["file"]]
        for fid, src in figures_sources.items()
        if src.get("file") in by_name
    }


REQUEST_COLUMNS = ["target", "run", "rep", "arm", "request", "timing_source"]
# read when requests.parquet has them: the prompt-length check's modal length, the control flag
OPTIONAL_REQUEST_COLUMNS = ["prompt_tokens", "control"]


def read_requests(path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    names = set(pq.read_schema(path).names)
    return pd.read_parquet(
        path, columns=REQUEST_COLUMNS + [c for c in OPTIONAL_REQUEST_COLUMNS if c in names]
    )


def read_checks_csv(path) -> pd.DataFrame | None:
    """A checks table; a file with no header at all reads as no rows."""
    if path is None:
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def write_report(
    *,
    summary,
    ratios,
    deviance,
    positions,
    verdict,
    sources,
    figures,
    fingerprints,
    md_out,
    html_out,
    requests=None,
    servers=None,
    serialisation=None,
    cells=None,
    provenance_out=None,
    config_sha256=None,
    resolved_config=None,
    prompts=None,
    cache_hits=None,
    control=None,
    thermal_summary=None,
    burst=None,
    client=None,
    sufficiency=None,
    thermal=None,
) -> None:
    """Read the pipeline's files, build the report, write both renderings and (with
    provenance_out) the provenance record they link to. The pipeline passes every file; a
    None leaves that part out (the integrity section then says "not checked")."""
    figures_sources = json.loads(Path(sources).read_text())
    figures = [str(p) for p in figures]
    image_dir = ""
    if figures:
        image_dir = os.path.relpath(Path(figures[0]).parent, Path(md_out).parent).replace(
            os.sep, "/"
        )
    md, page, record = render_report(
        pd.read_csv(summary),
        pd.read_parquet(ratios),
        pd.read_csv(deviance),
        pd.read_csv(positions),
        json.loads(Path(verdict).read_text()),
        [json.loads(Path(p).read_text()) for p in fingerprints],
        figures_sources,
        match_figure_paths(figures_sources, figures),
        image_dir=image_dir if image_dir != "." else "",
        requests=None if requests is None else read_requests(requests),
        servers=None if servers is None else json.loads(Path(servers).read_text()),
        serialisation=None if serialisation is None else pd.read_csv(serialisation),
        cells=None if cells is None else pd.read_parquet(cells),
        config_sha256=config_sha256,
        resolved_config=resolved_config,
        prompts=read_checks_csv(prompts),
        cache_hits=read_checks_csv(cache_hits),
        control=read_checks_csv(control),
        thermal_summary=read_checks_csv(thermal_summary),
        burst=read_checks_csv(burst),
        client=None if client is None else json.loads(Path(client).read_text()),
        sufficiency=read_checks_csv(sufficiency),
        thermal=None if thermal is None else pd.read_parquet(thermal),
    )
    for path, text in ((md_out, md), (html_out, page)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    if provenance_out is not None:
        prov.write_record(record, provenance_out)
