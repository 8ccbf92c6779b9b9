"""The capacity section of a target: how many users fit under the service levels, and where the
aggregate saturates, presented from results/<experiment>/analysis/capacity.json
(slotbench.analysis.capacity)."""

from __future__ import annotations

from slotbench.core.cells import arm_name
from slotbench.core.fmt import DASH, fmt_num, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table
from slotbench.report.traps import TargetContext

LEVEL_NAMES = {"user_tps": "per-user rate", "ttft": "TTFT"}


def _interval(row: dict, name: str, digits: int = 1) -> str:
    value, lo, hi = row.get(name), row.get(f"{name}_lo"), row.get(f"{name}_hi")
    if missing(value):
        return DASH
    if missing(lo) or missing(hi):
        return fmt_num(value, digits)
    return f"{fmt_num(value, digits)} [{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]"


def levels_text(slo: dict, open_loop: bool = False) -> str:
    """The service levels in words: the per-user rate floor and the TTFT ceiling, at the
    configured percentile (closed loop) or from each request's planned arrival (open loop)."""
    parts = []
    if slo.get("user_tps_min") is not None:
        parts.append(f"≥ {fmt_num(slo['user_tps_min'])} tok/s each")
    if slo.get("ttft_s_max") is not None:
        ceiling = f"≤ {fmt_num(slo['ttft_s_max'], 2)} s"
        parts.append(f"TTFT {ceiling} from the planned arrival" if open_loop
                     else f"TTFT {slo['ttft_percentile']} {ceiling}")
    return (" and " if open_loop else " with ").join(parts)


def statement(record: dict, slo: dict, ci: str) -> str | None:
    """One sentence: the largest concurrency meeting every level, and what the next arm says."""
    cap = record.get("capacity")
    if not cap:
        return None
    arms = {r["arm"]: r for r in record["arms"]}
    levels = levels_text(slo)
    nxt = arms.get(cap.get("next_arm"))
    if cap["arm"] is None:
        text = f"No measured concurrency meets {levels}: even serial-1 "
        return text + _why(nxt, slo, ci) + "."
    users = "1 user" if cap["arm"] == 1 else f"{cap['arm']} concurrent users"
    text = f"Serves {users} at {levels}"
    if nxt is None:
        return text + (f", at every measured arm: the limit lies beyond {arm_name(cap['arm'])}, "
                       "the largest arm measured.")
    if cap.get("between"):
        text += f"; at {nxt['arm']} users {_why(nxt, slo, ci)}"
        return text + (f". The limit lies between {cap['arm']} and {nxt['arm']} users; nothing "
                       "between them was measured.")
    return text + (f"; at {nxt['arm']} users the reps cannot tell whether the levels are met "
                   f"({_why(nxt, slo, ci)}).")


def _why(row: dict | None, slo: dict, ci: str) -> str:
    if row is None:
        return ""
    parts = []
    judged = row.get("judged", {})
    if "user_tps" in judged:
        parts.append(f"the per-user rate is {_interval(row, 'user_tps')} tok/s")
    if "ttft" in judged:
        parts.append(f"TTFT {slo['ttft_percentile']} is {_interval(row, 'ttft', 2)} s")
    return " and ".join(parts) + f" ({ci} intervals over reps)"


def saturation_sentence(record: dict) -> str:
    sat = record["saturation"]
    gain = sat["gain"]  # slo.saturation_gain, as the analysis judged with it
    if sat["arm"] is None:
        return (f"Aggregate tok/s grew by more than {gain:.0%} at every step: not saturated by "
                "the largest arm.")
    step = f"{abs(sat['step']):.1%}"
    change = f"adds {step}" if sat["step"] >= 0 else f"loses {step}"
    return (f"The aggregate saturates at {arm_name(sat['arm'])}: {arm_name(sat['next_arm'])} "
            f"{change} (a gain of less than {gain:.0%}, slo.saturation_gain).")


def blocks(record: dict | None, slo: dict, ctx: TargetContext) -> list:
    """The capacity heading, statement, saturation sentence and the per-arm curve table."""
    if not record or not record.get("arms"):
        return []
    sentence = statement(record, slo, ctx.ci)
    if not sentence:  # no level set: the saturation point alone, the curve is the figure
        return [Paragraph(saturation_sentence(record) + " (Set slo.* for a capacity "
                          "statement.)")]
    out: list = [Heading(3, "Capacity"), Paragraph(sentence, "headline"),
                 Paragraph(saturation_sentence(record))]
    pct = slo["ttft_percentile"]
    columns = ["arm", "cells", f"per-user tok/s [{ctx.ci}]", f"TTFT {pct} s [{ctx.ci}]",
               f"aggregate tok/s [{ctx.ci}]", "service levels"]
    rows = [[arm_name(r["arm"]), str(r["cells"]), _interval(r, "user_tps"), _interval(r, "ttft", 2),
             _interval(r, "agg_tps"),
             ", ".join(f"{LEVEL_NAMES[k]} {v}"
                       for k, v in sorted(r["judged"].items(), key=lambda kv: kv[0] != "user_tps"))
             or DASH] for r in record["arms"]]
    table_id = prov.capacity_id(ctx.target)
    out.append(Table(f"Capacity curve of {ctx.target}", columns, rows,
                     "Medians over each arm's cells (one per rep) with bootstrap intervals over "
                     "them; an arm meets a level only when its whole interval does.",
                     anchor=table_id))
    labels = ctx.index.labels(ctx.target)
    ref = prov.Ref(table_id, "table", f"Capacity curve of {ctx.target}",
                   prov.with_roles((labels, "source")), table_id)
    out.append(ctx.sources(labels, table_id, (ref,)))
    return out
