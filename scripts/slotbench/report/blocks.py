"""The neutral document: headings, paragraphs, tables, figures, sources and code.

Every section builds a list of these, and render_md / render_html turn the same list into
Markdown and a self-contained HTML page, so the two renderings never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slotbench.core.fmt import count


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str
    kind: str = ""  # "", "headline", "refusal", "warning", "note"
    anchor: str = ""  # HTML id, for a provenance entry shown as text rather than a table


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    kind: str = ""  # "", "not-headline", "kv", "hashes" (Markdown shortens its SHA-256s)
    anchor: str = ""  # the table's provenance id (HTML id)
    row_ids: list[str] = field(default_factory=list)  # one provenance id per row, or none
    link_column: int | None = None  # a column whose cells are provenance ids (HTML: links)

    @property
    def ids_shown(self) -> bool:
        """Whether both renderings add a provenance column: only when every row has an id."""
        return bool(self.row_ids) and len(self.row_ids) == len(self.rows)


@dataclass(frozen=True)
class Figure:
    fig_id: str
    title: str
    caption: str
    file: str
    path: str | None


@dataclass(frozen=True)
class Sources:
    """The cells and raw files behind the table or figure above, and its provenance id.

    ``scope`` says in a few words which cells they are ("all 60 cells of embedded"); Markdown
    prints only that, the HTML page the full lists, collapsed.
    """

    cells: list[str] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    prov: str = ""  # provenance id of the table or figure above
    refs: tuple = ()  # the provenance.Ref entries it stands for (table, rows, numbers)
    scope: str = ""

    @property
    def scope_text(self) -> str:
        """Which cells, in a few words: ``scope``, or how many. Markdown always names them so;
        the HTML page when there are too many to list."""
        return self.scope or count(len(self.cells), "cell")


@dataclass(frozen=True)
class Code:
    text: str
    lang: str = ""


@dataclass(frozen=True)
class ProvenanceIndex:
    """Every provenance entry, in report order (listed in full in the HTML page only)."""

    entries: tuple = ()
