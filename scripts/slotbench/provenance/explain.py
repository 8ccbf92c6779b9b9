"""``python -m slotbench explain ID``: the raw request rows behind one provenance entry.

It prints an entry of an experiment's provenance.json (results/<experiment>/; a table, a row, one
number or a figure) with its cells, their raw files (each checked against its recorded SHA-256 now,
so a raw file that changed after the report was made is named) and the request rows behind it. No
server needed.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from pathlib import Path

from slotbench.analysis.analyse import cell_ratios
from slotbench.core import stats
from slotbench.core import experiments
from slotbench.core.cli import Parser
from slotbench.core.cells import CELL_KEYS, arm_name, is_measured_label, label_key, parse_label
from slotbench.core.fmt import code_text
from slotbench.measure.rawfiles import sha256_file
from slotbench.provenance import cellsets
from slotbench.provenance.ids import ABSOLUTE, ROLES, WITHIN_REP

REQUEST_COLUMNS = [
    "target", "run", "rep", "arm", "position", "request", "prompt_tokens", "output_tokens",
    "t_sent_s", "t_first_s", "t_done_s", "gen_s", "done_reason", "raw_file",
]
CELL_METRICS = ["tokens_out", "wall_s", "agg_tps", "user_tps", "ttft_s"]
MAX_CANDIDATES = 20


def resolve_raw(path: str, results: Path) -> Path | None:
    """A recorded raw-file path as it is found now. Recorded paths are relative to the
    directory the pipeline ran in (results/<experiment>/raw/…, or results/raw/… before
    experiments had their own folders), so the file is looked for in the result's folder
    ``results`` itself, whatever it is called now, never in the current directory (a file of
    the same name there may be another run's)."""
    p = Path(path)
    below = experiments.split(p)[1]
    candidates = [p] if p.is_absolute() else [results / below, results.parent / p, results / p]
    return next((c for c in candidates if c.is_file()), None)


def verify_raw(entry: dict, results: Path) -> list[dict]:
    """Each raw file of an entry with its status now: OK, MISMATCH or MISSING."""
    out = []
    for raw in entry.get("raw_files", []):
        found = resolve_raw(raw["path"], results) if raw.get("path") is not None else None
        if found is None:
            out.append({**raw, "status": "MISSING", "now": None, "found": None})
            continue
        now = sha256_file(found)
        status = "OK" if now == raw.get("sha256") else "MISMATCH"
        out.append({**raw, "status": status, "now": now, "found": str(found)})
    return out


def resolved(record: dict, entry: dict) -> dict:
    """An entry with its cells and raw files listed one by one: resolved from the sets it
    cites (slotbench.provenance.cellsets), or as an older record (slotbench.provenance/1) listed
    them."""
    if any("set" in group for group in entry.get("cells", [])):
        return {**entry, "cells": cellsets.entry_cells(record, entry),
                "raw_files": cellsets.entry_raw_files(record, entry)}
    return entry


def cell_details(record: dict, label: str) -> dict:
    """What the record holds about one cell (its position, code version, server build)."""
    if "reps" in record:
        return cellsets.cell_info(record, label)
    return record.get("cells", {}).get(label, {})


def find_entry(entries: dict, wanted: str) -> tuple[str | None, list[str]]:
    """(id, candidates): the exact id, else the one id it is a prefix of; otherwise None and
    the ids it could have meant (all ids it prefixes, or the closest spellings)."""
    if wanted in entries:
        return wanted, []
    prefixed = sorted(i for i in entries if i.startswith(wanted))
    if len(prefixed) == 1:
        return prefixed[0], []
    if prefixed:
        return None, prefixed
    close = difflib.get_close_matches(wanted, sorted(entries), n=8, cutoff=0.6)
    if not close:  # a typo in one component: same first part, or same last part
        head, tail = wanted.split("/", 1)[0], wanted.rsplit("/", 1)[-1]
        close = sorted(i for i in entries if i.split("/", 1)[0] == head or i.endswith("/" + tail))
        close = close[:12]
    return None, close


def _print_frame(frame, out) -> None:
    import pandas as pd

    with pd.option_context("display.max_colwidth", None, "display.width", None):
        text = frame.to_string(index=False, float_format=lambda x: f"{x:.3f}")
    print("\n".join("  " + line for line in text.splitlines()), file=out)


def per_rep_values(name: str, cells, measured):
    """A headline number's value in each rep, recomputed from cells.parquet the way analyse
    does (None when the metric is not a headline metric or the cells do not allow it)."""
    if name not in WITHIN_REP + ABSOLUTE or cells.empty:
        return None
    used = measured.merge(cells[CELL_KEYS].drop_duplicates(), on=CELL_KEYS, how="inner")
    subject = cells.loc[cells["role"] == "arm", CELL_KEYS]
    if name in WITHIN_REP:
        try:
            used = cell_ratios(used)
        except (KeyError, ValueError):
            return None
    if name not in used:
        return None
    rows = used.merge(subject, on=CELL_KEYS, how="inner")
    return rows[["run", "rep", "arm", name]].sort_values(["run", "rep"], ignore_index=True)


def _print_per_rep(metric: dict, cells, measured, out) -> None:
    name = metric.get("name")
    values = per_rep_values(str(name), cells, measured)
    if values is None or values.empty:
        return
    print(
        f"\n{name} in each rep, from these cells (the report quotes the median across reps: "
        f"{stats.median(values[name]):.4g}):",
        file=out,
    )
    _print_frame(values, out)


def _unknown_id(entry_id: str, entries: dict, candidates: list[str]) -> int:
    what = (
        "matches several ids"
        if candidates and all(c.startswith(entry_id) for c in candidates)
        else "is not a provenance id"
    )
    print(f"explain: {entry_id!r} {what}.", file=sys.stderr)
    if candidates:
        print("Did you mean:", file=sys.stderr)
        shown = candidates[:MAX_CANDIDATES]
        width = max(len(c) for c in shown)
        for c in shown:
            print(f"  {c:<{width}}  {entries[c].get('title', '')}", file=sys.stderr)
        if len(candidates) > len(shown):
            print(f"  … and {len(candidates) - len(shown)} more", file=sys.stderr)
    print("List every id with: python -m slotbench explain --list", file=sys.stderr)
    return 2


def _print_head(found: str, entry: dict, out) -> None:
    """What the entry is: its title, the value or row the report shows, its versions."""
    print(f"{found}  ({entry.get('kind')})", file=out)
    print(f"  {entry.get('title', '')}", file=out)
    metric = entry.get("metric")
    if metric:
        value = metric.get("value")
        interval = ""
        if metric.get("ci_low") is not None and metric.get("ci_high") is not None:
            interval = f", interval {metric['ci_low']:.4g} to {metric['ci_high']:.4g}"
        raw_value = "" if value is None else f" ({metric.get('name')} = {value:.4g}{interval})"
        print(f"  value in the report: {metric.get('text', 'n/a')}{raw_value}", file=out)
    if entry.get("row"):
        row = "; ".join(f"{k}: {v}" for k, v in entry["row"].items())
        print(f"  row in the report: {row}", file=out)
    if entry.get("parent"):
        print(f"  part of: {entry['parent']}", file=out)
    if entry.get("children"):
        print(f"  parts: {', '.join(entry['children'])}", file=out)
    code = ", ".join(code_text(c.get("commit"), c.get("dirty")) for c in entry.get("code", []))
    print(f"  pipeline code: {code or 'not recorded'}", file=out)
    builds = ", ".join(entry.get("server_builds", []))
    print(f"  server build: {builds or 'not recorded'}", file=out)
    print(f"  config SHA-256: {entry.get('config_sha256') or 'not recorded'}", file=out)


def _print_cells(record: dict, entry: dict, results: Path, out):
    """The entry's cells with their metrics from cells.parquet (and a headline number's value
    in each rep); returns the cells frame."""
    import pandas as pd

    cells = pd.DataFrame(entry.get("cells", []))
    measured = None
    roles = cells["role"].value_counts().to_dict() if not cells.empty else {}
    summary = ", ".join(
        f"{n} {role}"
        for role, n in sorted(
            roles.items(), key=lambda kv: ROLES.index(kv[0]) if kv[0] in ROLES else 99
        )
    )
    summary = f": {summary}" if len(roles) > 1 else ""
    print(f"\ncells ({len(cells)}{summary}):", file=out)
    if cells.empty:
        return cells
    details = {c: cell_details(record, c) for c in set(cells["cell"])}
    for f in ("position", "code_commit", "code_dirty", "server_build"):
        cells[f] = [details[c].get(f) for c in cells["cell"]]
    cells_pq = results / "cells.parquet"
    if cells_pq.is_file():
        measured = pd.read_parquet(cells_pq)
        keep = [c for c in CELL_KEYS + CELL_METRICS if c in measured]
        # a control cell is not in cells.parquet, even when it shares a measured label
        ok = cells["cell"].map(is_measured_label) & (cells["role"] != "control")
        merged = (
            cells[ok]
            .astype({"rep": "int64", "arm": "int64"})
            .merge(measured[keep], on=CELL_KEYS, how="left")
        )
        cells = pd.concat([merged, cells[~ok]], ignore_index=True) if (~ok).any() else merged
    show = ["cell", "role", "position", *[c for c in CELL_METRICS if c in cells], "raw_sha256"]
    _print_frame(cells[show], out)
    if entry.get("metric") and measured is not None:
        _print_per_rep(entry["metric"], cells, measured, out)
    return cells


def _print_raw_files(entry: dict, results: Path, out) -> int:
    """Each raw file checked against its recorded SHA-256 now; 1 when one changed or is gone."""
    status = 0
    checks = verify_raw(entry, results)
    print(f"\nraw files ({len(checks)}), SHA-256 as recorded, checked now:", file=out)
    for c in checks:
        if c["status"] == "OK":
            print(f"  OK        {c['sha256']}  {c['path']}", file=out)
        elif c["status"] == "MISMATCH":
            status = 1
            print(
                f"  MISMATCH  {c['path']}: recorded {c['sha256']}, the file now hashes to "
                f"{c['now']}: it changed after the report was made",
                file=out,
            )
        else:
            status = 1
            print(f"  MISSING   {c['sha256']}  {c['path']} (not found)", file=out)
    return status


def _print_requests(cells, req_path: Path, wanted: list[str], names: list[str], out) -> int:
    """The request rows behind the cells; 1 when a cell has none."""
    status = 0
    rows, missing, others = entry_requests(cells, read_requests(req_path, cells, names, wanted))
    arms = ", ".join(
        f"{n} of {arm_name(arm)}"
        for arm, n in rows.groupby("arm").size().sort_index(ascending=False).items()
    )
    n_control = int((rows["role"] == "control").sum())
    if n_control:
        arms += f" ({n_control} of them the control arm's)"
    print(f"\nrequests ({len(rows)}{': ' + arms if arms else ''}):", file=out)
    if missing:
        status = 1
        print(f"  no request rows for: {', '.join(missing)}", file=out)
    if others:
        print(
            f"  not measured cells (their requests are in their rep's raw file, not listed "
            f"here): {', '.join(others)}",
            file=out,
        )
    if not rows.empty:
        _print_frame(rows[["role", *[c for c in wanted if c != "role"]]], out)
    return status


def explain(entry_id: str, results: Path, columns: list[str] | None = None, out=None) -> int:
    """Print one entry and the raw requests behind it; 0 when every raw file still matches."""
    import pyarrow.parquet as pq

    out = out or sys.stdout
    prov_path = results / "provenance.json"
    if not prov_path.is_file():
        print(
            f"explain: {prov_path} not found; run the pipeline (snakemake --cores 1) or name "
            "the experiment with --results NAME (or its folder)",
            file=sys.stderr,
        )
        return 2
    record = json.loads(prov_path.read_text(encoding="utf-8"))
    entries = record.get("entries", {})
    found, candidates = find_entry(entries, entry_id)
    if found is None:
        return _unknown_id(entry_id, entries, candidates)
    entry = resolved(record, entries[found])
    _print_head(found, entry, out)
    cells = _print_cells(record, entry, results, out)
    status = _print_raw_files(entry, results, out)

    req_path = results / "requests.parquet"
    if not req_path.is_file():
        print(f"\nrequests: {req_path} not found", file=out)
        return 1
    names = pq.read_schema(req_path).names
    wanted = columns or REQUEST_COLUMNS
    unknown = [c for c in wanted if c not in names and c != "role"]
    if unknown:
        print(
            f"explain: no column {', '.join(unknown)} in {req_path}; columns: " + ", ".join(names),
            file=sys.stderr,
        )
        return 2
    if cells.empty:
        print("\nrequests (0)", file=out)
        return status
    status = max(status, _print_requests(cells, req_path, wanted, names, out))
    if status:
        print("\nexplain: some raw data no longer matches the record (see above)", file=out)
    return status


def read_requests(path: Path, cells, names: list[str], wanted: list[str]):
    """The rows of requests.parquet an entry's cells can match: only their targets and arms,
    only the columns printed and matched on (a big run's table is not read whole)."""
    import pandas as pd

    keep = [c for c in names if c in {*CELL_KEYS, "position", "request", "control", *wanted}]
    filters = [("target", "in", sorted({str(t) for t in cells["target"].dropna()})),
               ("arm", "in", sorted({int(a) for a in cells["arm"].dropna()}))]
    if not all(values for _, _, values in filters):
        return pd.read_parquet(path, columns=keep).iloc[0:0]
    return pd.read_parquet(path, columns=keep, filters=filters)


def entry_requests(cells, requests) -> tuple:
    """(request rows with their cell's role, cells without request rows, labels that name no
    measured cell). A cell in the control role matches the control arm's requests of its
    (target, run, rep, arm), which may share a label with a measured cell; every other role
    matches measured requests only."""
    import pandas as pd

    measured_label = cells["cell"].map(is_measured_label)
    others = sorted(set(cells.loc[~measured_label, "cell"]), key=label_key)
    cells = cells[measured_label]
    if "control" in requests:
        is_control = requests["control"].fillna(False).astype(bool)
    else:
        is_control = pd.Series(False, index=requests.index)
    frames, missing = [], []
    for control_role, pool in ((False, requests[~is_control]), (True, requests[is_control])):
        sel = cells[(cells["role"] == "control") == control_role]
        if sel.empty:
            continue
        keys = sel[CELL_KEYS + ["role"]].drop_duplicates(CELL_KEYS)
        keys = keys.astype({"rep": "int64", "arm": "int64"})
        got = pool.merge(keys, on=CELL_KEYS, how="inner")
        frames.append(got)
        found = set(got[CELL_KEYS].drop_duplicates().itertuples(index=False, name=None))
        missing += [c for c in sel["cell"] if parse_label(c) not in found]
    if frames:
        rows = pd.concat(frames, ignore_index=True)
    else:
        rows = requests.iloc[0:0].assign(role=pd.Series(dtype=object))
    order = ["target", "run", "rep", "position", "request"]
    rows = rows.sort_values([c for c in order if c in rows], ignore_index=True, kind="stable")
    return rows, missing, others


def list_entries(results: Path, prefix: str | None, out=None) -> int:
    out = out or sys.stdout
    prov_path = results / "provenance.json"
    if not prov_path.is_file():
        print(f"explain: {prov_path} not found", file=sys.stderr)
        return 2
    entries = json.loads(prov_path.read_text(encoding="utf-8")).get("entries", {})
    ids = sorted(i for i in entries if prefix is None or i.startswith(prefix))
    width = max((len(i) for i in ids), default=0)
    for i in ids:
        print(
            f"{i:<{width}}  {entries[i].get('kind', ''):<10}  {entries[i].get('title', '')}",
            file=out,
        )
    return 0 if ids else 2


def main_explain(argv: list[str]) -> int:
    parser = Parser(
        prog="slotbench explain",
        examples=[".venv/bin/slotbench explain --list",
                  ".venv/bin/slotbench explain headline/embedded/arm4/speedup"],
        description=(
            "Print a report entry (table row, number or figure) with its cells, raw files and "
            "the raw request rows behind it, checking each raw file's SHA-256 against the "
            "record. Needs no server. Exit 0: all raw files match; 1: a raw file changed or "
            "is missing; 2: unknown id or no provenance.json."
        ),
    )
    parser.add_argument(
        "id", nargs="?", help="e.g. headline/embedded/arm4/speedup (a unique prefix will do)"
    )
    parser.add_argument(
        "--results", default=experiments.RESULTS,
        help="the experiment: its name or its folder (results/<experiment>); by default the one "
             "experiment results/ holds",
    )
    parser.add_argument(
        "--columns",
        action="extend",
        nargs="+",
        type=lambda s: [c for c in s.split(",") if c],
        help="request columns to print (comma or space separated; default: "
        + ",".join(REQUEST_COLUMNS)
        + ")",
    )
    parser.add_argument("--list", action="store_true", help="list the ids (those starting with ID)")
    args = parser.parse_args(argv)
    try:
        results = experiments.locate(args.results, Path.cwd())
    except ValueError as exc:
        print(f"explain: {exc}", file=sys.stderr)
        return 2
    if args.list:
        return list_entries(results, args.id)
    if not args.id:
        parser.error("give an id, e.g. headline/embedded/arm4/speedup, or --list")
    columns = [c for group in args.columns for c in group] if args.columns else None
    try:
        return explain(args.id, results, columns)
    except BrokenPipeError:  # e.g. piped into head: stop quietly
        sys.stdout = open(os.devnull, "w")
        return 0
