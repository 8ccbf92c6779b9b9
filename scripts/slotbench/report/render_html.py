"""The HTML rendering: one self-contained page (figures embedded as data URIs), with every
Sources list collapsible and every provenance id an anchor that links work."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from slotbench.core.fmt import DASH, code_text, count
from slotbench.provenance import ids as prov
from slotbench.report import blocks as kinds


def _roles_text(counts: dict[str, int]) -> str:
    n = sum(counts.values())
    if len(counts) <= 1:
        return count(n, "cell")
    order = sorted(
        counts, key=lambda r: prov.ROLES.index(r) if r in prov.ROLES else len(prov.ROLES)
    )
    detail = ", ".join(f"{counts[role]} {role}" for role in order)
    return f"{count(n, 'cell')} ({detail})"


def _versions_text(entry: dict) -> str:
    code = ", ".join(code_text(c.get("commit"), c.get("dirty")) for c in entry["code"])
    builds = ", ".join(entry["server_builds"])
    return f"{code or 'code version not recorded'}; server build {builds or 'not recorded'}"


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;line-height:1.5;color:#222;
max-width:70rem;margin:2rem auto;padding:0 1rem}
h1{font-size:1.6rem}h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.2rem}
table{border-collapse:collapse;font-size:.88rem;margin:.6rem 0}
caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right;vertical-align:top}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}
table.kv td{text-align:left;font-family:ui-monospace,monospace;font-size:.8rem}
.wrap{overflow-x:auto}
p.headline{font-size:1.1rem;font-weight:600}
p.refusal{background:#fdecea;border-left:4px solid #c62828;padding:.6rem .8rem;font-weight:600}
p.warning{background:#fff4e5;border-left:4px solid #ef6c00;padding:.6rem .8rem;font-weight:600}
table.not-headline{opacity:.8}table.not-headline caption{color:#c62828}
p.note{color:#555;font-size:.88rem;font-style:italic}
figure{margin:1rem 0}figure img{max-width:100%;height:auto}figcaption{font-size:.88rem;color:#444}
details.sources{font-size:.8rem;color:#555;margin:.3rem 0 1.2rem}
details.sources code{word-break:break-all}
p.provenance{font-size:.8rem;margin:.2rem 0 0}td.provenance{font-size:.75rem;text-align:left}
pre{background:#f6f6f6;padding:.6rem .8rem;overflow-x:auto;font-size:.8rem}
div.prov-entry{font-size:.82rem;border-top:1px solid #eee;padding:.3rem 0}
div.prov-entry p{margin:.15rem 0}div.prov-entry code{word-break:break-all}
div.prov-entry details{color:#555}span.kind{color:#777}
tr:target,div.prov-entry:target,table:target,figure:target{background:#fffbe6}
""".strip()


def _data_uri(path: str | None) -> str | None:
    if path is None or not os.path.exists(path):
        return None
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"data:image/png;base64,{data}"


def render_html(blocks: list, title: str = "slotbench report") -> str:
    e = html.escape
    out: list[str] = []
    for b in blocks:
        if isinstance(b, kinds.Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, kinds.Paragraph):
            cls = f' class="{b.kind}"' if b.kind else ""
            anchor = f' id="{e(b.anchor)}"' if b.anchor else ""
            out.append(f"<p{cls}{anchor}>{e(b.text)}</p>")
        elif isinstance(b, kinds.Bullets):
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, kinds.Table):
            cls = f' class="{b.kind}"' if b.kind else ""
            anchor = f' id="{e(b.anchor)}"' if b.anchor else ""
            with_ids = bool(b.row_ids) and len(b.row_ids) == len(b.rows)
            columns = [*b.columns, "provenance"] if with_ids else b.columns
            head = "".join(f"<th>{e(c)}</th>" for c in columns)
            body = ""
            for i, r in enumerate(b.rows):
                tds = "".join(
                    (
                        f'<td><a href="#prov-{e(v)}">{e(v)}</a></td>'
                        if j == b.link_column and v and v != DASH
                        else f"<td>{e(v)}</td>"
                    )
                    for j, v in enumerate(r)
                )
                if with_ids:
                    rid = b.row_ids[i]
                    tds += f'<td class="provenance"><a href="#prov-{e(rid)}">{e(rid)}</a></td>'
                    body += f'<tr id="{e(rid)}">{tds}</tr>'
                else:
                    body += f"<tr>{tds}</tr>"
            note = f'<p class="note">{e(b.note)}</p>' if b.note else ""
            out.append(
                f'<div class="wrap"><table{cls}{anchor}><caption>{e(b.title)}</caption>'
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{note}"
            )
        elif isinstance(b, kinds.Figure):
            uri = _data_uri(b.path)
            img = (
                f'<img src="{uri}" alt="{e(b.title)}">'
                if uri
                else '<p class="note">(figure file missing)</p>'
            )
            out.append(
                f'<figure id="fig-{e(b.fig_id)}"><h3>{e(b.title)}</h3>{img}'
                f"<figcaption>{e(b.caption)}</figcaption></figure>"
            )
        elif isinstance(b, kinds.Sources):
            cells = ", ".join(f"<code>{e(c)}</code>" for c in b.cells) or "none"
            hashes = "".join(f"<li><code>{e(h)}</code></li>" for h in b.hashes)
            if len(b.cells) > prov.LIST_LIMIT:  # named, not listed: the page stays small
                cells, hashes = _named_sources(b)
            if b.prov:
                out.append(
                    f'<p class="provenance"><a href="#prov-{e(b.prov)}">provenance: '
                    f"{e(b.prov)}</a></p>"
                )
            out.append(
                f'<details class="sources"><summary>Sources: {count(len(b.cells), "cell")}, '
                f'{count(len(b.hashes), "raw file")}</summary><p>Cells: {cells}</p>'
                f"<p>Raw-file SHA-256:</p><ul>{hashes}</ul></details>"
            )
        elif isinstance(b, kinds.Code):
            lang = f' class="language-{e(b.lang)}"' if b.lang else ""
            out.append(f"<pre><code{lang}>{e(b.text.rstrip())}</code></pre>")
        elif isinstance(b, kinds.ProvenanceIndex):
            out += [_html_provenance_entry(entry) for entry in b.entries]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{e(title)}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n"
        + "\n".join(out)
        + "\n</body>\n</html>\n"
    )


def _named_sources(b: kinds.Sources) -> tuple[str, str]:
    """(cells, raw files) of a Sources block too long to list: what they are, and where the
    full lists are."""
    e = html.escape
    where = (f"<code>python -m slotbench explain {e(b.prov)}</code> lists them" if b.prov
             else "provenance.json lists them")
    return (f"{e(b.scope or count(len(b.cells), 'cell'))}; {where}",
            f"<li>{count(len(b.hashes), 'raw file')}, one per rep; {where} with their "
            "SHA-256s</li>")


def _html_provenance_entry(entry: dict) -> str:
    e = html.escape
    eid = entry["id"]
    links = []
    if entry.get("anchor"):
        links.append(f'<a href="#{e(entry["anchor"])}">shown in the report</a>')
    if entry.get("parent"):
        links.append(f'part of <a href="#prov-{e(entry["parent"])}">{e(entry["parent"])}</a>')
    value = f" = {e(str(entry['metric'].get('text')))}" if entry.get("metric") else ""
    head = (
        f'<p><code>{e(eid)}</code> <span class="kind">({e(entry["kind"])})</span> '
        f"{e(entry['title'])}{value}" + (" · " + " · ".join(links) if links else "") + "</p>"
    )
    kids = entry.get("children") or []
    parts = (
        "<p>Parts: "
        + ", ".join(f'<a href="#prov-{e(k)}"><code>{e(k)}</code></a>' for k in kids)
        + "</p>"
        if kids
        else ""
    )
    if entry["cells"] is None:  # named by set: explain lists them
        cells = "; ".join(f"{e(title)}" + ("" if role == "source" else f" ({e(role)})")
                          for role, title in entry["sets"])
        raw = (f"<li>one per rep of these cells, {count(entry['n_raw_files'], 'raw file')}: "
               f"<code>python -m slotbench explain {e(eid)}</code> lists and checks them</li>")
    else:
        cells = ", ".join(
            f"<code>{e(c['cell'])}</code>" + ("" if c["role"] == "source" else f" ({e(c['role'])})")
            for c in entry["cells"]
        )
        raw = "".join(
            f"<li><code>{e(str(r['sha256']))}</code> {e(str(r['path']))}</li>"
            for r in entry["raw_files"]
        )
    details = (
        f"<details><summary>{e(_roles_text(entry['roles']))}, "
        f"{count(entry['n_raw_files'], 'raw file')}"
        f"</summary><p>Cells: {cells or 'none'}</p><p>Raw-file SHA-256:</p><ul>{raw}</ul>"
        "</details>"
    )
    digest = entry.get("config_sha256") or "not recorded"
    versions = f"<p>{e(_versions_text(entry))}; config SHA-256 <code>{e(str(digest))}</code></p>"
    return f'<div class="prov-entry" id="prov-{e(eid)}">{head}{parts}{details}{versions}</div>'
