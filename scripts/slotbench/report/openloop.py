"""The open loop's section: per target with rate arms, their numbers, the capacity in requests/s
and the open loop's figures, presented from results/<experiment>/analysis/openloop.json
(slotbench.analysis.openloop), the figures' sources and the overload check's verdict. A run without
rate arms has no section.

An arm the overload check marked (its queue grew all cell long) has no TTFT percentile quoted:
the table says "overloaded" where they would stand, since they measure how long the cell ran.
"""

from __future__ import annotations

from slotbench.analysis.capacity import MISSES
from slotbench.analysis.openloop import (
    NO_GOODPUT_LEVEL,
    NO_SERVICE_LEVEL,
    has_rate_arms,
    overloaded,
)
from slotbench.core.fmt import DASH, fmt_change, fmt_num, fmt_pct, fmt_times, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table
from slotbench.report.capacity import levels_text
from slotbench.report.sections import figure_blocks
from slotbench.report.traps import TargetContext

SECTION = "Open loop (rate arms)"
# The figures' sources name this section; the report's Figures section leaves them out.
FIGURE_SECTION = "openloop"
OVERLOADED = "overloaded"
PERCENTILES = ("ttft_p50", "ttft_p95", "ttft_p99")


def _ci(row: dict, name: str, fmt) -> str:
    value, lo, hi = row.get(name), row.get(f"{name}_lo"), row.get(f"{name}_hi")
    if missing(value):
        return DASH
    if missing(lo) or missing(hi):
        return fmt(value)
    return f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]"


def _ms(seconds) -> str:
    return fmt_num(float(seconds) * 1000, 1)


def _rate(value) -> str:
    return f"{float(value):g}"


def _goodput(row: dict) -> str:
    if missing(row.get("goodput")):
        return DASH
    text = _ci(row, "goodput", lambda x: fmt_pct(x, 1))
    return f"{text} ({row['requests_good']}/{row['requests']})"


def _goodput_of(row: dict, ci: str) -> str:
    return f"goodput {_ci(row, 'goodput', lambda x: fmt_pct(x, 1))}, {ci} interval over reps"


def capacity_sentence(record: dict, slo: dict, ci: str, marked: set[int]) -> str:
    """One sentence: the largest offered rate whose goodput meets slo.goodput, what the next
    rate says, or why there is no capacity statement."""
    reason, cap = record.get("capacity_reason"), record.get("capacity")
    if reason == NO_GOODPUT_LEVEL or (cap is None and reason != NO_SERVICE_LEVEL):
        return ("No capacity in requests/s: slo.goodput is not set (e.g. 0.95, the share of a "
                "rate arm's requests that must meet every service level).")
    level = f"{round(float(slo['goodput']) * 100, 6):g}%"
    if reason == NO_SERVICE_LEVEL:
        return (f"No capacity in requests/s: slo.goodput is {level}, but no service level "
                "(slo.user_tps_min, slo.ttft_s_max) says what a request must meet.")
    rows = {r["arm"]: r for r in record["arms"]}
    nxt = rows.get(cap.get("next_arm"))
    within = f"at least {level} of requests meeting {levels_text(slo, open_loop=True)}"
    if cap["rate"] is None:
        if nxt["verdict"] == MISSES:
            return (f"No measured rate keeps {within}: even {nxt['name']}, the lowest rate "
                    f"measured, misses it ({_goodput_of(nxt, ci)}).")
        return (f"No measured rate is shown to keep {within}: at {nxt['name']}, the lowest rate "
                f"measured, the reps cannot tell ({_goodput_of(nxt, ci)}).")
    best = rows[cap["arm"]]
    achieved = _ci(best, "achieved_rate", lambda x: fmt_num(x, 2))
    text = (f"Serves {_rate(cap['rate'])} requests/s offered ({best['name']}, achieved "
            f"{achieved} req/s) with {within}")
    if nxt is None:
        text += (f"; every measured rate meets it, so the limit lies beyond "
                 f"{_rate(cap['rate'])} requests/s, the largest rate measured.")
    elif cap.get("between"):
        low, high = (_rate(r) for r in cap["between"])
        text += (f"; at {high} requests/s it misses ({_goodput_of(nxt, ci)}). The limit lies "
                 f"between {low} and {high} requests/s; nothing between them was measured.")
    else:
        text += (f"; at {_rate(cap['next_rate'])} requests/s the reps cannot tell whether it is "
                 f"met ({_goodput_of(nxt, ci)}).")
    if cap["arm"] in marked:
        text += (f" The overload check marked {best['name']} overloaded (its queue grew all cell "
                 "long): a longer cell at that rate would have queued more.")
    return text


def columns(ci: str) -> list[str]:
    return ["rate arm", "offered req/s", f"achieved req/s [{ci}]",
            *(f"TTFT {p[5:]} ms [{ci}]" for p in PERCENTILES), "per-user tok/s",
            f"per-user change [{ci}]", "aggregate tok/s", f"speedup [{ci}]",
            f"in flight [{ci}]", f"goodput [{ci}] (met/sent)"]


def arm_cells(row: dict, over: bool) -> list[str]:
    """One rate arm's row as printed; an overloaded arm quotes no TTFT percentile."""
    ttft = [OVERLOADED if over else _ci(row, p, _ms) for p in PERCENTILES]
    return [row["name"], _rate(row["offered_rate"]), _ci(row, "achieved_rate",
                                                          lambda x: fmt_num(x, 2)),
            *ttft, fmt_num(row.get("user_tps"), 1), _ci(row, "user_ratio", fmt_change),
            fmt_num(row.get("agg_tps"), 1), _ci(row, "speedup", fmt_times),
            _ci(row, "in_flight", lambda x: fmt_num(x, 1)), _goodput(row)]


def _note(slo: dict, ci: str, over_names: list[str]) -> str:
    levels = levels_text(slo, open_loop=True)
    note = (
        "Medians over each rate arm's cells (one per rep, runs pooled) with "
        f"{ci} bootstrap intervals. TTFT counts from each request's planned arrival; per-user "
        "change and speedup are within-rep against serial-1 of the same rep; in flight is the "
        "effective concurrency (requests in flight, time-weighted). Goodput is the share of the "
        "arm's requests that met every service level set"
        + (f" ({levels})" if levels else " (none is set: slo.user_tps_min, slo.ttft_s_max)")
        + ", with a bootstrap interval over reps."
    )
    if over_names:
        note += (f" Overloaded (the overload check: its queue grew all cell long): "
                 f"{', '.join(over_names)}; no TTFT percentile is quoted for it, since it would "
                 "measure how long the cell ran.")
    return note


def target_blocks(target: str, record: dict, slo: dict, ctx: TargetContext,
                  marked: set[int]) -> list:
    """A target's capacity sentence, its rate arms' table and their sources."""
    table_id, cap_id = prov.openloop_id(target), prov.openloop_id(target, what="capacity")
    rows = record["arms"]
    printed = [arm_cells(r, r["arm"] in marked) for r in rows]
    heads = columns(ctx.ci)
    arm_labels = [label for r in rows for label in ctx.index.labels(target, r["arm"])]

    def cells_of(labels):  # per-user change and speedup divide by the serial cells
        return prov.with_roles((labels, "arm"), (ctx.index.serial_baseline(labels),
                                                 "serial-baseline"))

    title = f"Rate arms of {target}"
    refs = [prov.Ref(table_id, "table", title, cells_of(arm_labels), table_id),
            prov.Ref(cap_id, "table", f"Capacity in requests/s of {target}",
                     prov.with_roles((arm_labels, "arm")), cap_id)]
    for r, text in zip(rows, printed):
        row_id = prov.openloop_id(target, r["arm"])
        refs.append(prov.Ref(row_id, "table-row", f"{title}, {r['name']}",
                             cells_of(ctx.index.labels(target, r["arm"])), row_id,
                             parent=table_id, row=dict(zip(heads, text))))
    over_names = [r["name"] for r in rows if r["arm"] in marked]
    sources = arm_labels + ctx.index.serial_baseline(arm_labels)
    return [
        Heading(3, target),
        Paragraph(capacity_sentence(record, slo, ctx.ci, marked), "headline", anchor=cap_id),
        Table(title, heads, printed, _note(slo, ctx.ci, over_names), anchor=table_id,
              row_ids=[prov.openloop_id(target, r["arm"]) for r in rows]),
        ctx.sources(sources, table_id, tuple(refs)),
    ]


def blocks(record: dict | None, verdicts: list[dict], figures_sources: dict,
           figure_paths: dict, index: prov.CellIndex, ci: str) -> list:
    """The section, or nothing when no target has rate arms."""
    if not has_rate_arms(record):
        return []
    slo = record.get("slo") or {}
    marked = overloaded(verdicts)
    out: list = [
        Heading(2, SECTION),
        Paragraph(
            "A rate arm offers requests at a planned rate whether or not earlier ones are done "
            "(open loop), so a queue shows in its TTFT, which counts from each request's planned "
            "arrival. The capacity in requests/s is the largest offered rate whose goodput meets "
            "slo.goodput over its whole interval with every lower rate meeting too; between two "
            "measured rates nothing was measured, so nothing is interpolated."
        ),
    ]
    for target, rec in sorted(record["targets"].items()):
        if rec.get("arms"):
            ctx = TargetContext(target, index.labels(target), index, ci=ci)
            out += target_blocks(target, rec, slo, ctx, marked.get(target, set()))
    shown = {fid: src for fid, src in figures_sources.items()
             if src.get("section") == FIGURE_SECTION}
    sources = TargetContext("", [], index).sources
    return out + figure_blocks(shown, figure_paths, sources)[1:]  # without its "Figures" heading


def general_figures(figures_sources: dict) -> dict:
    """The figures the report's Figures section shows: all but those a section of their own
    shows (this one's, the frontier's)."""
    return {fid: src for fid, src in figures_sources.items() if not src.get("section")}
