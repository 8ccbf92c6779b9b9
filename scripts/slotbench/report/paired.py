"""The report's "Paired comparison" section (design: paired): every target against the first,
pair by pair, from results/<experiment>/analysis/paired.json (slotbench.analysis.paired),
with the unpaired verdict of the same cells beside each row, the drift line, and the figure."""

from __future__ import annotations

from pathlib import Path

from slotbench.analysis.compare import ABSOLUTE, NOT_ASSESSABLE, TOO_FEW
from slotbench.analysis.paired import TOO_FEW_PAIRS
from slotbench.core.cells import SERIAL_ARM, arm_name
from slotbench.core.fmt import DASH, fmt_num, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Figure, Heading, Paragraph, Table
from slotbench.report.traps import TargetContext

PAIRED_ID = "paired"


def _num(x, metric: str) -> str:
    return DASH if missing(x) else fmt_num(x, 1 if metric in ABSOLUTE else 3)


def verdict_text(row: dict) -> str:
    """The paired verdict as printed: too few pairs says how many would resolve a change the
    size of the one measured."""
    if row["verdict"] == NOT_ASSESSABLE and row.get("why"):
        return f"{row['verdict']} ({row['why']})"
    if row["verdict"] == TOO_FEW_PAIRS:
        change = "" if missing(row["ratio"]) else f" of {abs(row['ratio'] - 1):.0%}"
        return f"too few pairs: about {row['pairs_to_decide']} would resolve a change{change}"
    return row["verdict"] or "refused"


def _unpaired_text(u: dict) -> str:
    if u.get("verdict") == TOO_FEW:
        return f"{TOO_FEW} (about {u['reps_to_decide']} reps a side would)"
    return u.get("verdict") or DASH


def _drift_sentence(target: str, line: dict) -> str:
    if not line.get("assessable"):
        return (f"{target}: not assessable (fewer than {line['min_points']} sides with a serial "
                f"cell: MIN_DRIFT_POINTS = {line['min_points']}, see docs/method.md#constants)")
    change = f"{line['change']:+.1%}".replace("-", "−")
    return (f"{target}: {arm_name(SERIAL_ARM)} {fmt_num(line['fit_start'], 1)} → "
            f"{fmt_num(line['fit_end'], 1)} tok/s over {line['minutes']:.1f} min ({change}, a "
            f"straight line through its {len(line['points'])} sides)")


def blocks(result: dict, figure: str | None, index: prov.CellIndex, ci: str) -> list:
    if not result:
        return []
    order = result["order"]
    out: list = [
        Heading(2, "Paired comparison"),
        Paragraph(
            f"Every target against {result['baseline']} (A), pair by pair: pair k is rep k of "
            "every target, measured back to back in an order that reverses every other pair "
            "(A B, B A, …), so drift over the run touches both sides nearly alike and linear "
            "drift cancels. Per row: the median of the per-pair ratios B / A with its "
            f"{ci} bootstrap interval over the pairs, the exact Wilcoxon signed-rank p-value of "
            "their logarithms (Holm–Bonferroni over the comparison's rows) and the verdict; "
            "beside it, what an unpaired rank-sum comparison of the same cells says. "
            f"{order['pairs_in_order']} of {result['pairs_planned']} pairs were measured in "
            "their planned order, by their sides' start times"
            + (f" (not: {', '.join(order['pairs_out_of_order'])}, measured again or resumed)"
               if order["pairs_out_of_order"] else "") + "."),
        Paragraph("Drift over the run, the serial arm's aggregate tok/s of every side: "
                  + "; ".join(_drift_sentence(t, line) for t, line in result["drift"].items())
                  + ". Absolute rates of two results measured at different times move by as "
                  "much; within a pair they cancel.", "note"),
    ]
    for target, comp in result["comparisons"].items():
        if comp["refusal"]:
            out.append(Paragraph(f"{target} against {comp['a']}: no verdict: "
                                 f"{comp['refusal']}.", "refusal"))
        rows = [[arm_name(r["arm"]), r["label"], _num(r["a"], r["metric"]),
                 _num(r["b"], r["metric"]),
                 DASH if missing(r["ratio"]) else
                 f"{r['ratio']:.3f} [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]",
                 DASH if missing(r["p"]) else f"{r['p']:.3g}", verdict_text(r),
                 _unpaired_text(r["unpaired"]), str(r["pairs"])] for r in comp["rows"]]
        out.append(Table(f"{target} (B) against {comp['a']} (A), paired",
                         ["arm", "metric", "A", "B", f"B / A per pair [{ci}]", "p (signed-rank)",
                          "verdict", "unpaired verdict", "pairs"], rows,
                         "A and B: medians over the pairs' cells. The cells of every pair and "
                         "each pair's ratio are in analysis/paired.json next to this report.",
                         anchor=f"{PAIRED_ID}-{target}"))
    if figure:
        out.append(Figure(PAIRED_ID, "Paired ratios and drift",
                          "Left: each pair's ratio B / A (dots) of the widest arm's speedup and "
                          "of the serial arm's aggregate tok/s, with the median and its "
                          "interval. Right: the serial arm's aggregate tok/s of every side over "
                          "the run's time.", Path(figure).name, figure))
    labels = sorted({c for comp in result["comparisons"].values() for r in comp["rows"]
                     for c in r["cells_a"] + r["cells_b"]}
                    | {p["cell"] for d in result["drift"].values() for p in d["points"]})
    ref = prov.Ref(PAIRED_ID, "table", "Paired comparison", prov.with_roles((labels, "source")),
                   f"{PAIRED_ID}-{next(iter(result['comparisons']), '')}")
    out.append(TargetContext("", labels, index).sources(labels, PAIRED_ID, (ref,)))
    return out
