"""The HTML page from its templates (report/html/, one per block kind and the page): each block
kind's exact markup, every text a block carries escaped by autoescaping, the page around them.

The expected markup is what the page has always been, byte for byte (html.escape's spelling of
quotes, &#x27; and &quot;, included), so a change to a template shows here first.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest

from slotbench.provenance import ids as prov
from slotbench.report import blocks as kinds
from slotbench.report.blocks import (
    Bullets, Code, Figure, Heading, Paragraph, ProvenanceIndex, Sources, Table,
)
from slotbench.report.render_html import TEMPLATE_DIR, TEMPLATES, render_block, render_html
from slotbench.report.render_md import render_markdown

REPO = Path(__file__).resolve().parents[1]
HOSTILE = "<script>alert('x')</script> & \"y\""
ESCAPED = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;y&quot;"

LISTED = {
    "id": "t-tbl", "kind": "table", "title": "Per arm", "roles": {"serial-baseline": 1, "arm": 1},
    "cells": [{"cell": "t/run1/rep1/arm2", "role": "arm"},
              {"cell": "t/run1/rep1/arm1", "role": "serial-baseline"}],
    "raw_files": [{"path": "results/raw/t/run1/rep1.json", "sha256": "ab12"}], "n_raw_files": 1,
    "code": [{"commit": "abc1234", "dirty": False}], "server_builds": ["b7000"], "sets": None,
    "anchor": "t-tbl", "parent": "t-all", "children": ["t-r1", "t-r2"],
    "metric": {"text": "1.39×"}, "config_sha256": "cd34",
}
BY_SET = LISTED | {
    "id": "t-big", "cells": None, "raw_files": None, "n_raw_files": 40, "roles": {"arm": 200},
    "sets": [("arm", "all 200 cells (s1)"), ("source", "s2")], "anchor": "", "parent": "",
    "children": [], "metric": None, "code": [], "server_builds": [], "config_sha256": None,
}


def test_every_block_kind_has_its_template_and_every_template_is_used():
    kinds_ = {obj for obj in vars(kinds).values()
              if isinstance(obj, type) and dataclasses.is_dataclass(obj)}
    assert set(TEMPLATES) == kinds_
    assert TEMPLATE_DIR == REPO / "report" / "html"  # the checkout's, beside the captions
    on_disk = {p.name for p in TEMPLATE_DIR.glob("*.html")}
    assert on_disk == {*TEMPLATES.values(), "page.html", "macros.html"}


@pytest.mark.parametrize("block, html", [
    (Heading(2, "a & b"), "<h2>a &amp; b</h2>"),
    (Paragraph("x"), "<p>x</p>"),
    (Paragraph("x", kind="refusal", anchor="t-p"), '<p class="refusal" id="t-p">x</p>'),
    (Bullets(["a", "b"]), "<ul><li>a</li><li>b</li></ul>"),
    (Bullets([]), "<ul></ul>"),
    (Table("T", ["arm", "id"], [["1", "t-x"], ["2", "—"]], note="n", kind="kv", anchor="t-tbl",
           row_ids=["t-r1", "t-r2"], link_column=1),
     '<div class="wrap"><table class="kv" id="t-tbl"><caption>T</caption><thead><tr><th>arm</th>'
     '<th>id</th><th>provenance</th></tr></thead><tbody><tr id="t-r1"><td>1</td><td><a '
     'href="#prov-t-x">t-x</a></td><td class="provenance"><a href="#prov-t-r1">t-r1</a></td></tr>'
     '<tr id="t-r2"><td>2</td><td>—</td><td class="provenance"><a href="#prov-t-r2">t-r2</a></td>'
     '</tr></tbody></table></div><p class="note">n</p>'),
    # an id for some rows only: no provenance column, no row anchors
    (Table("T", ["a"], [["1"], ["2"]], row_ids=["t-r1"]),
     '<div class="wrap"><table><caption>T</caption><thead><tr><th>a</th></tr></thead><tbody>'
     "<tr><td>1</td></tr><tr><td>2</td></tr></tbody></table></div>"),
    (Figure("f", "F", "C", "f.png", None),
     '<figure id="fig-f"><h3>F</h3><p class="note">(figure file missing)</p>'
     "<figcaption>C</figcaption></figure>"),
    (Sources(["c1", "c2"], ["h1"], prov="t-tbl"),
     '<p class="provenance"><a href="#prov-t-tbl">provenance: t-tbl</a></p>\n'
     '<details class="sources"><summary>Sources: 2 cells, 1 raw file</summary><p>Cells: '
     "<code>c1</code>, <code>c2</code></p><p>Raw-file SHA-256:</p><ul><li><code>h1</code></li>"
     "</ul></details>"),
    (Sources(),
     '<details class="sources"><summary>Sources: 0 cells, 0 raw files</summary><p>Cells: none'
     "</p><p>Raw-file SHA-256:</p><ul></ul></details>"),
    # past LIST_LIMIT cells the page names them and says where they are listed
    (Sources(["c"] * (prov.LIST_LIMIT + 1), ["h"] * 2, scope="all of t"),
     f'<details class="sources"><summary>Sources: {prov.LIST_LIMIT + 1} cells, 2 raw files'
     "</summary><p>Cells: all of t; provenance.json lists them</p><p>Raw-file SHA-256:</p><ul>"
     "<li>2 raw files, one per rep; provenance.json lists them with their SHA-256s</li></ul>"
     "</details>"),
    (Sources(["c"] * (prov.LIST_LIMIT + 1), ["h"], prov="t-x"),
     '<p class="provenance"><a href="#prov-t-x">provenance: t-x</a></p>\n<details class="sources">'
     f"<summary>Sources: {prov.LIST_LIMIT + 1} cells, 1 raw file</summary><p>Cells: "
     f"{prov.LIST_LIMIT + 1} cells; <code>python -m slotbench explain t-x</code> lists them</p>"
     "<p>Raw-file SHA-256:</p><ul><li>1 raw file, one per rep; <code>python -m slotbench explain "
     "t-x</code> lists them with their SHA-256s</li></ul></details>"),
    (Code("x = 1\n\n", lang="python"), '<pre><code class="language-python">x = 1</code></pre>'),
    (Code("a < b"), "<pre><code>a &lt; b</code></pre>"),
    (ProvenanceIndex((LISTED, BY_SET)),
     '<div class="prov-entry" id="prov-t-tbl"><p><code>t-tbl</code> <span class="kind">(table)'
     '</span> Per arm = 1.39× · <a href="#t-tbl">shown in the report</a> · part of <a href='
     '"#prov-t-all">t-all</a></p><p>Parts: <a href="#prov-t-r1"><code>t-r1</code></a>, <a href='
     '"#prov-t-r2"><code>t-r2</code></a></p><details><summary>2 cells (1 arm, 1 serial-baseline)'
     ", 1 raw file</summary><p>Cells: <code>t/run1/rep1/arm2</code> (arm), <code>t/run1/rep1/"
     "arm1</code> (serial-baseline)</p><p>Raw-file SHA-256:</p><ul><li><code>ab12</code> "
     "results/raw/t/run1/rep1.json</li></ul></details><p>commit abc1234 (clean); server build "
     "b7000; config SHA-256 <code>cd34</code></p></div>\n"
     '<div class="prov-entry" id="prov-t-big"><p><code>t-big</code> <span class="kind">(table)'
     "</span> Per arm</p><details><summary>200 cells, 40 raw files</summary><p>Cells: all 200 "
     "cells (s1) (arm); s2</p><p>Raw-file SHA-256:</p><ul><li>one per rep of these cells, 40 raw "
     "files: <code>python -m slotbench explain t-big</code> lists and checks them</li></ul>"
     "</details><p>code version not recorded; server build not recorded; config SHA-256 <code>"
     "not recorded</code></p></div>"),
    (ProvenanceIndex(()), ""),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_each_block_kind_renders_its_markup(block, html):
    assert render_block(block) == html


def test_a_figure_is_embedded_as_a_data_uri(tmp_path):
    png = tmp_path / "f.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nbytes")
    uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    assert render_block(Figure("f", "F & G", "C", "f.png", str(png))) == (
        f'<figure id="fig-f"><h3>F &amp; G</h3><img src="{uri}" alt="F &amp; G">'
        "<figcaption>C</figcaption></figure>"
    )


def hostile_blocks() -> list:
    """One block of each kind with the hostile text in every text it carries."""
    h = HOSTILE
    entry = {**LISTED, "id": h, "kind": h, "title": h, "anchor": h, "parent": h, "children": [h],
             "metric": {"text": h}, "cells": [{"cell": h, "role": h}], "roles": {h: 1, "arm": 2},
             "raw_files": [{"path": h, "sha256": h}], "code": [{"commit": h}],
             "server_builds": [h], "config_sha256": h}
    return [
        Heading(2, h), Paragraph(h, kind=h, anchor=h), Bullets([h]),
        Table(h, [h], [[h], [h]], note=h, kind=h, anchor=h, row_ids=[h, h], link_column=0),
        Figure(h, h, h, "f.png", None), Sources([h], [h], prov=h),
        Sources([h] * (prov.LIST_LIMIT + 1), [h], prov=h, scope=h), Code(h, lang=h),
        ProvenanceIndex((entry, {**entry, "cells": None, "raw_files": None, "sets": [(h, h)]})),
    ]


@pytest.mark.parametrize("block", hostile_blocks(), ids=lambda b: type(b).__name__)
def test_every_text_a_block_carries_is_escaped(block):
    html = render_block(block)
    assert "<script>" not in html and "& " not in html and "'x'" not in html
    assert ESCAPED in html


def test_the_page_holds_the_blocks_one_a_line_and_escapes_its_title():
    page = render_html([Heading(1, "R"), ProvenanceIndex(()), Paragraph("p")], title=HOSTILE)
    assert page.startswith('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n')
    assert f"<title>{ESCAPED}</title>" in page
    # the style is the page's own, never escaped: its quotes stay quotes
    assert '<style>\nbody{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;' in page
    assert "}\n</style>\n</head>\n<body>\n<h1>R</h1>\n<p>p</p>\n</body>\n</html>\n" in page
    assert page.endswith("</html>\n") and not page.endswith("\n\n")
    assert render_html([]).endswith("<body>\n\n</body>\n</html>\n")
    assert "<title>slotbench report</title>" in render_html([])


def test_quotes_keep_their_spelling_and_no_template_writes_the_other():
    assert render_block(Paragraph("it's \"x\"")) == "<p>it&#x27;s &quot;x&quot;</p>"
    assert render_block(Paragraph("&#39; &#34;")) == "<p>&amp;#39; &amp;#34;</p>"
    for path in TEMPLATE_DIR.glob("*.html"):
        assert "&#39;" not in path.read_text() and "&#34;" not in path.read_text(), path


def test_a_block_of_no_known_kind_is_refused():
    with pytest.raises(TypeError, match="no HTML template for a str block"):
        render_html(["just text"])


def test_both_renderings_say_the_same_scope_and_provenance_column():
    many = Sources(["c"] * (prov.LIST_LIMIT + 1), ["h"], prov="t-x", scope="all of t")
    table = Table("T", ["a"], [["1"]], row_ids=["t-r1"])
    md, page = render_markdown([many, table]), render_html([many, table])
    assert "Sources: all of t, 1 raw file" in md and "Cells: all of t; " in page
    assert "| a | provenance |" in md and "<th>a</th><th>provenance</th>" in page
