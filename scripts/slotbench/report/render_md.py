"""The Markdown rendering: compact, for reading. Each Sources block is one line (which cells,
how many raw files, the provenance id); the full lists are in the "Cells and raw files" appendix,
in report.html and in provenance.json."""

from __future__ import annotations

from slotbench.core.fmt import count
from slotbench.report import blocks as kinds

PARAGRAPH_STYLES = {"refusal": "> **{}**", "warning": "> ⚠ **{}**", "headline": "**{}**",
                    "note": "_{}_"}


def escape(text: str) -> str:
    """Text safe for Markdown: raw HTML in data (e.g. server props) must not become markup."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cell(text: str) -> str:
    return escape(text).replace("|", "\\|").replace("\n", " ")


def with_row_ids(table: kinds.Table) -> tuple[list[str], list[list[str]]]:
    """Columns and rows, with a provenance column when every row has an id."""
    if not table.ids_shown:
        return list(table.columns), [list(r) for r in table.rows]
    rows = [[*r, rid] for r, rid in zip(table.rows, table.row_ids)]
    return [*table.columns, "provenance"], rows


def _short_hash(text: str) -> str:
    return f"{text[:16]}…" if len(text) == 64 else text


def first_sentence(text: str) -> str:
    """A figure caption's first sentence: the Markdown stays compact, the HTML page and
    report/<figure>.rst carry the whole caption."""
    head, dot, rest = str(text).partition(". ")
    return f"{head}." if dot and rest else str(text)


def _longest_backtick_run(text: str) -> int:
    """So a fenced code block can use a longer fence than any backtick run it contains."""
    longest = current = 0
    for ch in text:
        current = current + 1 if ch == "`" else 0
        longest = max(longest, current)
    return longest


def _table(b: kinds.Table) -> str:
    title = f"**{escape(b.title.upper() if b.kind == 'not-headline' else b.title)}**"
    columns, rows = with_row_ids(b)
    if b.kind == "hashes":  # a table of raw files: a SHA-256's first 16 digits name it,
        at = columns.index("SHA-256")  # unless two of them share those digits
        short = [_short_hash(r[at]) for r in rows]
        if len(set(short)) == len(short):
            rows = [[*r[:at], cut, *r[at + 1 :]] for r, cut in zip(rows, short)]
    lines = [title, "", "| " + " | ".join(map(_cell, columns)) + " |",
             "|" + "|".join(" --- " for _ in columns) + "|"]
    lines += ["| " + " | ".join(map(_cell, r)) + " |" for r in rows]
    if b.note:
        lines += ["", f"_{escape(b.note)}_"]
    return "\n".join(lines)


def _sources(b: kinds.Sources) -> str:
    prov = f" — provenance id `{escape(b.prov)}`" if b.prov else ""
    return f"<sub>Sources: {escape(b.scope_text)}, {count(len(b.hashes), 'raw file')}{prov}</sub>"


def render_markdown(blocks: list, image_dir: str = "figures") -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, kinds.Heading):
            out.append(f"{'#' * b.level} {escape(b.text)}")
        elif isinstance(b, kinds.Paragraph):
            out.append(PARAGRAPH_STYLES.get(b.kind, "{}").format(escape(b.text)))
        elif isinstance(b, kinds.Bullets):
            out.append("\n".join(f"- {escape(item)}" for item in b.items))
        elif isinstance(b, kinds.Table):
            out.append(_table(b))
        elif isinstance(b, kinds.Figure):
            link = f"{image_dir.rstrip('/')}/{b.file}" if image_dir else b.file
            img = (
                f"![{escape(b.fig_id)}]({link})" if b.path is not None
                else "_(figure file missing)_"
            )
            out.append(f"### {escape(b.title)}\n\n{img}\n\n_{escape(first_sentence(b.caption))}_")
        elif isinstance(b, kinds.Sources):
            out.append(_sources(b))
        elif isinstance(b, kinds.Code):
            fence = "`" * max(3, _longest_backtick_run(b.text) + 1)
            out.append(f"{fence}{b.lang}\n{b.text.rstrip()}\n{fence}")
        elif isinstance(b, kinds.ProvenanceIndex):
            out.append(
                f"_{count(len(b.entries), 'provenance id')}: each is listed with its cells and "
                "raw files in report.html and provenance.json._"
            )
    return "\n\n".join(out) + "\n"
