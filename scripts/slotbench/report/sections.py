"""The report's other sections: how the numbers were measured (timing source, pinned output
length), figures, fingerprints, the resolved config, provenance and the raw-files appendix."""

from __future__ import annotations

import yaml

from slotbench.core.cells import arm_name, label_key
from slotbench.core.fmt import count, missing
from slotbench.measure.fingerprint import fingerprint_shares_host, flatten
from slotbench.measure.workload import is_article
from slotbench.workflow.workloads import of_target
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Code, Figure, Heading, Paragraph, ProvenanceIndex, Table

CLIENT_TIMING = (
    "client = derived from token arrival times on the client, because the server sent no timings"
)
CLIENT_WHAT = "token arrival times measured on the client, because the server sent no timings"


def timing_source_line(rows) -> str | None:
    """Which clock each arm's per-user numbers came from: the server's timings or the client's."""
    if rows.empty or "n_client_timed" not in rows or rows["n_requests"].isna().any():
        return None
    total, client = int(rows["n_requests"].sum()), int(rows["n_client_timed"].sum())
    if client in (0, total):
        only = "client" if client else "server"
        what = CLIENT_WHAT if client else "the server's own generation timings"
        text = (
            f"Timing source: {only}, for all {count(total, 'request')}: every per-user number "
            f"(per-user tok/s, its change, gen_gain, pipelining) comes from {what}."
        )
        return text + (" Client timings include streaming and network delays." if client else "")
    parts = []
    for r in rows.sort_values("arm").to_dict("records"):
        n, c = int(r["n_requests"]), int(r["n_client_timed"])
        if c in (0, n):
            parts.append(f"{arm_name(r['arm'])}: {'client' if c else 'server'}")
        else:
            parts.append(f"{arm_name(r['arm'])}: client for {count(c, 'request')}, server for "
                         f"{count(n - c, 'request')}")
    return "Timing source (per-user numbers per arm): " + "; ".join(parts) + f" ({CLIENT_TIMING})."


def pinned_line(target, fps: list[dict], config: dict | None = None) -> str | None:
    """Whether output length was pinned (ignore_eos), which Ollama cannot do. A workload's
    planned output lengths are judged request by request under Output lengths against the
    plan instead."""
    if not is_article(of_target(config or {}, str(target))):
        return None
    if not fps:
        return f"Output length pinned: unknown (no fingerprint recorded for {target})."
    answers = {}
    for fp in fps:
        conf = fp.get("config") or {}
        backend = (fp.get("server") or {}).get("backend") or (conf.get("target") or {}).get(
            "backend"
        )
        ignore = ((conf.get("target") or {}).get("ignore_eos")) is True
        answers[str(fp.get("run"))] = (ignore, backend, conf.get("measurement") or {})
    if len({a[0] for a in answers.values()}) > 1:
        per_run = ", ".join(f"{'yes' if a[0] else 'no'} in {run}" for run, a in answers.items())
        return f"Output length pinned: {per_run} (ignore_eos differs between runs)."
    ignore, backend, measurement = next(iter(answers.values()))
    if ignore:
        predict = measurement.get("num_predict")
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


def model_line(fps: list[dict]) -> str | None:
    """Which model an external llama-server served, as its fingerprints recorded it (None for
    a target whose model slotbench installed or the config names: a managed or other one)."""
    named = {str(fp.get("run")): fp["model"] for fp in fps
             if "name_from" in (fp.get("model") or {})}
    if not named:
        return None
    said = {(m.get("name"), m.get("name_from")) for m in named.values()}
    if len(said) > 1:
        return "Model, as each run's server reported it: " + "; ".join(
            f"{run}: {_model_said(m.get('name'), m.get('name_from'))}"
            for run, m in sorted(named.items())) + "."
    return f"Model: {_model_said(*next(iter(said)))}."


def _model_said(name, source) -> str:
    if name is None:
        return "not known: the server does not report its model, and the config names none"
    if source and source.startswith("the config"):
        return f"{name}, as {source}"
    return f"{name}, as the server reports it ({source})"


def model_warnings(fps: list[dict]) -> list[str]:
    """The fingerprints' model mismatches (a config's name the server did not report), each
    once, with the runs that recorded it."""
    runs: dict[str, list[str]] = {}
    for fp in sorted(fps, key=lambda f: str(f.get("run"))):
        text = (fp.get("model") or {}).get("mismatch")
        if text:
            runs.setdefault(text, []).append(str(fp.get("run")))
    return [f"Warning: {text} (the fingerprint of {', '.join(r)})." for text, r in runs.items()]


def machines_line(fp: dict) -> str:
    """Which machine a fingerprint's keys describe: the client host, and the server host when it
    is the same machine (slotbench.core.hosts)."""
    key = "client_host" if "client_host" in fp or "host" not in fp else "host"
    shares = fingerprint_shares_host(fp)
    if shares is False:
        return (f"Machines: {key} is the client host, the machine slotbench ran on. The server "
                "ran on another machine, which reported nothing of its hardware, temperature or "
                "load: no key here describes it; the server keys are what the server reported "
                "about itself.")
    if shares is None:
        return (f"Machines: {key} is the client host, the machine slotbench ran on; this "
                "fingerprint does not say where the server ran.")
    return (f"Machines: this machine (client and server): the server ran on the machine "
            f"slotbench ran on (managed, or on a loopback address), so {key} describes both.")


def fingerprint_blocks(fingerprints: list[dict], index: prov.CellIndex, sources) -> list:
    blocks: list = [Heading(2, "Fingerprints")]
    if not fingerprints:
        return blocks + [Paragraph("No fingerprint was recorded.", "note")]
    first: dict[str, tuple[str, dict]] = {}  # target → its first run and that run's pairs
    for fp in sorted(fingerprints, key=lambda f: (str(f.get("target")), str(f.get("run")))):
        target, run = str(fp.get("target", "?")), str(fp.get("run", "?"))
        pairs = {k: v for k, v in flatten(fp) if k not in ("target", "run")}
        title, fid = f"Fingerprint of {target}/{run}", prov.fingerprint_id(target, run)
        cells = index.labels(target, run=run)
        ref = prov.Ref(fid, "table", title, prov.with_roles((cells, "source")), fid)
        blocks += [Heading(3, f"{target} / {run}"), Paragraph(machines_line(fp))]
        if target not in first:
            first[target] = (run, pairs)
            blocks.append(Table(title, ["key", "value"], [[k, v] for k, v in pairs.items()],
                                kind="kv", anchor=fid))
        else:  # later runs of a target: what differs from its first run
            base_run, base = first[target]
            differ = [[k, pairs.get(k, "(absent)"), base.get(k, "(absent)")]
                      for k in sorted(set(pairs) | set(base)) if pairs.get(k) != base.get(k)]
            same = len(set(pairs) & set(base)) - sum(1 for d in differ
                                                     if d[0] in base and d[0] in pairs)
            blocks += [Paragraph(f"The same as {target}/{base_run} in {same} keys; the keys that "
                                 "differ:"),
                       Table(title, ["key", "value", f"value in {base_run}"], differ, kind="kv",
                             anchor=fid)]
        blocks.append(sources(cells, fid, (ref,)))
    return blocks


def figure_blocks(figures_sources: dict, figure_paths: dict, sources) -> list:
    blocks: list = [Heading(2, "Figures")]
    for fig_id, src in figures_sources.items():
        if src.get("shown") is False:  # e.g. the cross-target figure of a one-target run
            continue
        path = figure_paths.get(fig_id)
        blocks.append(Figure(fig_id, src.get("title", fig_id), src.get("caption", ""),
                             src.get("file", f"{fig_id}.png"),
                             None if path is None else str(path)))
        cells, fid = list(src.get("cells", [])), prov.figure_id(fig_id)
        ref = prov.Ref(fid, "figure", src.get("title", fig_id),
                       prov.with_roles((cells, "source")), f"fig-{fig_id}")
        blocks.append(sources(cells, fid, (ref,)))
    return blocks


def config_yaml(cfg: dict) -> str:
    """The resolved config as YAML, keys sorted."""
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


def provenance_blocks(record: dict, order: list[str], listed: dict | None = None,
                      explain: str = "python -m slotbench explain ID") -> list:
    """The provenance section; ``listed`` maps the ids whose cells the page lists one by one
    to (cells, raw files) (provenance.listing), the others name their sets; ``explain`` is the
    command that explains an id of this report."""
    entries, listed = record["entries"], listed or {}
    example = next((i for i in order if entries[i]["kind"] == "table-cell"),
                   next(iter(order), "ID"))
    digest = record.get("config_sha256") or "not recorded"
    return [
        Heading(2, "Provenance"),
        Paragraph(
            "Every table, table row and figure above names its provenance id. Each id stands for "
            "the cells (target/run/repN/armM) behind it, the SHA-256 of each raw file they came "
            "from, the pipeline commit and dirty flag and the server build that produced them, "
            f"and the SHA-256 of the resolved config ({digest}). Each number in the per-arm table "
            f"has its own id, its row's id and the metric (e.g. {example}); a within-rep ratio "
            "also names the serial cells of the same reps, its denominators. The record is "
            f"provenance.json next to this report; `{explain}` prints the "
            "raw request rows behind an id and checks each raw file against its recorded SHA-256."
        ),
        ProvenanceIndex(tuple(prov.entry_view(entries[i], record, listed.get(i)) for i in order)),
    ]


# The appendix lists each raw file up to this many; past it, one row per target and run (every
# file and its SHA-256 stay in provenance.json, under reps).
RAW_LIST_LIMIT = 200


def _raw_files_by_run(by_file: dict, explain: str) -> list:
    """The appendix of a run too big to list file by file: each target and run's raw files."""
    runs: dict[tuple, list[int]] = {}
    for target, run, rep, _path, _sha in by_file:
        runs.setdefault((target, run), []).append(int(rep))
    rows = [[t, r, f"{len(reps):,}", f"rep{min(reps)} to rep{max(reps)}"]
            for (t, r), reps in sorted(runs.items())]
    return [
        Heading(2, "Cells and raw files"),
        Paragraph(f"Every cell above comes from one of these {count(len(by_file), 'raw file')}, "
                  "each checked against the SHA-256 recorded when it was written. Too many to "
                  "list here: provenance.json names each with its SHA-256 (under reps), and "
                  f"`{explain}` lists and checks those behind any id."),
        Table("Raw files", ["target", "run", "raw files", "reps"], rows),
    ]


def raw_files_blocks(index: prov.CellIndex,
                     explain: str = "python -m slotbench explain ID") -> list:
    """The appendix: every raw file once, with its SHA-256 and the cells it holds."""
    by_file: dict[tuple, list[str]] = {}
    for label in sorted(index.cells, key=label_key):
        info = index.cells[label]
        key = (info["target"], info["run"], info["rep"], info.get("raw_file"),
               info.get("raw_sha256"))
        by_file.setdefault(key, []).append(f"arm{info['arm']}")
    if len(by_file) > RAW_LIST_LIMIT:
        return _raw_files_by_run(by_file, explain)
    arm_sets = {", ".join(arms) for arms in by_file.values()}
    same = len(arm_sets) == 1  # every rep holds the same arms: say so once
    rows = [[str(path), "n/a" if missing(sha) else str(sha), *([] if same else [", ".join(arms)])]
            for (t, run, rep, path, sha), arms in by_file.items()]
    held = f" Each holds the cells {arm_sets.pop()} of its rep." if same and rows else ""
    return [
        Heading(2, "Cells and raw files"),
        Paragraph(f"Every cell above comes from one of these {count(len(rows), 'raw file')}, "
                  f"each checked against the SHA-256 recorded when it was written.{held} "
                  "(SHA-256s cut to 16 digits here; whole in report.html.)"),
        Table("Raw files", ["raw file", "SHA-256", *([] if same else ["cells"])], rows,
              kind="hashes"),
    ]
