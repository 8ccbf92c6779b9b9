"""Report sections for the checks behind the headline: rotation bias, deviance, serialisation,
timing source and pinned output length, Ollama server facts, fingerprints, figures, and the
versions, resolved config and provenance sections."""

from __future__ import annotations

import json

import pandas as pd

from slotbench import provenance as prov
from slotbench.cells import cell_label
from slotbench.report.format import (
    DASH,
    _missing,
    _split,
    _union,
    arm_name,
    fmt_bytes,
    fmt_change,
    fmt_num,
    fmt_pct,
)
from slotbench.report.frames import _measured_requests, _truthy
from slotbench.report.blocks import (
    Bullets,
    Code,
    Figure,
    Heading,
    Paragraph,
    ProvenanceIndex,
    Sources,
    Table,
    _count,
)


def rotation_blocks(target, positions: pd.DataFrame, verdict, thresholds, hash_of) -> list:
    blocks: list = [Heading(3, "Rotation bias")]
    verdict = verdict or {}
    bias, worst = verdict.get("rotation_bias"), verdict.get("worst_arm")
    thr = thresholds["rotation"]
    if _missing(bias):
        blocks.append(Paragraph("No rotation bias was computed for this target.", "note"))
    else:
        side = "within" if bias <= thr else "above"
        worst_txt = "" if _missing(worst) else f" (worst arm {arm_name(worst)})"
        blocks.append(
            Paragraph(
                f"Rotation bias {fmt_pct(bias, 1)}{worst_txt}: the widest relative spread of an "
                f"arm's median aggregate tok/s across the positions it occupied. That is {side} "
                f"the {fmt_pct(thr)} threshold (above it the report refuses a headline)."
            )
        )
    rows = positions[positions["target"] == target] if not positions.empty else positions
    if rows.empty:
        return blocks
    slots = sorted(rows["position"].astype(int).unique())
    arms_info = verdict.get("arms", {})
    columns = ["arm", *[f"position {p}" for p in slots], "spread"]
    table_id = prov.rotation_id(target)
    labels = _union(rows["cells"])
    refs = [
        prov.Ref(
            table_id,
            "table",
            f"Rotation bias of {target}: median aggregate tok/s of each arm at each position",
            prov.with_roles((labels, "source")),
            table_id,
            metric=(
                None
                if _missing(bias)
                else {"name": "rotation_bias", "value": bias, "text": fmt_pct(bias, 1)}
            ),
        )
    ]
    table_rows, row_ids = [], []
    for arm, grp in rows.groupby("arm", sort=True):
        by_pos = {int(p): r for p, r in zip(grp["position"], grp.itertuples())}
        cells = [
            (
                f"{fmt_num(by_pos[p].median_agg_tps)} (n={int(by_pos[p].n_cells)})"
                if p in by_pos
                else DASH
            )
            for p in slots
        ]
        spread = arms_info.get(str(int(arm)), {}).get("spread")
        table_rows.append([arm_name(arm), *cells, fmt_pct(spread, 1)])
        row_id = prov.positions_id(target, arm)
        row_ids.append(row_id)
        refs.append(
            prov.Ref(
                row_id,
                "table-row",
                f"Rotation bias of {target}, {arm_name(arm)}: median aggregate tok/s by position",
                prov.with_roles((_union(grp["cells"]), "arm")),
                anchor=row_id,
                parent=table_id,
                metric={"name": "spread", "value": spread, "text": fmt_pct(spread, 1)},
                row=dict(zip(columns, table_rows[-1])),
            )
        )
        for p in slots:
            if p not in by_pos:
                continue
            refs.append(
                prov.Ref(
                    prov.positions_id(target, arm, p),
                    "table-cell",
                    f"{target}, {arm_name(arm)} at position {p}: median aggregate tok/s",
                    prov.with_roles((_split(by_pos[p].cells), "arm")),
                    anchor=row_id,
                    parent=row_id,
                    metric={
                        "name": "median_agg_tps",
                        "value": by_pos[p].median_agg_tps,
                        "text": cells[slots.index(p)],
                    },
                )
            )
    blocks.append(
        Table(
            "Median aggregate tok/s by position (n = cells)",
            columns,
            table_rows,
            anchor=table_id,
            row_ids=row_ids,
        )
    )
    hashes = sorted({hash_of[c] for c in labels if c in hash_of})
    blocks.append(Sources(labels, hashes, table_id, tuple(refs)))
    return blocks


def deviance_blocks(
    target,
    deviance: pd.DataFrame,
    threshold,
    target_cells,
    target_hashes,
    index: prov.CellIndex | None = None,
) -> list:
    blocks: list = [Heading(3, "Output deviance")]
    rows = deviance[deviance["target"] == target] if not deviance.empty else deviance
    dev_id = prov.deviance_id(target)
    if rows.empty:
        text = f"No cell deviates more than {fmt_pct(threshold)} from its run's modal output."
        blocks.append(Paragraph(text, anchor=dev_id))
        ref = prov.Ref(
            dev_id,
            "table",
            f"Output deviance of {target}: {text}",
            prov.with_roles((target_cells, "source")),
            dev_id,
        )
        blocks.append(Sources(target_cells, target_hashes, dev_id, (ref,)))
        return blocks
    rows = rows.sort_values(["run", "rep", "arm"])
    labels = [
        (
            r["cell"]
            if "cell" in r and not _missing(r["cell"])
            else cell_label(r["target"], r["run"], r["rep"], r["arm"])
        )
        for _, r in rows.iterrows()
    ]
    n = len(rows)
    blocks.append(
        Paragraph(
            f"{n} cell{'s' if n != 1 else ''} deviate{'s' if n == 1 else ''} more than "
            f"{fmt_pct(threshold)} from {'its' if n == 1 else 'their'} run's modal output. Each is "
            "named with its wall-clock and throughput effect against the same arm's other cells. "
            "Throughput here is tokens produced over the wall clock that produced them, so such a "
            "cell is still measured correctly; a wall-over-wall comparison would book its extra "
            "output as a concurrency effect."
        )
    )
    index = index or prov.CellIndex()
    columns = [
        "cell",
        "tokens",
        "modal",
        "deviation",
        "wall s",
        "wall effect",
        "agg tok/s",
        "throughput effect",
    ]
    refs = [
        prov.Ref(
            dev_id,
            "table",
            f"Output deviance of {target}: cells more than {fmt_pct(threshold)} from their run's "
            "modal output",
            prov.with_roles((labels, "deviant")),
            dev_id,
        )
    ]
    items, table_rows, row_ids = [], [], []
    for label, (_, r) in zip(labels, rows.iterrows()):
        wall, tps = r.get("wall_effect"), r.get("tps_effect")
        wall_txt = (
            "n/a"
            if _missing(wall)
            else f"{abs(wall) * 100:.0f}% {'slower' if wall > 0 else 'faster'}"
        )
        tps_txt = (
            "n/a" if _missing(tps) else f"{abs(tps) * 100:.0f}% {'higher' if tps > 0 else 'lower'}"
        )
        items.append(
            f"{label} generated {int(r['tokens_out'])} tokens against a modal "
            f"{int(r['modal_tokens'])} ({fmt_change(1 + r['deviation'])}); by the wall clock it "
            f"was {wall_txt} and its throughput {tps_txt}."
        )
        table_rows.append(
            [
                label,
                str(int(r["tokens_out"])),
                str(int(r["modal_tokens"])),
                fmt_change(1 + r["deviation"]),
                fmt_num(r.get("wall_s"), 2),
                "n/a" if _missing(wall) else fmt_change(1 + wall),
                fmt_num(r.get("agg_tps")),
                "n/a" if _missing(tps) else fmt_change(1 + tps),
            ]
        )
        row_id = prov.deviance_id(target, label)
        row_ids.append(row_id)
        # its effects are against the same arm's normal cells of the same run
        comparison = [c for c in index.labels(target, r["arm"], r["run"]) if c not in set(labels)]
        refs.append(
            prov.Ref(
                row_id,
                "table-row",
                f"Deviant cell {label}: output, wall-clock and throughput against the same "
                "arm's other cells in its run",
                prov.with_roles(([label], "deviant"), (comparison, "comparison")),
                anchor=row_id,
                parent=dev_id,
                metric={
                    "name": "deviation",
                    "value": r.get("deviation"),
                    "text": fmt_change(1 + r["deviation"]),
                },
                row=dict(zip(columns, table_rows[-1])),
            )
        )
    blocks.append(Bullets(items))
    blocks.append(Table("Deviant cells", columns, table_rows, anchor=dev_id, row_ids=row_ids))
    blocks.append(Sources(sorted(labels), _union(rows.get("raw_sha256", [])), dev_id, tuple(refs)))
    return blocks


# --------------------------------------------------------------------------------------------
# Serialisation: a parallel arm the server served one request at a time
# --------------------------------------------------------------------------------------------


def serialisation_rows(target, serialisation: pd.DataFrame | None, verdict) -> list[dict]:
    """The target's parallel arms from serialisation.csv, else from the verdict's summary."""
    if serialisation is not None and not serialisation.empty:
        rows = serialisation[serialisation["target"] == target].sort_values("arm")
        if not rows.empty:
            return [
                {**r, "arm": int(r["arm"]), "serialised": _truthy(r["serialised"])}
                for r in rows.to_dict("records")
            ]
    arms = (verdict or {}).get("serialisation") or {}
    return [
        {**info, "arm": int(arm), "serialised": _truthy(info.get("serialised"))}
        for arm, info in sorted(arms.items(), key=lambda kv: int(kv[0]))
    ]


def _stated_parallel(fps: list[dict]) -> tuple[str, int | None] | None:
    """The parallel setting the target claims (stated OLLAMA_NUM_PARALLEL or -np), if any."""
    for fp in fps:
        server = fp.get("server") or {}
        env = server.get("ollama_env") or {}
        if "OLLAMA_NUM_PARALLEL" in env:
            value = env["OLLAMA_NUM_PARALLEL"]
            return f"OLLAMA_NUM_PARALLEL={value}", _int_or_none(value)
        flags = server.get("flags") or {}
        if "parallel" in flags:
            return f"--parallel {flags['parallel']}", _int_or_none(flags["parallel"])
    return None


def serialisation_warning(row: dict, fps: list[dict]) -> str:
    name = arm_name(row["arm"])
    text = f"Warning: {name} was served one request at a time."
    n, k = row.get("n_cells"), row.get("serialised_cells")
    if not _missing(n) and not _missing(k):
        flight = row.get("in_flight_median")
        flight = row["arm"] if _missing(flight) else int(flight)
        text += (
            f" In {int(k)} of {_count(int(n), 'cell')} no two of its requests were generating at "
            f"once, although the client had {flight} in flight"
        )
        gap, wait = row.get("queue_gap_slope_s"), row.get("wait_slope_s")
        if not _missing(gap):
            text += (
                f"; Ollama's own queue wait grew by {fmt_num(gap, 2)} s for each place a "
                "request stood in the order of service"
            )
        elif not _missing(wait):
            text += (
                f"; time to first token grew by {fmt_num(wait, 2)} s for each place a request "
                "stood in the order of service"
            )
        text += "."
    elif not _missing(row.get("max_overlap_median")):
        text += " At most one of its requests was generating at any moment."
    cause = row.get("cause")
    cause = cause if isinstance(cause, str) and cause else "a server limited to one slot"
    # the checks' wording: the sentence above already says its first half
    lead = "the server served one request at a time: likely "
    if cause.startswith(lead):
        cause = cause[len(lead) :]
    text += f" Likely cause: {cause.rstrip('.')}."
    stated = _stated_parallel(fps)
    if stated and (stated[1] is None or stated[1] > 1):
        text += (
            f" The stated setting is {stated[0]}, so the server either did not run with it or "
            "forced this model to one slot."
        )
    text += (
        f" Read {name}'s speedup, gen_gain and pipelining as the cost of a queue, not as the "
        "engine's batching."
    )
    return text


SERIALISATION_TABLE_COLUMNS = [
    "arm",
    "cells",
    "in flight (client, median)",
    "generating at once (median of cell max)",
    "serialised cells",
    "queue-wait slope s/place (Ollama)",
    "TTFT-wait slope s/place (client)",
    "served one at a time",
]


def serialisation_blocks(target, rows: list[dict], hash_of) -> list:
    rows = [r for r in rows if "n_cells" in r]  # the table needs serialisation.csv's detail
    if not rows:
        return []
    blocks: list = [
        Heading(3, "Server concurrency"),
        Paragraph(
            "Whether the server really ran a parallel arm's requests at once, from request "
            "timings: the most requests whose generation windows (first token to last chunk, "
            "5 ms tolerance) overlap in each cell. A parallel arm is marked as served one at a "
            "time when that is 1 in (nearly) all its cells although the client had more in "
            "flight. Corroboration: Ollama's queue wait (total − load − prompt eval − eval "
            "duration) and the client's TTFT over the serial arm's median, each as a slope in "
            "seconds per place in the order of service."
        ),
    ]
    table_id = prov.serialisation_id(target)
    table_rows, capped, row_ids, refs = [], [], [], []
    for r in rows:
        table_rows.append(
            [
                arm_name(r["arm"]),
                "n/a" if _missing(r.get("n_cells")) else str(int(r["n_cells"])),
                fmt_num(r.get("in_flight_median"), 1),
                fmt_num(r.get("max_overlap_median"), 1),
                "n/a" if _missing(r.get("serialised_cells")) else str(int(r["serialised_cells"])),
                fmt_num(r.get("queue_gap_slope_s"), 3),
                fmt_num(r.get("wait_slope_s"), 3),
                "yes" if r["serialised"] else "no",
            ]
        )
        row_id = prov.serialisation_id(target, r["arm"])
        row_ids.append(row_id)
        refs.append(
            prov.Ref(
                row_id,
                "table-row",
                f"Server concurrency of {target}, {arm_name(r['arm'])}: requests generating at "
                "once",
                prov.with_roles((_split(r.get("cells")), "arm")),
                anchor=row_id,
                parent=table_id,
                row=dict(zip(SERIALISATION_TABLE_COLUMNS, table_rows[-1])),
            )
        )
        overlap = r.get("max_overlap_median")
        if not r["serialised"] and not _missing(overlap) and 1 < overlap < r["arm"]:
            capped.append(
                f"At {arm_name(r['arm'])} at most {fmt_num(overlap, 1)} requests were generating "
                f"at once in the median cell, fewer than the {r['arm']} in flight: the server "
                "seems to run fewer slots than this arm asks for."
            )
    blocks.append(
        Table(
            "Requests generating at once",
            SERIALISATION_TABLE_COLUMNS,
            table_rows,
            anchor=table_id,
            row_ids=row_ids,
        )
    )
    labels = _union(r.get("cells") for r in rows)
    table_ref = prov.Ref(
        table_id,
        "table",
        f"Server concurrency of {target}: requests generating at once",
        prov.with_roles((labels, "source")),
        table_id,
    )
    hashes = sorted({hash_of[c] for c in labels if c in hash_of})
    blocks.append(Sources(labels, hashes, table_id, (table_ref, *refs)))
    if capped:
        blocks.append(Bullets(capped))
    return blocks


# --------------------------------------------------------------------------------------------
# How the numbers were measured: timing source, pinned output length
# --------------------------------------------------------------------------------------------

CLIENT_TIMING = (
    "client = derived from token arrival times on the client, because the server sent no timings"
)
CLIENT_WHAT = "token arrival times measured on the client, because the server sent no timings"


def timing_source_line(target, requests: pd.DataFrame | None) -> str | None:
    """Which clock each arm's per-user numbers came from: the server's timings or the client's."""
    if requests is None or requests.empty or "timing_source" not in requests:
        return None
    rows = _measured_requests(requests, target)
    if rows.empty:
        return None
    source = rows["timing_source"].fillna("unknown").astype(str)
    if source.nunique() == 1:
        only = source.iloc[0]
        what = {
            "server": "the server's own generation timings",
            "client": CLIENT_WHAT,
        }.get(only, "an unrecorded source")
        text = (
            f"Timing source: {only}, for all {_count(len(rows), 'request')}: every per-user "
            f"number (per-user tok/s, its change, gen_gain, pipelining) comes from {what}."
        )
        if only == "client":
            text += " Client timings include streaming and network delays."
        return text
    parts = []
    for arm, grp in rows.assign(_src=source).groupby("arm", sort=True):
        counts = grp["_src"].value_counts().sort_index()
        if len(counts) == 1:
            parts.append(f"{arm_name(arm)}: {counts.index[0]}")
        else:
            parts.append(
                f"{arm_name(arm)}: "
                + ", ".join(f"{src} for {_count(int(n), 'request')}" for src, n in counts.items())
            )
    return "Timing source (per-user numbers per arm): " + "; ".join(parts) + f" ({CLIENT_TIMING})."


def _backend(fp: dict) -> str | None:
    return (fp.get("server") or {}).get("backend") or (
        (fp.get("config") or {}).get("target") or {}
    ).get("backend")


def pinned_line(target, fps: list[dict]) -> str:
    """Whether output length was pinned (ignore_eos), which Ollama cannot do."""
    if not fps:
        return f"Output length pinned: unknown (no fingerprint recorded for {target})."
    answers = {}
    for fp in fps:
        conf = fp.get("config") or {}
        ignore = ((conf.get("target") or {}).get("ignore_eos")) is True
        answers[str(fp.get("run"))] = (ignore, _backend(fp), (conf.get("measurement") or {}))
    values = {a[0] for a in answers.values()}
    if len(values) > 1:
        per_run = ", ".join(f"{'yes' if a[0] else 'no'} in {run}" for run, a in answers.items())
        return f"Output length pinned: {per_run} (ignore_eos differs between runs)."
    ignore, backend, measurement = next(iter(answers.values()))
    predict = measurement.get("num_predict")
    if ignore:
        budget = f" ({predict} tokens)" if predict is not None else ""
        return (
            "Output length pinned: yes. ignore_eos is set, so every request generates up to "
            f"num_predict{budget} instead of stopping at its end-of-sequence token."
        )
    if backend == "ollama":
        return (
            "Output length pinned: no. Ollama ignores ignore_eos, so output length cannot be "
            "pinned on this target: each request stops at its end-of-sequence token or at "
            "num_predict, and throughput counts the tokens actually produced (cells far from "
            "their run's modal output are named under Output deviance)."
        )
    return (
        "Output length pinned: no (ignore_eos is not set). Each request stops at its "
        "end-of-sequence token or at num_predict; throughput counts the tokens actually produced "
        "(cells far from their run's modal output are named under Output deviance)."
    )


# --------------------------------------------------------------------------------------------
# Ollama: server facts, loaded models (ollama ps) before the run and after each rep
# --------------------------------------------------------------------------------------------


def _int_or_none(x):
    try:
        return None if _missing(x) else int(x)
    except (TypeError, ValueError):
        return None  # e.g. a stated setting written as text


def _full_name(name) -> str:
    name = str(name or "")
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _when_text(whens: list[str], total: int) -> str:
    if len(whens) <= 3:
        return ", ".join(whens)
    return f"{len(whens)} of {total} snapshots, {whens[0]} to {whens[-1]}"


def ollama_facts(fp: dict) -> list[list[str]]:
    server, model = fp.get("server") or {}, fp.get("model") or {}
    tag = server.get("model_tag") or {}
    details = (server.get("show") or {}).get("details") or {}
    target_conf = _target_conf(fp)

    def val(*candidates):
        return next((c for c in candidates if not _missing(c) and c != ""), None)

    size = val(model.get("size_bytes"), tag.get("size"))
    num_ctx = val(server.get("requested_num_ctx"), target_conf.get("num_ctx"))
    rows = [
        ["version", val(server.get("version"))],
        ["model", val(model.get("name"), target_conf.get("model"), tag.get("name"))],
        ["digest", val(model.get("digest"), tag.get("digest"))],
        ["size", None if size is None else f"{fmt_bytes(size)} ({int(size)} bytes)"],
        ["quantization_level", val(details.get("quantization_level"), model.get("quantisation"))],
        ["parameter_size", val(details.get("parameter_size"), model.get("parameter_size"))],
        ["family", val(details.get("family"), model.get("family"))],
        ["requested num_ctx", num_ctx],
    ]
    env = server.get("ollama_env")
    if isinstance(env, dict) and env:
        rows += [[f"stated {k}", v] for k, v in sorted(env.items())]
    else:
        rows.append(["stated OLLAMA_* settings", "none stated (they are not visible over HTTP)"])
    if server.get("server_config_line"):
        rows.append(["server config line (managed server's log)", server["server_config_line"]])
    return [[k, "n/a" if v is None else str(v)] for k, v in rows]


def _target_conf(fp: dict) -> dict:
    return (fp.get("config") or {}).get("target") or {}


def ps_snapshots(target, fps: list[dict], servers: list[dict], cells_of) -> list[tuple]:
    """(when, server section, cells) for each /api/ps seen: before each run, after each rep."""
    snapshots = [
        (f"before {fp.get('run', '?')}", fp.get("server") or {}, cells_of(target, fp.get("run")))
        for fp in fps
    ]
    states = sorted(
        (s for s in servers if s.get("target") == target),
        key=lambda s: (str(s.get("run")), int(s.get("rep", 0))),
    )
    for state in states:
        server = state.get("server") or {}
        if server.get("backend", "ollama") != "ollama":
            continue
        run, rep = str(state.get("run")), int(state.get("rep", 0))
        rep_cells = [c for c in cells_of(target, run) if c.startswith(f"{target}/{run}/rep{rep}/")]
        snapshots.append((f"after {run}/rep{rep}", server, rep_cells))
    return snapshots


PS_COLUMNS = ["when", "model", "size", "in VRAM", "on CPU", "context length", "expires at"]


def _ps_rows(when: str, server: dict) -> list[tuple[list[str], dict | None]]:
    """Table rows of one snapshot, each with the parsed model entry (None for a placeholder)."""
    ps = server.get("ps")
    if not isinstance(ps, list):
        why = ps.get("unavailable") if isinstance(ps, dict) else None
        text = f"(unavailable: {why})" if why else "(ps not recorded)"
        return [([when, text, *["n/a"] * 5], None)]
    if not ps:
        return [([when, "(no model loaded)", *["n/a"] * 5], None)]
    rows = []
    for m in (m for m in ps if isinstance(m, dict)):
        size, vram = _int_or_none(m.get("size")), _int_or_none(m.get("size_vram"))
        entry = {
            "name": str(m.get("name") or m.get("model") or "?"),
            "names": {_full_name(m.get("name")), _full_name(m.get("model"))},
            "size": size,
            "vram": vram,
            "ctx": _int_or_none(m.get("context_length")),
            "cpu_share": None if not size or vram is None else max(0.0, 1 - vram / size),
        }
        row = [
            when,
            entry["name"],
            fmt_bytes(size),
            fmt_bytes(vram),
            "n/a" if entry["cpu_share"] is None else fmt_pct(entry["cpu_share"]),
            "n/a" if entry["ctx"] is None else str(entry["ctx"]),
            str(m.get("expires_at") or "n/a"),
        ]
        rows.append((row, entry))
    return rows


def ps_warnings(seen: list[tuple[str, dict]], models: set, requested: set, total: int) -> list:
    """CPU share and context warnings for the target's own model, grouped over snapshots."""
    partial, on_cpu, ctx_diff = {}, {}, {}
    for when, e in seen:
        if models and not e["names"] & models:
            continue  # another client's model: shown in the table, not ours to warn about
        if e["size"] and e["vram"] == 0:
            on_cpu.setdefault((e["name"], e["size"]), []).append(when)
        elif e["size"] and e["vram"] is not None and e["vram"] < e["size"]:
            partial.setdefault((e["name"], round(e["cpu_share"], 3), e["size"]), []).append(when)
        for req in requested:
            if e["ctx"] is not None and e["ctx"] != req:
                ctx_diff.setdefault((e["name"], e["ctx"], req), []).append(when)
    blocks: list = []
    for (name, share, size), whens in partial.items():
        blocks.append(
            Paragraph(
                f"Warning: {name} was partly on the CPU: {fmt_pct(share)} of its "
                f"{fmt_bytes(size)} was in system memory, not VRAM (ollama ps: "
                f"{_when_text(whens, total)}). The CPU part sets the pace of every pass over the "
                "weights, so these numbers describe a split model, not this GPU; a smaller "
                "num_ctx, fewer parallel slots or a smaller model may fit it entirely.",
                "warning",
            )
        )
    for (name, size), whens in on_cpu.items():
        blocks.append(
            Paragraph(
                f"{name} ran entirely on the CPU: ollama ps reports none of its {fmt_bytes(size)} "
                f"in VRAM ({_when_text(whens, total)}). These are CPU numbers."
            )
        )
    for (name, ctx, req), whens in ctx_diff.items():
        text = (
            f"Warning: ollama ps reports a context length of {ctx} for {name} "
            f"({_when_text(whens, total)}), but the pipeline requested num_ctx {req}. The loaded "
            "model does not match the measured requests' load-time options: another client may "
            "have loaded it, or Ollama chose another context, and a request may have paid a "
            "reload."
        )
        if req and ctx > req and ctx % req == 0:
            text += (
                f" {ctx} is {ctx // req}× {req}: some Ollama versions report the context of "
                "all parallel slots together."
            )
        blocks.append(Paragraph(text, "warning"))
    return blocks


def ollama_blocks(target, fps: list[dict], servers: list[dict], cells_of, hashes_of, hash_of):
    """Version, model, stated settings and every /api/ps snapshot of an Ollama target."""
    fps = [fp for fp in fps if (fp.get("server") or {}).get("backend") == "ollama"]
    if not fps:
        return []
    models = {
        _full_name(m)
        for fp in fps
        for m in ((fp.get("model") or {}).get("name"), _target_conf(fp).get("model"))
        if m
    }
    requested = {
        _int_or_none(
            (fp.get("server") or {}).get("requested_num_ctx") or _target_conf(fp).get("num_ctx")
        )
        for fp in fps
    } - {None}
    snapshots = ps_snapshots(target, fps, servers, cells_of)
    table_rows, seen, labels = [], [], set()
    for when, server, snap_cells in snapshots:
        labels.update(snap_cells)
        for row, entry in _ps_rows(when, server):
            table_rows.append(row)
            if entry is not None:
                seen.append((when, entry))

    blocks: list = [Heading(3, "Ollama server")]
    blocks += ps_warnings(seen, models, requested, len(snapshots))
    for fp in fps:
        run = str(fp.get("run", "?"))
        facts = ollama_facts(fp)
        title, fid = f"Ollama facts of {target}/{run}", prov.ollama_id(target, run)
        blocks.append(Table(title, ["fact", "value"], facts, kind="kv", anchor=fid))
        cells = cells_of(target, run)
        ref = prov.Ref(fid, "table", title, prov.with_roles((cells, "source")), fid)
        blocks.append(Sources(cells, hashes_of(target, run), fid, (ref,)))
    title, ps_id = "Loaded models (ollama ps) before each run and after each rep", prov.ollama_id(
        target, "ps"
    )
    blocks.append(
        Table(
            title,
            PS_COLUMNS,
            table_rows,
            note="size, size_vram and context_length as /api/ps reports them; on CPU = 1 − "
            "size_vram / size.",
            anchor=ps_id,
        )
    )
    labels = sorted(labels)
    ref = prov.Ref(
        ps_id, "table", f"{title} ({target})", prov.with_roles((labels, "source")), ps_id
    )
    hashes = sorted({hash_of[c] for c in labels if c in hash_of})
    blocks.append(Sources(labels, hashes, ps_id, (ref,)))
    return blocks


def flatten(obj, prefix: str = "") -> list[tuple[str, str]]:
    """Nested dicts/lists as dotted key/value pairs, so new fingerprint keys need no code."""
    if isinstance(obj, dict):
        if not obj:
            return [(prefix, "{}")] if prefix else []
        out = []
        for key in obj:
            out += flatten(obj[key], f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return [(prefix, ", ".join("null" if v is None else str(v) for v in obj))]
        out = []
        for i, v in enumerate(obj):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, "null" if obj is None else str(obj))]


def fingerprint_blocks(fingerprints: list[dict], cells_of, hashes_of) -> list:
    blocks: list = [Heading(2, "Fingerprints")]
    if not fingerprints:
        blocks.append(Paragraph("No fingerprint was recorded.", "note"))
        return blocks
    for fp in sorted(fingerprints, key=lambda f: (str(f.get("target")), str(f.get("run")))):
        target, run = str(fp.get("target", "?")), str(fp.get("run", "?"))
        pairs = [(k, v) for k, v in flatten(fp) if k not in ("target", "run")]
        blocks.append(Heading(3, f"{target} / {run}"))
        title, fid = f"Fingerprint of {target}/{run}", prov.fingerprint_id(target, run)
        blocks.append(
            Table(title, ["key", "value"], [list(p) for p in pairs], kind="kv", anchor=fid)
        )
        cells = cells_of(target, run)
        ref = prov.Ref(fid, "table", title, prov.with_roles((cells, "source")), fid)
        blocks.append(Sources(cells, hashes_of(target, run), fid, (ref,)))
    return blocks


def figure_blocks(figures_sources: dict, figure_paths: dict) -> list:
    blocks: list = [Heading(2, "Figures")]
    for fig_id, src in figures_sources.items():
        path = figure_paths.get(fig_id)
        blocks.append(
            Figure(
                fig_id,
                src.get("title", fig_id),
                src.get("caption", ""),
                src.get("file", f"{fig_id}.png"),
                None if path is None else str(path),
            )
        )
        cells = list(src.get("cells", []))
        fid = prov.figure_id(fig_id)
        ref = prov.Ref(
            fid,
            "figure",
            src.get("title", fig_id),
            prov.with_roles((cells, "source")),
            f"fig-{fig_id}",
        )
        blocks.append(Sources(cells, list(src.get("raw_sha256", [])), fid, (ref,)))
    return blocks


# --------------------------------------------------------------------------------------------
# Versions behind the cells, resolved config, provenance
# --------------------------------------------------------------------------------------------


def version_blocks(target, index: prov.CellIndex) -> tuple[list, str | None]:
    """(warning, line): a warning when the target's cells come from several pipeline code
    versions (commit or dirty flag) or server builds, naming which runs and reps used each;
    otherwise one line saying which single version produced all of them."""
    if not index.labels(target):
        return [], None
    code, server = prov.version_groups(index, target)

    def describe(groups: dict, name, plural: str, unrecorded: str) -> str:
        if not groups:
            return unrecorded
        if len(groups) == 1:
            return f"all cells: {name(next(iter(groups)))}"
        return f"{len(groups)} {plural}: " + "; ".join(
            f"{name(v)} for {prov.reps_text(pairs)}" for v, pairs in groups.items()
        )

    code_txt = describe(
        code,
        lambda cd: prov.code_text(*cd),
        "pipeline code versions",
        "pipeline code version not recorded",
    )
    server_txt = describe(server, lambda b: b, "server builds", "server build not recorded")
    if len(code) <= 1 and len(server) <= 1:
        code_one = prov.code_text(*next(iter(code))) if code else None
        build_one = f"server build {next(iter(server))}" if server else None
        if code_one and build_one:
            return [], f"Versions: all cells: {code_one}, {build_one}."
        known = code_one or build_one
        missing = "server build" if code_one else "pipeline code version"
        if known:
            return [], f"Versions: all cells: {known}; {missing} not recorded."
        return [], "Versions: pipeline code version and server build not recorded."
    text = (
        f"Warning: the cells of {target} were not all produced by the same versions. "
        f"Pipeline code: {code_txt}. Server build: {server_txt}. Every number in this section "
        "pools them; if a version change may have moved the numbers, compare those runs "
        "separately or measure again with one version."
    )
    if any(dirty for _, dirty in code):
        text += " A dirty work tree's changes are not recorded, so dirty cells of one commit may differ too."
    return [Paragraph(text, "warning")], None


def config_yaml(cfg: dict) -> str:
    """The resolved config as YAML (sorted keys), or as JSON (which is YAML) without PyYAML."""
    try:
        import yaml
    except ImportError:  # the report's conda env need not carry PyYAML
        return json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    return yaml.safe_dump(cfg, sort_keys=True, allow_unicode=True, default_flow_style=False)


def config_blocks(resolved_config, config_sha256) -> list:
    if resolved_config is None:
        return []
    return [
        Heading(2, "Resolved config"),
        Paragraph(
            "The configuration the pipeline ran with, every default filled in, as the rules "
            f"received it. Its SHA-256 (of its JSON with sorted keys) is {config_sha256}; every "
            "provenance entry records it."
        ),
        Code(config_yaml(resolved_config), "yaml"),
    ]


def provenance_blocks(record: dict, order: list[str]) -> list:
    entries = record["entries"]
    example = next(
        (i for i in order if entries[i]["kind"] == "table-cell"), next(iter(order), "ID")
    )
    digest = record.get("config_sha256") or "not recorded"
    return [
        Heading(2, "Provenance"),
        Paragraph(
            "Every table, table row and figure above names its provenance id. Here is what each "
            "id stands for: the cells (target/run/repN/armM) behind it, the SHA-256 of each raw "
            "file they came from, the pipeline commit and dirty flag and the server build that "
            f"produced them, and the SHA-256 of the resolved config ({digest}). Each number in "
            "the per-arm table has its own id, its row's id and the metric (e.g. "
            f"{example}); a within-rep ratio also names the serial cells of the same reps, its "
            "denominators. The same record is in provenance.json next to this report; "
            "`python -m slotbench explain ID` prints the raw request rows behind an id and "
            "checks each raw file against its recorded SHA-256."
        ),
        ProvenanceIndex(tuple(entries[i] for i in order)),
    ]
