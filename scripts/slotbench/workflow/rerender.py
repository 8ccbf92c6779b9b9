"""The tables of a re-rendered archive against the archived ones: which come out the same.

A table is identical when it comes out byte for byte, or when a newer slotbench only adds to
it (columns of a CSV table, rows of a report table for a check the older one had not) and every
archived column or row is unchanged and in order. Used by ``archive-render``
(slotbench.workflow.archive).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path, PurePosixPath

from slotbench.core.experiments import prefix_in

# Tables a re-render must reproduce byte for byte (in the experiment's folder).
TABLE_GLOBS = ["analysis/summary.csv", "checks/*.csv"]
REPORT_MD = "report.md"


def markdown_tables(text: str) -> list[str]:
    """The markdown tables of a report, each as one block of its '|' lines."""
    tables, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            tables.append("\n".join(block))
            block = []
    return tables


def _first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    return next((f"line {i}: archived {x!r}, re-rendered {y!r}" for i, (x, y) in enumerate(
        zip(la, lb), 1) if x != y), f"archived {len(la)} lines, re-rendered {len(lb)} lines")


def added_columns(archived: str, new: str) -> str | None:
    """The columns a newer slotbench adds to a CSV table, when the archived ones are unchanged."""
    old_rows, new_rows = (list(csv.reader(io.StringIO(t))) for t in (archived, new))
    if not old_rows or len(old_rows) != len(new_rows) or len(set(old_rows[0])) != len(
            old_rows[0]) or not set(old_rows[0]) < set(new_rows[0]):
        return None
    keep = [new_rows[0].index(c) for c in old_rows[0]]
    if keep != sorted(keep) or any([r[i] for i in keep] != o for r, o in zip(new_rows, old_rows)):
        return None
    return ", ".join(c for c in new_rows[0] if c not in old_rows[0])


def added_rows(archived: str, new: str) -> str | None:
    """The rows a newer slotbench adds to a report's markdown table (a check that did not exist
    then), when every archived line is still there, unchanged and in order."""
    old_lines, new_lines = archived.splitlines(), new.splitlines()
    if len(new_lines) <= len(old_lines) or old_lines[:2] != new_lines[:2]:
        return None
    rest = iter(new_lines)
    if not all(any(line == n for n in rest) for line in old_lines):  # a subsequence, in order
        return None
    added = [line for line in new_lines if line not in old_lines]
    return "; ".join(line.strip("|").split("|")[0].strip() for line in added)


def compare_tables(archived: dict[str, bytes], dest: Path) -> list[tuple[str, bool, str]]:
    """(what, identical, detail) for every table the archive holds and the re-render rewrote."""
    rows = []
    prefix = prefix_in(archived)  # the experiment's folder, results/<experiment>/ (or results/)
    tables = sorted(rel for rel in archived if rel.startswith(prefix) and any(
        PurePosixPath(rel[len(prefix):]).match(g) for g in TABLE_GLOBS))
    for rel in tables:
        path = dest / rel
        new = path.read_bytes() if path.is_file() else None
        if new is None:
            rows.append((rel, False, "not re-rendered"))
        elif new == archived[rel]:
            rows.append((rel, True, f"{len(new)} bytes"))
        elif (added := added_columns(archived[rel].decode(), new.decode())) is not None:
            rows.append((rel, True, f"every archived column; this version adds {added}"))
        else:
            rows.append((rel, False, _first_difference(archived[rel].decode(), new.decode())))
    report_md = prefix + REPORT_MD
    if report_md in archived:
        old = markdown_tables(archived[report_md].decode())
        path = dest / report_md
        new = markdown_tables(path.read_text(encoding="utf-8")) if path.is_file() else []
        for i in range(max(len(old), len(new))):
            what = f"{report_md} table {i + 1}"
            if i >= len(old) or i >= len(new):
                where = "re-render" if i >= len(old) else "archive"
                rows.append((what, False, f"only in the {where}"))
            elif old[i] == new[i]:
                rows.append((what, True, f"{old[i].count(chr(10)) + 1} lines"))
            elif (added := added_rows(old[i], new[i])) is not None:
                rows.append((what, True, f"every archived row; this version adds {added}"))
            else:
                rows.append((what, False, _first_difference(old[i], new[i])))
    return rows
