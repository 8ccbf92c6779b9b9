"""Details of the Ollama check: server facts per run and every ollama ps snapshot."""

from __future__ import annotations

from slotbench.core.fmt import fmt_bytes, fmt_pct, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Heading, Paragraph, Table

TRAP = "ollama"
PS_COLUMNS = ["when", "model", "size", "in VRAM", "on CPU", "context length", "expires at"]


def _first(*candidates):
    return next((c for c in candidates if not missing(c) and c != ""), None)


def ollama_facts(fp: dict) -> list[list[str]]:
    """The facts table of one run, from its fingerprint."""
    server, model = fp.get("server") or {}, fp.get("model") or {}
    tag = server.get("model_tag") or {}
    details = (server.get("show") or {}).get("details") or {}
    target_conf = (fp.get("config") or {}).get("target") or {}
    size = _first(model.get("size_bytes"), tag.get("size"))
    rows = [
        ["version", _first(server.get("version"))],
        ["model", _first(model.get("name"), target_conf.get("model"), tag.get("name"))],
        ["digest", _first(model.get("digest"), tag.get("digest"))],
        ["size", None if size is None else f"{fmt_bytes(size)} ({int(size)} bytes)"],
        ["quantization_level",
         _first(details.get("quantization_level"), model.get("quantisation"))],
        ["parameter_size", _first(details.get("parameter_size"), model.get("parameter_size"))],
        ["family", _first(details.get("family"), model.get("family"))],
        ["requested num_ctx", _first(server.get("requested_num_ctx"), target_conf.get("num_ctx"))],
    ]
    env = server.get("ollama_env")
    if isinstance(env, dict) and env:
        rows += [[f"stated {k}", v] for k, v in sorted(env.items())]
    else:
        rows.append(["stated OLLAMA_* settings", "none stated (they are not visible over HTTP)"])
    if server.get("server_config_line"):
        rows.append(["server config line (managed server's log)", server["server_config_line"]])
    return [[k, "n/a" if v is None else str(v)] for k, v in rows]


def _ps_row(r: dict) -> list[str]:
    if "size" not in r:
        return [r["when"], r["model"], *["n/a"] * 5]
    return [
        r["when"],
        r["model"],
        fmt_bytes(r["size"]),
        fmt_bytes(r["vram"]),
        "n/a" if r["cpu_share"] is None else fmt_pct(r["cpu_share"]),
        "n/a" if r["ctx"] is None else str(r["ctx"]),
        str(r.get("expires_at") or "n/a"),
    ]


def _snapshot_cells(ctx, r: dict) -> list[str]:
    cells = ctx.index.labels(ctx.target, run=r["run"])
    if r.get("rep") is None:
        return cells
    return [c for c in cells if c.startswith(f"{ctx.target}/{r['run']}/rep{r['rep']}/")]


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    blocks: list = [Heading(4, "Ollama server")]
    blocks += [Paragraph(n["text"], n["kind"]) for n in ev["notes"]]
    for fp in ctx.fingerprints:
        run = str(fp.get("run", "?"))
        title, fid = f"Ollama facts of {ctx.target}/{run}", prov.ollama_id(ctx.target, run)
        blocks.append(Table(title, ["fact", "value"], ollama_facts(fp), kind="kv", anchor=fid))
        cells = ctx.index.labels(ctx.target, run=run)
        ref = prov.Ref(fid, "table", title, prov.with_roles((cells, "source")), fid)
        blocks.append(ctx.sources(cells, fid, (ref,)))
    snapshots = ev["snapshots"]
    labels = sorted({c for r in snapshots for c in _snapshot_cells(ctx, r)})
    title = "Loaded models (ollama ps) before each run and after each rep"
    ps_id = prov.ollama_id(ctx.target, "ps")
    blocks.append(Table(title, PS_COLUMNS, [_ps_row(r) for r in snapshots],
                        note="size, size_vram and context_length as /api/ps reports them; on "
                        "CPU = 1 − size_vram / size.", anchor=ps_id))
    ref = prov.Ref(
        ps_id, "table", f"{title} ({ctx.target})", prov.with_roles((labels, "source")), ps_id
    )
    blocks.append(ctx.sources(labels, ps_id, (ref,)))
    return blocks
