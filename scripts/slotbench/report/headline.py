"""The headline: the article's sentences, the batching-or-pipelining reading of each parallel
arm and the per-arm table, as the analysis computed them and the checks decided them."""

from __future__ import annotations

from slotbench.core.cells import SERIAL_ARM, arm_name, arm_order
from slotbench.core.fmt import (
    DASH,
    fmt_change,
    fmt_num,
    fmt_pct,
    fmt_times,
    missing,
    split_list,
    union,
    way,
    with_ci,
)
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Bullets, Heading, Paragraph, Sources, Table


def ci_label(ci, sequential: bool = False) -> str:
    """The interval level as the config gives it: 0.95 -> "95%", 0.9 -> "90%"; "95% sequential"
    for a sequential experiment's intervals (reps: auto)."""
    return f"{round(float(ci) * 100, 6):g}%" + (" sequential" if sequential else "")


def interval_kind(label: str) -> str:
    """What kind of interval ``label`` (ci_label) labels: "bootstrap interval", or for a
    sequential experiment's "sequential interval" (a confidence sequence, no bootstrap)."""
    return "sequential interval" if label.endswith("sequential") else "bootstrap interval"


def interval_words(label: str) -> str:
    """An interval at ``label`` in words: "95% bootstrap interval", "95% sequential interval"."""
    return f"{label.removesuffix(' sequential')} {interval_kind(label)}"


UNQUOTED = {"ttft": "time to first token", "user": "the per-user rate"}


def headline_sentence(row, ci: str, unquoted=()) -> str | None:
    """The article's headline: what the top arm buys the operator and costs each user; a
    number the checks left out of the headline (``unquoted``: "ttft", "user") is named, not
    quoted."""
    s, u, t = row.get("speedup"), row.get("user_ratio"), row.get("ttft_ratio")
    if missing(s) or any(missing(v) for v, m in ((u, "user"), (t, "ttft")) if m not in unquoted):
        return None
    gain = (s - 1) * 100
    operator = (f"buys the operator {gain:.0f}% more throughput" if s >= 1
                else f"costs the operator {-gain:.0f}% of its throughput")
    said = []
    if "user" not in unquoted:
        loss = (1 - u) * 100
        said.append(f"costs each user {loss:.0f}% of their generation rate" if u <= 1
                    else f"gives each user {-loss:.0f}% more generation rate")
    if "ttft" not in unquoted:
        said.append(f"multiplies time to first token by {t:.1f}×" if t >= 1
                    else f"cuts time to first token to {t:.1f}× its serial value")
    text = f"{way(row['arm']).capitalize()} concurrency {operator}."
    if said:
        text += f" It {' and '.join(said)}."
    if unquoted:
        text += (f" Its {' and '.join(UNQUOTED[m] for m in unquoted)} cannot be quoted: the "
                 "client did not see them as the server made them (see the warning above).")
    if row.get("speedup_includes_one") is True:
        text += (
            f" The speedup's {ci} interval ({fmt_times(row['speedup_lo'])} to "
            f"{fmt_times(row['speedup_hi'])}) includes 1×, so the operator's gain is not "
            "distinguishable from none."
        )
    return text


def decomposition_sentence(row, serialised: bool = False) -> str | None:
    """Batching vs pipelining for one parallel arm: which stage earned the aggregate gain.

    A serialised arm (the server ran one request at a time) had nothing to batch, so its
    reading must not present the missing gain as a property of the engine.
    """
    s, g, p, e = (row.get(k) for k in ("speedup", "gen_gain", "pipelining", "efficiency"))
    kind = row.get("decomposition")
    if missing(kind) or any(missing(v) for v in (s, g, p)):
        return None
    n, w = int(row["arm"]), way(row["arm"])
    if serialised:
        return (
            f"At {w} the server ran one request at a time (see the warning above), so no batch "
            f"ever formed: gen_gain {g:.2f}× and pipelining {p:.2f}× (aggregate {s:.2f}×) "
            "describe a server limited to one slot, not what this engine's batching can do. "
            "Measure again with the server allowing parallel requests to read batching here."
        )
    queued = row.get("queued_cells")
    if not missing(queued) and int(queued) > 0 and not missing(row.get("streams")):
        w = (f"{w} (the server generated for {row['streams']:.1f} of the {n} requests in flight "
             f"at once, time-weighted, and queued the rest for a slot in {int(queued)} "
             "cells; gen_gain counts those streams)")
    loses = (f"At {w} the generation stage delivers {g:.2f}×: {n} streams together produce "
             f"{(1 - g) * 100:.0f}% fewer tokens per second than one stream alone. ")
    text = {
        "pipelining": loses + f"The {(s - 1) * 100:.0f}% aggregate gain is therefore "
        "pipelining (one request's prefill overlapping another's decode), not batching.",
        "neither": loses + f"Neither batching nor pipelining pays: the aggregate is {s:.2f}×.",
        "batching": f"At {w} the generation-side gain is {g:.2f}× and the aggregate gain "
        f"{s:.2f}×: batching is the whole story (pipelining within PIPELINING_TOLERANCE of 1, "
        "see docs/method.md#constants).",
        "batching+pipelining": f"At {w} batching delivers {g:.2f}× and pipelining adds "
        f"{p:.2f}× on top, for {s:.2f}× in aggregate.",
        "batching-lost": f"At {w} batching delivers {g:.2f}×, but {(1 - p) * 100:.0f}% of it is "
        f"lost outside the generation stage (pipelining {p:.2f}×), leaving {s:.2f}× in aggregate.",
    }[kind]
    if not missing(e):
        text += f" Efficiency {fmt_pct(e)}: {s:.2f}× of the {n}× that perfect scaling promises."
    return text


def summary_columns(ci: str) -> list[str]:
    return ["arm", "reps", "aggregate tok/s", f"speedup [{ci} CI]", "per-user tok/s",
            f"per-user change [{ci} CI]", "TTFT s", f"TTFT ratio [{ci} CI]",
            f"efficiency [{ci} CI]", f"gen_gain [{ci} CI]", f"pipelining [{ci} CI]",
            "generating at once"]


def summary_row(row) -> list[str]:
    serial = int(row["arm"]) == SERIAL_ARM
    ratio = (lambda col, fmt: DASH) if serial else (lambda col, fmt: with_ci(row, col, fmt))
    reps = row.get("n_reps")
    return [
        arm_name(row["arm"]),
        "n/a" if missing(reps) else str(int(reps)),
        fmt_num(row.get("agg_tps")),
        ratio("speedup", fmt_times),
        fmt_num(row.get("user_tps")),
        ratio("user_ratio", fmt_change),
        fmt_num(row.get("ttft_s"), 2),
        ratio("ttft_ratio", lambda x: fmt_times(x, 1)),
        ratio("efficiency", fmt_pct),
        ratio("gen_gain", fmt_times),
        ratio("pipelining", fmt_times),
        streams_cell(row),
    ]


def streams_cell(row) -> str:
    """How many requests the server generated for at once: the arm's nominal number, or the
    time-weighted number where it queued the rest (analyse.cells_queued)."""
    streams, queued = row.get("streams"), row.get("queued_cells")
    if missing(streams):
        return DASH
    if int(row["arm"]) < 0:  # a rate arm: what its arrivals made the server run at once
        return f"{streams:.1f}"
    if missing(queued) or int(queued) == 0:
        return f"{int(row['arm'])}"
    return f"{streams:.1f} of {int(row['arm'])} (queued)"


# Which column of the per-arm table prints each headline number.
METRIC_COLUMNS = {"agg_tps": 2, "speedup": 3, "user_tps": 4, "user_ratio": 5, "ttft_s": 6,
                  "ttft_ratio": 7, "efficiency": 8, "gen_gain": 9, "pipelining": 10}


def headline_refs(target, records, table_rows, columns, index, refused: bool) -> tuple:
    """Provenance of the per-arm table, of each row and of each number in a row.

    A within-rep ratio's cells are the arm's cells and the serial cells of the same reps.
    """
    table_id = prov.headline_id(target)
    title = f"Per-arm results of {target}" + (" (not a headline: refused)" if refused else "")
    refs = [prov.Ref(table_id, "table", title,
                     prov.with_roles((index.labels(target), "source")), table_id)]
    for r, text in zip(records, table_rows):
        arm = int(r["arm"])
        row_id = prov.headline_id(target, arm)
        fallback = split_list(r.get("cells"))
        metrics = [m for m in METRIC_COLUMNS if arm != SERIAL_ARM or m in prov.ABSOLUTE]
        refs.append(prov.Ref(
            row_id, "table-row", f"Per-arm results of {target}, {arm_name(arm)}",
            prov.metric_cells(index, target, arm, metrics[-1], fallback), anchor=row_id,
            parent=table_id, row=dict(zip(columns, text)),
        ))
        for m in metrics:
            refs.append(prov.Ref(
                prov.headline_id(target, arm, m), "table-cell",
                f"{target}, {arm_name(arm)}: {prov.METRIC_TITLES[m]}",
                prov.metric_cells(index, target, arm, m, fallback), anchor=row_id,
                parent=row_id,
                metric={"name": m, "value": r.get(m), "ci_low": r.get(f"{m}_lo"),
                        "ci_high": r.get(f"{m}_hi"), "text": text[METRIC_COLUMNS[m]]},
            ))
    return tuple(refs)


def _refusal(target: str, decision: dict | None) -> str | None:
    if decision is None:
        return f"Refused: no headline for {target}. Reason: the checks gave no verdict for it."
    if decision["status"] != "refused":
        return None
    reasons = "; ".join(str(r.get("reason") or r["sentence"]).rstrip(".")
                        for r in decision["refusals"])
    return f"Refused: no headline for {target}. Reason: {reasons}."


PROVISIONAL = "Provisional: "  # how a provisional headline's warning begins


def headline_text(target, records, decision, serialised: frozenset, label: str) -> list:
    """The words of a target's headline, without its table: the refusal, or the provisional
    warning, the headline and the batching-or-pipelining reading of each parallel arm.
    ``records``: the target's summary rows in arm order; ``label``: the interval level."""
    refusal = _refusal(target, decision)
    if refusal:
        return [Paragraph(refusal, "refusal")]
    blocks: list = []
    excluded = (decision or {}).get("excluded_arms", {})
    # the headline and its reading are the closed-loop arms' (rate arms: the open loop)
    parallel = [r for r in records if int(r["arm"]) > SERIAL_ARM
                and not missing(r.get("speedup")) and str(int(r["arm"])) not in excluded]
    unquoted = (decision or {}).get("unquoted_metrics", [])
    top = headline_sentence(parallel[-1], label, unquoted) if parallel else None
    if top and int(parallel[-1]["arm"]) in serialised:
        top += (
            f" The server served {arm_name(parallel[-1]['arm'])} one request at a time "
            "(see the warning above): this is what that server setting costs, not what "
            "the engine can do."
        )
    if top and decision["status"] == "provisional":
        why = " ".join(p["sentence"] for p in decision["provisional"])
        blocks.append(Paragraph(PROVISIONAL + why, "warning"))
    if top:
        blocks.append(Paragraph(top, "headline"))
        blocks.append(Paragraph(
            "Both are true at once. The aggregate is the number that sets the operator's "
            "bill; the per-user rate is the number that decides whether anyone wants to use "
            "the server."
        ))
    else:
        blocks.append(Paragraph("No parallel arm has a speedup to headline.", "note"))
    readings = [s for s in (decomposition_sentence(r, int(r["arm"]) in serialised)
                            for r in parallel) if s]
    if readings:
        blocks += [Heading(3, "Batching or pipelining"), Bullets(readings)]
    return blocks


def headline_blocks(target, rows, decision, serialised: frozenset, index, ci: float,
                    sequential: bool = False) -> list:
    """Refusal or headline, the batching-or-pipelining reading, the per-arm table and sources."""
    label = ci_label(ci, sequential)
    refusal = _refusal(target, decision)
    records = sorted((r for _, r in rows.iterrows()), key=lambda r: arm_order(r["arm"]))
    blocks = headline_text(target, records, decision, serialised, label)
    title = "Per-arm results"
    note = (
        "Ratios are within-rep against serial-1 of the same rep; medians across reps, runs "
        f"pooled, with {interval_words(label)}s. gen_gain = per-user rate × concurrency / "
        "serial rate (batching in the generation stage), where concurrency is the arm's, or, "
        "where the server queued requests for a slot, the time-weighted number it generated "
        "for at once (\"generating at once\"); pipelining = speedup / gen_gain (overlap)."
    )
    kind = ""
    excluded = (decision or {}).get("excluded_arms", {})
    if excluded and not refusal:
        note += " Not a headline: " + "; ".join(excluded.values()) + "."
    if refusal:
        title += f" {DASH} not a headline (refused, see above)"
        note = "Not a headline: shown for diagnosis only. " + note
        kind = "not-headline"
    columns = summary_columns(label)
    table_rows = [summary_row(r) for r in records]
    quiet = set((decision or {}).get("no_percentiles", []))
    for text, r in zip(table_rows, records):
        if not refusal and str(int(r["arm"])) in excluded:  # shown for diagnosis only
            text[0] += " (not a headline)"
        if str(int(r["arm"])) in quiet:  # its waiting grew all cell long: no figure holds
            text[6] = text[7] = "not quoted"
        for metric in (decision or {}).get("unquoted_metrics", []):  # e.g. a buffered stream
            for col in {"ttft": (6, 7), "user": (4, 5)}[metric]:
                text[col] = "not quoted"
    table_id = prov.headline_id(target)
    row_ids = [prov.headline_id(target, r["arm"]) for r in records]
    blocks.append(Table(title, columns, table_rows, note, kind, table_id, row_ids))
    refs = headline_refs(target, records, table_rows, columns, index, bool(refusal))
    cells = union(rows.get("cells", []))
    blocks.append(Sources(cells, union(rows.get("raw_sha256", [])), table_id, refs,
                          index.scope(cells)))
    return blocks
