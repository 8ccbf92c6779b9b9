"""``python -m slotbench compare A B``: did the change help? Two results, arm by arm.

The document of a comparison (slotbench.analysis.compare makes its rows and verdicts, and
slotbench.figures.compare its figure), written as compare.md, compare.html and compare.json,
and the command that makes it. See slotbench.analysis.compare for what each verdict means.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from slotbench.analysis import compare as analysis
from slotbench.analysis.compare import (
    ABSOLUTE,
    CONFOUNDED,
    FASTER,
    GUARDED,
    METRICS,
    SLOWER,
    TOO_FEW,
    Side,
    compare,
    defaults,
    load_side,
)
from slotbench.core.cells import SERIAL_ARM, arm_name
from slotbench.core.cli import Parser
from slotbench.core.fmt import DASH, fmt_duration, fmt_num, fmt_signed_pct, missing
from slotbench.figures.compare import plot
from slotbench.measure.rawfiles import json_bytes
from slotbench.report.blocks import Bullets, Figure, Heading, Paragraph, Table
from slotbench.report.render_html import render_html
from slotbench.report.render_md import render_markdown
from slotbench.workflow.archive import ArchiveError
# the comparison's own account of its verdicts, for --help
ANALYSIS_DOC = analysis.__doc__


def _num(x, metric) -> str:
    if missing(x):
        return DASH
    return fmt_num(x, 1 if metric in ABSOLUTE else 3)


def _when(gap) -> str:
    """When B was measured, from A: "measured 14.0 min after A"."""
    if missing(gap):
        return "measured at another time than A (the cells do not record when)"
    return f"measured {fmt_duration(abs(gap))} {'before' if gap < 0 else 'after'} A"


def _or_fingerprints(fields: list) -> str:
    """The fingerprint differences beside time, as a clause; empty when there are none."""
    if not fields:
        return ""
    return (f", or the difference in {', '.join(fields)} may; this comparison cannot tell "
            "which")


def _time_text(row: dict) -> str:
    """An absolute rate's time confound, as the analysis put it in the row: when B was
    measured, how far the serial arm moved meanwhile, and what that leaves of the verdict."""
    text = _when(row.get("time_gap_s"))
    if row["arm"] != SERIAL_ARM:
        if missing(row.get("serial_move")):
            text += ", the serial arm's move meanwhile unknown"
        else:
            text += (f", while the serial arm moved {fmt_signed_pct(row['serial_move'])} "
                     f"[{fmt_signed_pct(row['serial_move_lo'])}, "
                     f"{fmt_signed_pct(row['serial_move_hi'])}]")
    if row["verdict"] in (FASTER, SLOWER):
        text += ": the machine may have moved, not the server"
    elif row["verdict"] == CONFOUNDED:
        text += (": the machine alone could give the change"
                 + _or_fingerprints(row.get("may_explain") or []))
    return text


def _verdict_text(row: dict) -> str:
    if row["verdict"] == analysis.NOT_ASSESSABLE:  # a side lacks the numbers: nothing to time
        return f"{row['verdict']} ({row['why']})" if row.get("why") else row["verdict"]
    if row["verdict"] == TOO_FEW:
        text = f"{TOO_FEW} (about {row['reps_to_decide']} reps a side would)"
    else:
        text = row["verdict"] or "refused"
    if row["verdict"] and "time_gap_s" in row:
        text += "; " + _time_text(row)
    return text


def _time_note(rec: dict) -> list:
    """Above the table: A and B were measured at different times, which every absolute rate's
    verdict carries; the ratios do not."""
    if not any("time_gap_s" in r for r in rec["rows"]):
        return []
    return [Paragraph(
        f"B was {_when(rec.get('time_gap_s'))} (the median start of each side's cells). A "
        "change of the machine in between and a change of the server look alike in an absolute "
        "rate, so every aggregate and per-user tok/s verdict below says how long apart the two "
        "were measured and how far the serial arm moved meanwhile. The ratios, taken within "
        "each rep, carry no such caveat. Only a paired design (design: paired) measures A and B "
        "together.", "note")]


def _drift_notes(rec: dict, ci: str) -> list:
    """The notes on time: when B was measured, every absolute rate confounded (the serial arm
    moved beyond its spread), the serial arm's move, and the rows whose change that move could
    give; a fingerprint difference that could move the serial arm is named beside time."""
    out: list = _time_note(rec)
    drift = rec.get("drift") or {}
    beside = drift.get("may_explain") or []
    if drift.get("confounded"):
        out.append(Paragraph(
            f"The absolute rates are confounded with time: {drift['text']}, beyond both "
            "sides' spread over their reps. The machine itself may have run at another speed"
            + (f"; the difference in {', '.join(beside)} may explain the move too, and this "
               "comparison cannot tell which" if beside else "")
            + ". So aggregate and per-user tok/s are not compared; the ratios, taken within "
            "each rep, are. To compare absolute rates, measure A and B in one run, in pairs "
            "(design: paired).", "note"))
    elif drift.get("assessable"):
        out.append(Paragraph(
            f"The serial arm's rate from A to B: {drift['text']}."
            + (f" The fingerprints differ in {', '.join(beside)}, one possible explanation of "
               "a move; time is another, and this comparison cannot tell them apart."
               if beside else ""), "note"))
    within = [r for r in rec["rows"] if r.get("within_serial")]
    if within:
        names = ", ".join(f"{arm_name(r['arm'])} {METRICS[r['metric']][0]}" for r in within)
        out.append(Paragraph(
            f"Confounded with time: {names}. Each changed by no more than the serial arm's "
            f"own rate may have moved from A to B ({fmt_signed_pct(drift['change_lo'])} to "
            f"{fmt_signed_pct(drift['change_hi'])}, its {ci} interval), so the machine alone "
            "could give the change"
            + (f"; the difference in {', '.join(beside)} could too, and this comparison cannot "
               "tell which" if beside else "")
            + ". The ratios, taken within each rep, compare. To compare absolute rates, "
            "measure A and B in one run, in pairs (design: paired).", "note"))
    return out


def document(result: dict, figure: str | None = None) -> list:
    ci = f"{result['ci']:.0%}"
    blocks: list = [
        Heading(1, "slotbench compare: did the change help?"),
        Paragraph(f"A = {result['a']}; B = {result['b']}. Per target and arm: medians over each "
                  f"side's cells, B − A with a {ci} bootstrap interval (each side's reps "
                  "resampled on their own), B / A, the rank-sum p-value and a verdict: B faster "
                  "or slower only where the rank-sum test finds a change (Holm–Bonferroni over "
                  "the target's rows) and the interval excludes 0; no detectable change where "
                  "it could have found one and did not; too few reps to decide where it never "
                  "could, with so few cells."),
    ]
    if not result["targets"]:
        blocks.append(Paragraph("No target is in both results: nothing to compare.", "refusal"))
    for target, rec in result["targets"].items():
        blocks.append(Heading(2, f"Target: {target}"))
        if rec["refusal"]:
            blocks.append(Paragraph(f"No verdict: {rec['refusal']}.", "refusal"))
        blocks += _drift_notes(rec, ci)
        too_few = [r for r in rec["rows"] if r["verdict"] == TOO_FEW]
        if too_few:
            blocks.append(Paragraph(
                f"{len(too_few)} rows: too few reps to decide. With as few as "
                f"{min(len(r['cells_a']) for r in too_few)} against "
                f"{min(len(r['cells_b']) for r in too_few)} cells, the "
                f"rank-sum test's smallest possible p-value cannot pass Holm over "
                f"{len(rec['rows'])} rows at {1 - result['ci']:.2g}, so no difference, however "
                f"large, could be claimed; about {too_few[0]['reps_to_decide']} reps a side "
                "could decide. The intervals stand as measured.", "note"))
        for label, summary in rec.get("busy", {}).items():
            blocks.append(Paragraph(f"{label} was measured on a busy machine ({summary}), so "
                                    "the absolute rates are not compared; the ratios, taken "
                                    "within each rep, are.", "note"))
        if rec["differences"]:
            blocks.append(Paragraph("The fingerprints differ in:", "note"))
            shown = lambda v: "absent" if v is None else str(v)  # noqa: E731
            blocks.append(Bullets([f"{k}: A {shown(a)}; B {shown(b)}"
                                   for k, (a, b) in rec["differences"].items()]))
        else:
            blocks.append(Paragraph("The fingerprints do not differ in any field compared.",
                                    "note"))
        rows = [[arm_name(r["arm"]), r["label"], _num(r["a"], r["metric"]),
                 _num(r["b"], r["metric"]),
                 f"{_num(r['diff'], r['metric'])} [{_num(r['diff_lo'], r['metric'])}, "
                 f"{_num(r['diff_hi'], r['metric'])}]",
                 DASH if missing(r["ratio"]) else f"{r['ratio']:.3f}",
                 DASH if missing(r["p"]) else f"{r['p']:.3g}",
                 _verdict_text(r),
                 f"{len(r['cells_a'])} / {len(r['cells_b'])}"] for r in rec["rows"]]
        blocks.append(Table(f"{target}: B against A", ["arm", "metric", "A", "B",
                                                       f"B − A [{ci}]", "B / A", "p", "verdict",
                                                       "cells A / B"], rows,
                            "The cells of each side behind every row are in compare.json."))
    if figure:
        blocks.append(Figure("compare", "A and B by arm", "Median speedup and per-user tok/s of "
                             "each side by arm, with the cells as points.", Path(figure).name,
                             figure))
    return blocks


def write(result: dict, sides: tuple[Side, Side], out: str | Path) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figure = out / "compare.png"
    plot(result, sides, figure)
    blocks = document(result, str(figure))
    (out / "compare.md").write_text(render_markdown(blocks, image_dir="") + "\n")
    (out / "compare.html").write_text(render_html(blocks, "slotbench compare"))
    (out / "compare.json").write_bytes(json_bytes(result))
    return [out / "compare.md", out / "compare.html", out / "compare.json", figure]


def main_compare(argv: list[str]) -> int:
    parser = Parser(prog="slotbench compare", description=ANALYSIS_DOC,
                    examples=[".venv/bin/slotbench compare smoke article",
                              ".venv/bin/slotbench compare a.tar.gz b.tar.gz "
                              "--declare model.sha256"])
    parser.add_argument("a", help="the baseline: an experiment's name (results/<name>/ of this "
                                  "checkout), a result's folder or an archive (.tar.gz)")
    parser.add_argument("b", help="the change: an experiment's name, a folder or an archive")
    parser.add_argument("--out", default="results/compare", help="where to write (results/compare)")
    parser.add_argument("--declare", action="append", default=[], metavar="FIELD",
                        help="a fingerprint field that is meant to differ; "
                             f"one of {', '.join(GUARDED)}")
    d = defaults()
    parser.add_argument("--bootstrap", type=int, default=d["n_boot"],
                        help=f"bootstrap resamples ({d['n_boot']}, as analysis.bootstrap)")
    parser.add_argument("--ci", type=float, default=d["ci"],
                        help=f"interval level ({d['ci']}, as analysis.ci)")
    parser.add_argument("--seed", type=int, default=d["seed"],
                        help=f"the bootstrap's seed ({d['seed']}, as the config's seed)")
    args = parser.parse_args(argv)
    try:
        sides = (load_side(args.a), load_side(args.b))
    except (ArchiveError, FileNotFoundError, ValueError) as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 1
    result = compare(*sides, n_boot=args.bootstrap, ci=args.ci, seed=args.seed,
                     declared=tuple(args.declare))
    if not result["targets"]:  # compare pairs targets by name: nothing to write
        names = [", ".join(sorted(set(s.ratios["target"].astype(str)))) or "none" for s in sides]
        print(f"compare: {args.a} and {args.b} have no target in common ({args.a}: {names[0]}; "
              f"{args.b}: {names[1]}); compare two results of one target, e.g. two runs of "
              "slotbench run --url on the same URL", file=sys.stderr)
        return 1
    written = write(result, sides, args.out)
    for target, rec in result["targets"].items():
        counts = Counter(r["verdict"] or "refused" for r in rec["rows"]).most_common()
        print(f"{target}: " + ", ".join(f"{n} {v}" for v, n in counts)
              + (f" ({rec['refusal']})" if rec["refusal"] else ""))
    print("wrote " + ", ".join(map(str, written)))
    return 0
