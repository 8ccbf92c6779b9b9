"""Trap: an Ollama model that ran split across GPU and CPU, or with another context than asked.

Ollama decides where a model's layers go and what context it loads; the pipeline records
/api/ps before each run (fingerprint) and after each rep (servers.json). A model partly in
system memory is paced by its CPU part; a loaded context other than the requested num_ctx means
the loaded model does not match the measured requests' load-time options (docs/method.md#warm-up).
Only Ollama targets get a verdict.

Per cell, the placement recorded just before and just after it (the cells' ``placement``
column) names a model partly on the CPU (size_vram < size) at either edge, and a reload during
the cell: a measured request whose load_duration_ns exceeds RELOAD_NS, or the target's model
absent before and loaded after, or loaded after with another size, size_vram or context_length
than before (expires_at alone moves forward with every request, so it is no sign of a reload).
How many requests generated at once (the cells' gen_streams, time-averaged, and
gen_streams_max, from the requests' own durations) says what parallelism Ollama gave each arm;
OLLAMA_NUM_PARALLEL itself is not visible over HTTP.
"""

from __future__ import annotations

import json

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged, not_assessable
from slotbench.core.fmt import fmt_bytes, fmt_pct

TRAP = "ollama"
TITLE = "Model placement and context (Ollama)"
ORDER = 15
TABLES = ()
# a measured request whose load_duration_ns exceeds this paid a model (re)load, not a warm call
RELOAD_NS = 100_000_000
NOT_VISIBLE = ("OLLAMA_NUM_PARALLEL itself is not visible over HTTP; the parallelism is read "
               "from the requests' own durations")


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


def placement_of(value) -> dict | None:
    """A cell's placement ({"before": [...], "after": [...]}) from its JSON; None without one."""
    if value is None or (not isinstance(value, (str, dict))) or (
            isinstance(value, str) and not value.strip()):
        return None
    try:
        out = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def _models(ps) -> dict:
    """The models of one /api/ps list by their full name."""
    out = {}
    for m in ps if isinstance(ps, list) else []:
        if isinstance(m, dict):
            for name in {full_name(m.get("name")), full_name(m.get("model"))} - {":latest"}:
                out[name] = m
    return out


def _ours(found: dict, models: set) -> dict:
    return {k: v for k, v in found.items() if not models or k in models}


def cell_findings(cells: pd.DataFrame, requests: pd.DataFrame, models: set) -> list[dict]:
    """Per cell: the model partly on the CPU before or after it, and a reload during it (by a
    request's load_duration_ns over RELOAD_NS, or by the placement before against after)."""
    slow = {}
    if not requests.empty and "load_duration_ns" in requests:
        loads = requests[pd.to_numeric(requests["load_duration_ns"], errors="coerce") > RELOAD_NS]
        for key, grp in loads.groupby(["run", "rep", "arm"]):
            slow[(str(key[0]), int(key[1]), int(key[2]))] = (
                len(grp), int(grp["load_duration_ns"].max()))
    out = []
    for c in cells.sort_values(["run", "rep", "position"]).itertuples():
        label = f"{c.target}/{c.run}/rep{int(c.rep)}/arm{int(c.arm)}"
        found = {"cell": label, "split": [], "reload": []}
        placement = placement_of(getattr(c, "placement", None))
        edges = {} if placement is None else {
            edge: _ours(_models(placement.get(edge)), models) for edge in ("before", "after")}
        for edge, ms in edges.items():
            for name, m in ms.items():
                size, vram = _int_or_none(m.get("size")), _int_or_none(m.get("size_vram"))
                if size and vram is not None and vram < size:
                    found["split"].append(f"{name} {fmt_pct(1 - vram / size)} on the CPU {edge} "
                                          "the cell")
        if edges:
            for name, m in edges["after"].items():
                was = edges["before"].get(name)
                if was is None:
                    found["reload"].append(f"{name} not loaded before the cell, loaded after it")
                    continue
                changed = [k for k in ("size", "size_vram", "context_length")
                           if _int_or_none(was.get(k)) != _int_or_none(m.get(k))]
                if changed:
                    found["reload"].append(f"{name}'s {', '.join(changed)} changed during the "
                                           "cell")
        n, longest = slow.get((str(c.run), int(c.rep), int(c.arm)), (0, 0))
        if n:
            found["reload"].append(f"{n} request(s) with load_duration over "
                                   f"{RELOAD_NS / 1e6:g} ms (longest {longest / 1e6:.0f} ms)")
        if found["split"] or found["reload"]:
            out.append(found)
    return out


def parallelism(cells: pd.DataFrame) -> list[dict]:
    """Per arm: how many requests generated at once (median over its cells of gen_streams,
    time-averaged, and of gen_streams_max) against the requests the arm kept in flight."""
    if cells.empty or "gen_streams_max" not in cells:
        return []
    rows = []
    for arm, grp in cells[cells["arm"] > 0].groupby("arm"):
        peak = pd.to_numeric(grp["gen_streams_max"], errors="coerce").dropna()
        mean = pd.to_numeric(grp.get("gen_streams"), errors="coerce").dropna()
        if peak.empty:
            continue
        rows.append({"arm": int(arm), "cells": int(len(grp)),
                     "gen_streams": None if mean.empty else float(mean.median()),
                     "gen_streams_max": float(peak.median()),
                     "serialised": bool(peak.median() < arm)})
    return rows


def parallelism_text(rows: list[dict]) -> str:
    if not rows:
        return ""
    parts = [f"{r['arm']} in flight: {r['gen_streams_max']:g} at most"
             + (f", {r['gen_streams']:.2f} on average" if r["gen_streams"] is not None else "")
             for r in rows]
    capped = [r for r in rows if r["serialised"]]
    text = ("Requests generating at once (median over the cells, from the requests' durations): "
            + "; ".join(parts) + ".")
    if capped:
        most = max(r["gen_streams_max"] for r in rows)
        text += (f" From {capped[0]['arm']} in flight on, Ollama generated for fewer requests "
                 f"than were in flight: its parallelism was about {most:g}.")
    return text + f" {NOT_VISIBLE}."


def cell_text(found: list[dict]) -> str:
    split = [f for f in found if f["split"]]
    reload = [f for f in found if f["reload"]]
    out = []
    if split:
        out.append(f"Warning: {len(split)} cell(s) ran with the model partly on the CPU: "
                   + "; ".join(f"{f['cell']} ({', '.join(f['split'])})" for f in split[:5])
                   + (" …" if len(split) > 5 else "") + ".")
    if reload:
        out.append(f"Warning: {len(reload)} cell(s) paid a model reload: "
                   + "; ".join(f"{f['cell']} ({', '.join(f['reload'])})" for f in reload[:5])
                   + (" …" if len(reload) > 5 else "") + f" (RELOAD_NS = {RELOAD_NS:g}, see "
                   "docs/method.md#constants). Their time includes loading the weights.")
    return " ".join(out)


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
        all_cells = tables.cells if tables.all_cells is None else tables.all_cells
        tc = all_cells[all_cells["target"].astype(str) == target] if not all_cells.empty \
            else all_cells
        req = tables.measured_requests
        req = req[req["target"].astype(str) == target] if not req.empty else req
        per_cell = cell_findings(tc, req, models) if not tc.empty else []
        gen = parallelism(tc)
        placed = "placement" in tc and any(placement_of(v) for v in tc["placement"])
        fired = any(w["kind"] == "warning" for w in found) or bool(per_cell)
        if not any("size" in r for r in rows) and not placed and not per_cell:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no ollama ps snapshot lists a model",
                "Ollama: no /api/ps snapshot lists a loaded model, so where the model ran cannot "
                "be seen. " + parallelism_text(gen),
                evidence={"snapshots": rows, "notes": found, "parallelism": gen},
            ))
            continue
        n_warn = sum(w["kind"] == "warning" for w in found)
        summary = "; ".join(filter(None, [
            f"{n_warn} placement or context warning(s)" if n_warn else "",
            f"{sum(bool(f['split']) for f in per_cell)} cell(s) partly on the CPU"
            if any(f["split"] for f in per_cell) else "",
            f"{sum(bool(f['reload']) for f in per_cell)} cell(s) with a reload"
            if any(f["reload"] for f in per_cell) else "",
        ])) if fired else f"the model ran as requested in {len(snaps)} ollama ps snapshots"
        text = " ".join(filter(None, [" ".join(w["text"] for w in found), cell_text(per_cell)]))
        verdicts.append(judged(
            TRAP, TITLE, target, fired, summary,
            " ".join(filter(None, [text or f"Ollama: {summary}.", parallelism_text(gen)])),
            evidence={"snapshots": rows, "notes": found, "cells": per_cell,
                      "parallelism": gen, "reload_ns": RELOAD_NS,
                      "requested_num_ctx": sorted(requested)},
        ))
    return verdicts, {}
