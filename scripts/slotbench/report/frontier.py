"""The report's "Frontier" section (a grid of workloads only): every workload side by side, per-user
against aggregate rate with the non-dominated points named, one sentence per workload on which
stage carries its speedup at its widest arm, and whether the data show that a prefill-heavy mix
gains by overlap and a decode-heavy one by batching.

It presents results/<experiment>/analysis/frontier.json (slotbench.analysis.frontier, which
decided the non-dominated points, each factor's verdict and the claim) and the frontier figure;
it decides nothing.
"""

from __future__ import annotations

from slotbench.analysis.frontier import GAINS, LOSES, NO_SPEEDUP, UNCLEAR
from slotbench.core.cells import arm_name, label_key
from slotbench.core.fmt import fmt_num, fmt_times, with_ci
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Bullets, Heading, Paragraph, Table
from slotbench.report.sections import figure_blocks
from slotbench.report.traps import TargetContext

SECTION = "Frontier"
FRONTIER_ID = "frontier"
# The figures' sources name this section; the report's Figures section leaves them out.
FIGURE_SECTION = "frontier"
FACTOR = {"gen_gain": "batching (gen_gain)", "pipelining": "overlap (pipelining)"}
CARRIES = {
    "gen_gain": "batching (gen_gain) carries the speedup",
    "pipelining": "overlap (pipelining) carries the speedup",
    "both": "both carry the speedup, {main} the more",
    "neither": "neither gen_gain nor pipelining is above 1× over its whole interval",
}
JUDGED = {GAINS: "above 1× over its whole interval", LOSES: "below 1× over its whole interval",
          UNCLEAR: "not distinguishable from 1×"}
STATUS = {"refused": " Its headline was refused (see its section): these numbers are not a "
                     "result.",
          "provisional": " Its headline is provisional (see its section)."}
WARNED = " Its section opens with a warning to read before these numbers."


def _lengths(w: dict) -> str:
    if w["input_tokens"] is None or w["output_tokens"] is None:
        return w["workload"]
    return (f"input {w['input_tokens']}, output {w['output_tokens']} tokens"
            + (f"; {w['mix']}" if w["mix"] else ""))


def workload_sentence(w: dict, decision: dict | None) -> str:
    """What the data show of one workload at its widest arm, with the numbers."""
    s = w["split"]
    head = f"{w['target']} ({_lengths(w)})"
    if not s:
        return f"{head}: no parallel arm was measured, so there is no speedup to split."
    times = lambda x: fmt_times(x)  # noqa: E731
    text = (f"{head} at {arm_name(s['arm'])}: speedup {with_ci(s, 'speedup', times)}, "
            f"gen_gain {with_ci(s, 'gen_gain', times)}, pipelining "
            f"{with_ci(s, 'pipelining', times)}: "
            + _carried(s))
    return (text + "." + STATUS.get((decision or {}).get("status"), "")
            + (WARNED if (decision or {}).get("warnings") else ""))


def _carried(s: dict) -> str:
    """Which factor carries the speedup, as the analysis judged it, or why none does."""
    verdicts = s["verdicts"]
    if s["carries"] == NO_SPEEDUP:
        return (f"there is no speedup to carry (it is {JUDGED[verdicts['speedup']]}): "
                + ", ".join(f"{FACTOR[f]} is {JUDGED[verdicts[f]]}" for f in FACTOR))
    text = CARRIES[s["carries"]].format(main=FACTOR.get(s["main"], ""))
    lost = [FACTOR[f] for f in FACTOR if verdicts[f] == LOSES]
    if lost:
        text += (f", and {' and '.join(lost)} {'is' if len(lost) == 1 else 'are'} below 1× over "
                 "the whole interval, taking part of the gain back")
    return text


def claim_sentence(claim: dict) -> str:
    """Whether the data show that a prefill-heavy mix gains by overlap and a decode-heavy one by
    batching, as the analysis judged it."""
    said = "a prefill-heavy mix gains mainly by overlap and a decode-heavy one mainly by batching"
    if claim["holds"] is None:
        return f"Whether {said} is not assessable in these data: {claim['why']}."
    groups = (f"prefill-heavy: {', '.join(claim['prefill_heavy'])}; decode-heavy: "
              f"{', '.join(claim['decode_heavy'])}")
    if claim["holds"]:
        return f"In these data {said} ({groups})."
    return (f"These data do not show that {said} ({groups}): "
            f"{', '.join(claim['against'])} {'does' if len(claim['against']) == 1 else 'do'} "
            "not, as the sentences above say.")


def _point_row(p: dict) -> list[str]:
    one = lambda x: fmt_num(x, 1)  # noqa: E731
    by = p["dominated_by"]
    return [p["target"], arm_name(p["arm"]), with_ci(p, "user_tps", one),
            with_ci(p, "agg_tps", one), with_ci(p, "ttft_s", lambda x: fmt_num(x, 3)),
            "non-dominated" if p["frontier"] else
            (f"dominated by {by['target']} {arm_name(by['arm'])}" if by else "not drawn")]


def blocks(front: dict, decision: dict, figures_sources: dict, figure_paths: dict,
           index: prov.CellIndex, ci: str) -> list:
    """The section, or nothing without a grid (no analysis/frontier.json)."""
    workloads = (front or {}).get("workloads") or []
    if not workloads:
        return []
    points = [p for w in workloads for p in w["points"]]
    named = [f"{f['target']} at {arm_name(f['arm'])}" for f in front["frontier"]]
    out: list = [
        Heading(2, SECTION),
        Paragraph(
            "Each workload of the grid is a target of its own, measured with the same arms, "
            "rotation and serial control as any target (its section above). Here they are side "
            "by side: every arm's median per-user and aggregate rate with their "
            f"{ci} intervals over the reps. A point is non-dominated when no point of any "
            "workload has both a higher per-user and a higher aggregate rate (medians): "
            + (", ".join(named) if named else "none") + "."),
        Table("Every workload's arms", ["workload", "arm", f"per-user tok/s [{ci}]",
                                        f"aggregate tok/s [{ci}]", f"TTFT s [{ci}]", "frontier"],
              [_point_row(p) for p in points],
              "The cells behind each row are that workload's cells of that arm, listed below.",
              anchor=FRONTIER_ID),
        Paragraph("What carries each workload's speedup at its widest arm, each factor judged "
                  f"on its {ci} interval (a gain when it lies wholly above 1×):"),
        Bullets([workload_sentence(w, (decision or {}).get(w["target"])) for w in workloads]),
        Paragraph(claim_sentence(front["claim"])),
    ]
    labels = sorted({c for p in points for c in p["cells"]}, key=label_key)
    ref = prov.Ref(FRONTIER_ID, "table", "Frontier", prov.with_roles((labels, "source")),
                   FRONTIER_ID)
    sources = TargetContext("", labels, index).sources
    out.append(sources(labels, FRONTIER_ID, (ref,)))
    shown = {fid: src for fid, src in figures_sources.items()
             if src.get("section") == FIGURE_SECTION}
    return out + figure_blocks(shown, figure_paths, TargetContext("", [], index).sources)[1:]
