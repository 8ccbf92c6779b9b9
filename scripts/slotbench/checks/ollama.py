"""Trap: an Ollama model that ran split across GPU and CPU, or with another context than asked.

Ollama decides where a model's layers go and what context it loads; the pipeline records
/api/ps before each run (fingerprint) and after each rep (servers.json). A model partly in
system memory is paced by its CPU part; a loaded context other than the requested num_ctx means
the loaded model does not match the measured requests' load-time options (docs/method.md#warm-up).
Only Ollama targets get a verdict.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged, not_assessable
from slotbench.core.fmt import fmt_bytes, fmt_pct

TRAP = "ollama"
TITLE = "Model placement and context (Ollama)"
ORDER = 15
TABLES = ()


def _int_or_none(x):
    try:
        return None if x is None or pd.isna(x) else int(x)
    except (TypeError, ValueError):
        return None


def full_name(name) -> str:
    """``gemma3`` and ``gemma3:latest`` name the same model."""
    name = str(name or "")
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _target_conf(fp: dict) -> dict:
    return (fp.get("config") or {}).get("target") or {}


def snapshots(target: str, fps: list[dict], servers: list[dict]) -> list[dict]:
    """Every /api/ps seen: before each run (fingerprint), after each rep (servers.json)."""
    out = [{"when": f"before {fp.get('run', '?')}", "run": str(fp.get("run")), "rep": None,
            "server": fp.get("server") or {}} for fp in fps]
    states = sorted((s for s in servers if s.get("target") == target),
                    key=lambda s: (str(s.get("run")), int(s.get("rep", 0))))
    for state in states:
        server = state.get("server") or {}
        if server.get("backend", "ollama") != "ollama":
            continue
        run, rep = str(state.get("run")), int(state.get("rep", 0))
        out.append({"when": f"after {run}/rep{rep}", "run": run, "rep": rep, "server": server})
    return out


def ps_rows(snapshot: dict) -> list[dict]:
    """One row per model a snapshot lists (a placeholder row when it lists none)."""
    ps, when = snapshot["server"].get("ps"), snapshot["when"]
    if not isinstance(ps, list):
        why = ps.get("unavailable") if isinstance(ps, dict) else None
        return [{"when": when, "model": f"(unavailable: {why})" if why else "(ps not recorded)"}]
    if not ps:
        return [{"when": when, "model": "(no model loaded)"}]
    rows = []
    for m in (m for m in ps if isinstance(m, dict)):
        size, vram = _int_or_none(m.get("size")), _int_or_none(m.get("size_vram"))
        rows.append({
            "when": when, "model": str(m.get("name") or m.get("model") or "?"),
            "names": sorted({full_name(m.get("name")), full_name(m.get("model"))}),
            "size": size, "vram": vram, "ctx": _int_or_none(m.get("context_length")),
            "cpu_share": None if not size or vram is None else max(0.0, 1 - vram / size),
            "expires_at": m.get("expires_at"),
        })
    return rows


def _when_text(whens: list[str], total: int) -> str:
    if len(whens) <= 3:
        return ", ".join(whens)
    return f"{len(whens)} of {total} snapshots, {whens[0]} to {whens[-1]}"


def warnings(rows: list[dict], models: set, requested: set, total: int) -> list[dict]:
    """CPU share and context warnings for the target's own model, grouped over snapshots."""
    partial, on_cpu, ctx_diff = {}, {}, {}
    for e in (r for r in rows if "size" in r):
        if models and not set(e["names"]) & models:
            continue  # another client's model: shown in the table, not ours to warn about
        if e["size"] and e["vram"] == 0:
            on_cpu.setdefault((e["model"], e["size"]), []).append(e["when"])
        elif e["size"] and e["vram"] is not None and e["vram"] < e["size"]:
            key = (e["model"], round(e["cpu_share"], 3), e["size"])
            partial.setdefault(key, []).append(e["when"])
        for req in requested:
            if e["ctx"] is not None and e["ctx"] != req:
                ctx_diff.setdefault((e["model"], e["ctx"], req), []).append(e["when"])
    out = []
    for (name, share, size), whens in partial.items():
        out.append({"kind": "warning", "text": (
            f"Warning: {name} was partly on the CPU: {fmt_pct(share)} of its {fmt_bytes(size)} "
            f"was in system memory, not VRAM (ollama ps: {_when_text(whens, total)}). The CPU "
            "part sets the pace of every pass over the weights, so these numbers describe a "
            "split model, not this GPU; a smaller num_ctx, fewer parallel slots or a smaller "
            "model may fit it entirely.")})
    for (name, size), whens in on_cpu.items():
        out.append({"kind": "", "text": (
            f"{name} ran entirely on the CPU: ollama ps reports none of its {fmt_bytes(size)} in "
            f"VRAM ({_when_text(whens, total)}). These are CPU numbers.")})
    for (name, ctx, req), whens in ctx_diff.items():
        text = (
            f"Warning: ollama ps reports a context length of {ctx} for {name} "
            f"({_when_text(whens, total)}), but the pipeline requested num_ctx {req}. The loaded "
            "model does not match the measured requests' load-time options: another client may "
            "have loaded it, or Ollama chose another context, and a request may have paid a "
            "reload."
        )
        if req and ctx > req and ctx % req == 0:
            text += (f" {ctx} is {ctx // req}× {req}: some Ollama versions report the context "
                     "of all parallel slots together.")
        out.append({"kind": "warning", "text": text})
    return out


def applies(tables: Tables, target: str) -> bool:
    """Only an Ollama target gets a verdict."""
    return any((fp.get("server") or {}).get("backend") == "ollama"
               for fp in tables.fingerprints_of(target))


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    verdicts = []
    for target in tables.targets:
        fps = [fp for fp in tables.fingerprints_of(target)
               if (fp.get("server") or {}).get("backend") == "ollama"]
        if not fps:
            continue  # not an Ollama target: the trap does not apply
        models = {full_name(m) for fp in fps
                  for m in ((fp.get("model") or {}).get("name"), _target_conf(fp).get("model"))
                  if m}
        requested = {
            _int_or_none(
                (fp.get("server") or {}).get("requested_num_ctx") or _target_conf(fp).get("num_ctx")
            )
            for fp in fps
        } - {None}
        snaps = snapshots(target, fps, tables.servers)
        rows = [dict(r, run=s["run"], rep=s["rep"]) for s in snaps for r in ps_rows(s)]
        found = warnings(rows, models, requested, len(snaps))
        fired = any(w["kind"] == "warning" for w in found)
        if not any("size" in r for r in rows):
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no ollama ps snapshot lists a model",
                "Ollama: no /api/ps snapshot lists a loaded model, so where the model ran cannot "
                "be seen.", evidence={"snapshots": rows, "notes": found},
            ))
            continue
        summary = (
            f"{sum(w['kind'] == 'warning' for w in found)} placement or context " "warning(s)"
            if fired
            else f"the model ran as requested in {len(snaps)} ollama ps snapshots"
        )
        verdicts.append(judged(
            TRAP, TITLE, target, fired, summary,
            " ".join(w["text"] for w in found) or f"Ollama: {summary}.",
            evidence={"snapshots": rows, "notes": found,
                      "requested_num_ctx": sorted(requested)},
        ))
    return verdicts, {}
