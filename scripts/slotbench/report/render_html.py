"""The HTML rendering: one self-contained page (figures embedded as data URIs), with every
Sources list collapsible and every provenance id an anchor that links work.

The markup is in Jinja2 templates in the checkout's report/html/: one per block kind (TEMPLATES
names it) and the page. Autoescaping escapes every text a block carries.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import jinja2

from slotbench.core.code import REPO
from slotbench.core.fmt import DASH, code_text, count
from slotbench.provenance import ids as prov
from slotbench.report import blocks as kinds

# The checkout's report/html/, beside the package (installed editable, it reads its checkout).
TEMPLATE_DIR = REPO / "report" / "html"
TEMPLATES = {
    kinds.Heading: "heading.html",
    kinds.Paragraph: "paragraph.html",
    kinds.Bullets: "bullets.html",
    kinds.Table: "table.html",
    kinds.Figure: "figure.html",
    kinds.Sources: "sources.html",
    kinds.Code: "code.html",
    kinds.ProvenanceIndex: "provenance_index.html",
}
PAGE = "page.html"


def roles_text(counts: dict[str, int]) -> str:
    """How many cells a provenance entry has, and in which roles when more than one."""
    n = sum(counts.values())
    if len(counts) <= 1:
        return count(n, "cell")
    order = sorted(
        counts, key=lambda r: prov.ROLES.index(r) if r in prov.ROLES else len(prov.ROLES)
    )
    detail = ", ".join(f"{counts[role]} {role}" for role in order)
    return f"{count(n, 'cell')} ({detail})"


def versions_text(entry: dict) -> str:
    """The code versions and server builds behind a provenance entry."""
    code = ", ".join(code_text(c.get("commit"), c.get("dirty")) for c in entry["code"])
    builds = ", ".join(entry["server_builds"])
    return f"{code or 'code version not recorded'}; server build {builds or 'not recorded'}"


def data_uri(path: str | None) -> str | None:
    """A PNG file as a data URI, or None when there is no file."""
    if path is None or not os.path.exists(path):
        return None
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"data:image/png;base64,{data}"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(count=count, DASH=DASH, LIST_LIMIT=prov.LIST_LIMIT)
    env.filters.update(roles_text=roles_text, versions_text=versions_text, data_uri=data_uri)
    return env


ENV = environment()


def respell(page: str) -> str:
    """MarkupSafe writes ' and " as &#39; and &#34;; the page has always had &#x27; and &quot;
    (html.escape's spelling). A browser reads both alike; the old spelling keeps the page byte
    for byte what it was. Only escaping writes these two: a text's own & is escaped (&amp;#39;)
    and no template holds them."""
    return page.replace("&#39;", "&#x27;").replace("&#34;", "&quot;")


def render_block(block) -> str:
    """One block as HTML, by its kind's template ("" for a provenance index with no entries)."""
    name = TEMPLATES.get(type(block))
    if name is None:
        raise TypeError(f"no HTML template for a {type(block).__name__} block")
    return respell(ENV.get_template(name).render(b=block))


def render_html(blocks: list, title: str = "slotbench report") -> str:
    # one block a line; a block that shows nothing (an empty provenance index) takes none
    parts = [part for part in map(render_block, blocks) if part]
    return respell(ENV.get_template(PAGE).render(title=title, parts=parts))
