"""The README's example output: the first target's headline, as a finished run's report.md
gives it, with the run's config, machine and date.

``record(results)`` reads what the headline's words are made from (the target's rows of
analysis/summary.csv, its headline decision, the arms served one at a time, the model warnings
of its fingerprints) and checks that report.md says exactly that; ``markdown(record)`` makes the
README's lines from the record with the code as it is now. The record is kept in the repository
(docs/readme-example.json), so ``python -m slotbench docs --check`` fails when the code's
wording moves away from the README's.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pandas as pd

from slotbench.core.cells import arm_order
from slotbench.report import results_dir as rd
from slotbench.report.blocks import Bullets, Paragraph
from slotbench.report.document import read_first
from slotbench.report.headline import ci_label, headline_text
from slotbench.report.render_md import render_markdown

RECORD = "docs/readme-example.json"
COMMAND = "python -m slotbench docs --readme-example RESULTS_DIR"
KINDS = ("warning", "refusal", "headline", "note")  # the paragraphs the excerpt shows
DROPPED = ("cells", "raw_sha256")  # summary columns no sentence reads (long lists)
WIDTH = 96
# a wrapped line must not start like a list item, a heading, a quote or a table row
STARTS_BLOCK = re.compile(r"^(?:[-+*|]|>+|#{1,6}|=+|-{2,}|\d{1,9}[.)])$")


def _summary_csv(results: Path, target: str) -> str:
    path = rd.need(results, "analysis/summary.csv")
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    mine = [r for r in rows if r.get("target") == target]
    if not mine:
        raise rd.ResultsDirError(f"{path} has no row of target {target}")
    columns = [c for c in rows[0] if c not in DROPPED]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(mine)
    return out.getvalue()


def _serialised(results: Path, target: str) -> list[int]:
    """The arms the serialisation check found served one request at a time."""
    path = Path(results) / "checks/serialisation.json"
    verdicts = rd.read_json(results, "checks/serialisation.json") if path.is_file() else []
    return sorted({int(a) for v in verdicts if v["target"] == target and v["fired"]
                   for a in v["arms"]})


def _shared(results: Path, target: str) -> bool | None:
    """Whether the host check found other processes sharing the machine (None: no check)."""
    path = Path(results) / "checks/host.json"
    if not path.is_file():
        return None
    fired = [v["fired"] for v in rd.read_json(results, "checks/host.json")
             if v["target"] == target]
    return any(fired) if fired else None


def record(results: Path, repo: Path = rd.REPO) -> dict:
    """What the README's example is made from, read from a finished run's results directory."""
    results = Path(results)
    decisions = rd.read_json(results, "checks/headline.json")
    if not decisions:
        raise rd.ResultsDirError(f"{results}/checks/headline.json names no target")
    target = sorted(decisions)[0]
    fps = [fp for fp in rd.fingerprints(results) if str(fp.get("target")) == target]
    cfg = rd.resolved_config(results)
    files = rd.shipped_config(cfg, repo)
    rec = {
        "target": target,
        "config": None if files is None else list(files),
        "measured_utc": rd.measured_utc(fps),
        "machine": rd.machine(fps),
        "commit": rd.commit(fps),
        "shared": _shared(results, target),
        "ci": float(cfg["analysis"]["ci"]),
        "summary_csv": _summary_csv(results, target),
        "decision": decisions[target],
        "serialised": _serialised(results, target),
        "model": [{"run": fp.get("run"), "model": {"mismatch": fp["model"]["mismatch"]}}
                  for fp in fps if (fp.get("model") or {}).get("mismatch")],
    }
    report = rd.need(results, "report.md").read_text(encoding="utf-8")
    for chunk in chunks(rec):
        if chunk not in report:
            raise rd.ResultsDirError(
                f"{results}/report.md does not say what the code says of this run (it lacks "
                f"\"{chunk[:60]}…\"): render it again with snakemake --cores 1, then retry")
    return rec


def blocks(rec: dict) -> list:
    """The excerpt's blocks: what the report shows of the target before its per-arm table,
    without its headings and plain paragraphs."""
    rows = pd.read_csv(io.StringIO(rec["summary_csv"]))
    records = sorted((r for _, r in rows.iterrows()), key=lambda r: arm_order(r["arm"]))
    shown = read_first(rec["decision"], rec["model"]) + headline_text(
        rec["target"], records, rec["decision"], frozenset(rec["serialised"]),
        ci_label(rec["ci"]))
    return [b for b in shown if isinstance(b, Bullets)
            or (isinstance(b, Paragraph) and b.kind in KINDS)]


def chunks(rec: dict) -> list[str]:
    """The excerpt's blocks as report.md renders them, one string each."""
    return [render_markdown([b]).rstrip("\n") for b in blocks(rec)]


def wrap(text: str, first: str, rest: str, width: int = WIDTH) -> list[str]:
    """``text`` in lines of at most ``width`` (a word longer stays whole), the first line
    starting with ``first`` and the others with ``rest``; no line starts like a new block."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        prefix = rest if lines else first
        if line and len(prefix) + len(line) + 1 + len(word) > width \
                and not STARTS_BLOCK.match(word):
            lines.append(prefix + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append((rest if lines else first) + line)
    return lines


def quoted(chunk: str) -> list[str]:
    """A report.md block as lines of the README's quote."""
    if chunk.startswith("> "):  # already a quote (a warning, a refusal)
        return wrap(chunk[2:], "> ", "> ")
    if chunk.startswith("- "):  # bullets, one item a line
        return [line for item in chunk.split("\n")
                for line in wrap(item[2:], "> - ", ">   ")]
    return wrap(chunk, "> ", "> ")


def source_line(rec: dict) -> str:
    files = rec["config"]
    if files is None:
        config = "a config of its own (none of the shipped ones)"
    elif not files:
        config = f"the default config (`{rd.command(())}`)"
    else:
        config = f"`{rd.command(tuple(files))}`"
    shared = {True: ", with other processes sharing its CPUs (the host check)",
              False: "", None: ""}[rec.get("shared")]
    return (f"From a run of {config}, measured {rec['measured_utc']} on "
            f"{rd.machine_text(rec['machine'])}{shared}, pipeline {rec['commit']}; target "
            f"`{rec['target']}` (`{COMMAND}` writes this):")


def markdown(rec: dict) -> str:
    """The README's example: the source line, then the excerpt as a quote."""
    lines = [*wrap(source_line(rec), "", ""), ""]
    for i, chunk in enumerate(chunks(rec)):
        lines += ([">"] if i else []) + quoted(chunk)
    return "\n".join(lines) + "\n"
