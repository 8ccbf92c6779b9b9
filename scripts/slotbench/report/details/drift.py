"""Details of the drift check: the serial arm's burst against its plateau."""

from __future__ import annotations

from slotbench.core.fmt import count, fmt_change, fmt_duration, fmt_pct, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph

TRAP = "drift"


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    tid = prov.integrity_id(ctx.target, "burst")
    if "change" not in ev:
        return [Heading(4, "Drift"), Paragraph(verdict["sentence"], "note")]
    change = ev["change"]
    if not verdict["assessable"]:
        text = verdict["sentence"]
    else:
        text = (
            f"Drift: {verdict['summary']} over {count(ev['n_serial'], 'serial cell')} spanning "
            f"{fmt_duration(ev['span_s'])}; the article lost {fmt_pct(-ev['article_change'], 1)}. "
            f"Burst is the median of the first {fmt_pct(ev['burst_frac'])} of the serial cells in "
            f"time order (runs pooled), plateau the median of the last "
            f"{fmt_pct(ev['plateau_frac'])} (BURST_FRAC = {ev['burst_frac']:g}, PLATEAU_FRAC = "
            f"{ev['plateau_frac']:g}, see docs/method.md#constants). The serial arm does the same "
            "work in every rep, so a trend in it is the machine drifting, not concurrency."
        )
        if verdict["fired"]:
            text += (
                f" A loss beyond {fmt_pct(verdict['threshold'])} means the machine slowed during "
                "the run (heat, power or background load): rotation spreads it over the arms, but "
                "absolute tok/s depend on when they were measured; a cooldown between reps or a "
                "cooler machine narrows it."
            )
    ref = prov.Ref(
        tid, "table", f"Burst vs plateau of {ctx.target}'s serial arm: {verdict['summary']}",
        prov.with_roles((ev["burst_cells"], "burst"), (ev["plateau_cells"], "plateau")), tid,
        parent=ctx.overview_id,
        metric={"name": "change", "value": change,
                "text": "n/a" if missing(change) else fmt_change(1 + change, 1)},
    )
    cells = set(ev["burst_cells"]) | set(ev["plateau_cells"])
    return [Heading(4, "Drift"), Paragraph(text, "warning" if verdict["fired"] else "", tid),
            ctx.sources(cells, tid, (ref,))]
