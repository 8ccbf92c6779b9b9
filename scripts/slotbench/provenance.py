"""Provenance you can audit: every table row, figure and headline number traced to raw cells.

The report names, for each thing it shows, the cells (target, run, rep, arm) behind it, the
SHA-256 of each raw file they came from, the pipeline commit and dirty flag and the server build
that produced those cells, and the SHA-256 of the resolved config. Within-rep ratios (speedup,
user_ratio, ttft_ratio, gen_gain, pipelining, efficiency) divide by the serial cell of the same
rep, so their entries name those serial cells too: a number is only auditable with its
denominator. The record is written as results/provenance.json (sorted keys, stable order: the
same inputs give the same bytes), and ``python -m slotbench explain ID`` prints the raw request
rows behind one entry, checking each raw file against its recorded SHA-256 (no server needed).

Ids are short paths a person can type: ``headline/<target>/arm<N>/<metric>``,
``positions/<target>/arm<N>``, ``integrity/<target>/prompts``, ``figure/<name>`` … (see
:func:`headline_id` and friends).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from slotbench.cells import CELL_KEYS, cell_label

SCHEMA = "slotbench.provenance/1"
SERIAL_ARM = 1
# Ratios taken against the serial cell of the same rep (method rule 4): their cells include it.
WITHIN_REP = ("speedup", "efficiency", "user_ratio", "ttft_ratio", "gen_gain", "pipelining")
ABSOLUTE = ("agg_tps", "user_tps", "ttft_s")
# How each headline metric is described when explained on its own.
METRIC_TITLES = {
    "agg_tps": "aggregate tok/s (tokens over the cell's wall clock), median across reps",
    "user_tps": "per-user tok/s (median request's tokens over its generation time), median "
    "across reps",
    "ttft_s": "time to first token in seconds (median request of the cell), median across reps",
    "speedup": "speedup: aggregate tok/s over serial-1's in the same rep, median across reps",
    "efficiency": "efficiency: speedup / concurrency",
    "user_ratio": "per-user change: per-user tok/s over serial-1's in the same rep, median "
    "across reps",
    "ttft_ratio": "TTFT ratio: time to first token over serial-1's in the same rep, median "
    "across reps",
    "gen_gain": "gen_gain: per-user tok/s × concurrency over serial-1's per-user tok/s in the "
    "same rep, median across reps (batching)",
    "pipelining": "pipelining: speedup / gen_gain in the same rep, median across reps (overlap)",
}
# Roles of a cell in an entry: what the number describes, or what it is compared against.
# control: a control-arm cell (shared prompt, cache allowed), never part of the headline;
# burst / plateau: the first and last serial cells of the drift check.
ROLES = (
    "arm", "deviant", "source", "control", "burst", "plateau", "serial-baseline", "comparison",
)  # fmt: skip
CELL_FIELDS = ("position", "raw_file", "raw_sha256", "code_commit", "code_dirty", "server_build")
REQUEST_COLUMNS = [
    "target", "run", "rep", "arm", "position", "request", "prompt_tokens", "output_tokens",
    "t_sent_s", "t_first_s", "t_done_s", "gen_s", "done_reason", "raw_file",
]  # fmt: skip
CELL_METRICS = ["tokens_out", "wall_s", "agg_tps", "user_tps", "ttft_s"]
MAX_CANDIDATES = 20


def config_digest(cfg) -> str:
    """SHA-256 of the resolved config: the same settings give the same digest, whatever the
    key order of the YAML files they came from."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Ids
# --------------------------------------------------------------------------------------------


def _join(*parts) -> str:
    return "/".join(str(p) for p in parts if p is not None and p != "")


def _arm(arm) -> str | None:
    return None if arm is None else f"arm{int(arm)}"


def headline_id(target, arm=None, metric=None) -> str:
    """The per-arm results table, one of its rows, or one number in that row."""
    return _join("headline", target, _arm(arm), metric)


def rotation_id(target) -> str:
    return _join("rotation", target)


def positions_id(target, arm, position=None) -> str:
    return _join(
        "positions", target, _arm(arm), None if position is None else f"position{position}"
    )


def deviance_id(target, cell: str | None = None) -> str:
    """The deviance list of a target, or one deviant cell (…/run1/rep2/arm4)."""
    return _join("deviance", target if cell is None else cell)


def serialisation_id(target, arm=None) -> str:
    return _join("serialisation", target, _arm(arm))


def figure_id(name) -> str:
    return _join("figure", name)


def fingerprint_id(target, run) -> str:
    return _join("fingerprint", target, run)


def ollama_id(target, what) -> str:
    """An Ollama table of a target: its facts per run (``what`` = run) or ``ps`` snapshots."""
    return _join("ollama", target, what)


INTEGRITY_TRAPS = ("prompts", "cache", "control", "thermal", "burst", "client", "sufficiency")


def integrity_id(target, trap=None, *parts) -> str:
    """The measurement-integrity overview of a target, one trap's evidence
    (``integrity/<target>/prompts``) or one row of it (``…/prompts/run1/rep2/arm4/request1``)."""
    if trap is not None and trap not in INTEGRITY_TRAPS:
        raise ValueError(f"unknown integrity trap {trap!r}; one of {', '.join(INTEGRITY_TRAPS)}")
    return _join("integrity", target, trap, *parts)


# --------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------


def parse_label(label: str) -> tuple[str, str, int, int]:
    """target, run, rep, arm of a cell label (target/run/repN/armM)."""
    target, run, rep, arm = str(label).rsplit("/", 3)
    return target, run, int(rep.removeprefix("rep")), int(arm.removeprefix("arm"))


_REP_LABEL = re.compile(r"^([A-Za-z0-9_-]+)/([A-Za-z0-9_-]+)/rep(\d+)/(.+)$")


def rep_of(label: str) -> tuple[str, str, int] | None:
    """target, run, rep of any label that names a rep (target/run/repN/…), e.g. a control
    cell's, whatever follows the rep; None when the label names none."""
    match = _REP_LABEL.match(str(label))
    return None if match is None else (match.group(1), match.group(2), int(match.group(3)))


def is_measured_label(label: str) -> bool:
    """Whether a label is a measured cell's (target/run/repN/armM), which requests.parquet keys."""
    try:
        parse_label(label)
    except ValueError:
        return False
    return True


def label_key(label: str) -> tuple:
    try:
        return parse_label(label)
    except ValueError:
        return (str(label), "", -1, -1)


def _plain(value):
    """JSON-ready scalar: numpy and pandas scalars as Python ones, NaN/NA as None."""
    if value is None:
        return None
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


class CellIndex:
    """label -> what the cells table records about a cell (raw file, SHA-256, code, server)."""

    def __init__(self, frame=None):
        self.cells: dict[str, dict] = {}
        self._reps: dict[tuple[str, str, int], dict] = {}
        if frame is None or len(frame) == 0 or not all(k in frame for k in CELL_KEYS):
            return
        for rec in frame.to_dict("records"):
            key = (str(rec["target"]), str(rec["run"]), int(rec["rep"]), int(rec["arm"]))
            info = {"target": key[0], "run": key[1], "rep": key[2], "arm": key[3]}
            info |= {f: _plain(rec.get(f)) for f in CELL_FIELDS}
            self.cells[cell_label(*key)] = info
        for label in sorted(self.cells, key=label_key):  # first cell of each rep, stably
            c = self.cells[label]
            self._reps.setdefault((c["target"], c["run"], c["rep"]), c)

    def __bool__(self) -> bool:
        return bool(self.cells)

    def info(self, label: str) -> dict:
        """What is recorded about a cell. A label the cells table does not hold but whose rep
        it does (a control cell, say) shares that rep's raw file, code and server build."""
        if label in self.cells:
            return self.cells[label]
        try:
            target, run, rep, arm = parse_label(label)
        except ValueError:
            rep_key = rep_of(label)
            if rep_key is None:
                return {"target": None, "run": None, "rep": None, "arm": None}
            (target, run, rep), arm = rep_key, None
        info = {"target": target, "run": run, "rep": rep, "arm": arm}
        same_rep = self._reps.get((target, run, rep))
        if same_rep is not None:
            info |= {f: same_rep.get(f) for f in CELL_FIELDS if f != "position"}
        return info

    def rep_hash(self, target, run, rep) -> str | None:
        """The SHA-256 of the raw file of one rep, when the cells table records it."""
        return (self._reps.get((str(target), str(run), int(rep))) or {}).get("raw_sha256")

    def labels(self, target=None, arm=None, run=None) -> list[str]:
        out = [
            label
            for label, c in self.cells.items()
            if (target is None or c["target"] == target)
            and (arm is None or c["arm"] == int(arm))
            and (run is None or c["run"] == run)
        ]
        return sorted(out, key=label_key)

    def serial_baseline(self, labels) -> list[str]:
        """The serial cells of the reps the given cells belong to (their ratios' denominators)."""
        reps = {parse_label(label)[:3] for label in labels}
        out = [
            label
            for label, c in self.cells.items()
            if c["arm"] == SERIAL_ARM and (c["target"], c["run"], c["rep"]) in reps
        ]
        return sorted(set(out) - set(labels), key=label_key)


# --------------------------------------------------------------------------------------------
# References (made by the report next to each table and figure) and the record
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """One provenance entry as the report knows it: what is shown where, and from which cells.

    kind: "table", "table-row", "table-cell" (one number) or "figure". anchor: the id of the
    HTML element that shows it. cells: (label, role) pairs. metric: name, value, ci_low,
    ci_high and text (as printed) of the number a table-cell supports. row: column -> text of a
    table row as printed.
    """

    id: str
    kind: str
    title: str
    cells: tuple[tuple[str, str], ...]
    anchor: str = ""
    parent: str = ""
    metric: dict | None = None
    row: dict | None = None


def with_each_role(*groups: tuple[list[str], str]) -> tuple[tuple[str, str], ...]:
    """Like :func:`with_roles`, but a label may appear once in each role: a control cell can
    share its label with the measured cell of the same rep and arm, and both belong to it."""
    pairs = {(str(label), role) for labels, role in groups for label in labels}
    return tuple(sorted(pairs, key=lambda kv: (label_key(kv[0]), kv[1])))


def with_roles(*groups: tuple[list[str], str]) -> tuple[tuple[str, str], ...]:
    """(label, role) pairs from (labels, role) groups; a cell keeps the first role it gets."""
    seen: dict[str, str] = {}
    for labels, role in groups:
        for label in labels:
            seen.setdefault(str(label), role)
    return tuple(sorted(seen.items(), key=lambda kv: label_key(kv[0])))


def metric_cells(index: CellIndex, target, arm, metric, fallback=()) -> tuple:
    """The cells behind one headline number: the arm's cells, plus, for a within-rep ratio, the
    serial cells of the same reps."""
    arm_cells = index.labels(target, arm) if index else sorted(fallback, key=label_key)
    groups = [(arm_cells, "arm")]
    if metric in WITHIN_REP and int(arm) != SERIAL_ARM and index:
        groups.append((index.serial_baseline(arm_cells), "serial-baseline"))
    return with_roles(*groups)


def _versions_of(cells: list[dict]) -> tuple[list[dict], list[str]]:
    code = {(c.get("code_commit"), c.get("code_dirty")) for c in cells}
    code_list = [
        {"commit": commit, "dirty": dirty}
        for commit, dirty in sorted(code, key=lambda cd: (str(cd[0]), str(cd[1])))
    ]
    builds = sorted({str(c["server_build"]) for c in cells if c.get("server_build") is not None})
    return code_list, builds


def make_entry(ref: Ref, index: CellIndex, config_sha256: str | None) -> dict:
    cells, infos = [], []
    for label, role in ref.cells:
        info = index.info(label)
        infos.append(info)
        cells.append(
            {
                "cell": label,
                "target": info.get("target"),
                "run": info.get("run"),
                "rep": info.get("rep"),
                "arm": info.get("arm"),
                "role": role,
                "raw_sha256": info.get("raw_sha256"),
            }
        )
    raw = {
        (i.get("raw_file"), i.get("raw_sha256"))
        for i in infos
        if i.get("raw_file") is not None or i.get("raw_sha256") is not None
    }
    code, builds = _versions_of([i for i in infos if "raw_sha256" in i])
    entry = {
        "id": ref.id,
        "kind": ref.kind,
        "title": ref.title,
        "anchor": ref.anchor or None,
        "parent": ref.parent or None,
        "cells": cells,
        "raw_files": [
            {"path": p, "sha256": s} for p, s in sorted(raw, key=lambda ps: tuple(map(str, ps)))
        ],
        "code": code,
        "server_builds": builds,
        "config_sha256": config_sha256,
    }
    if ref.metric is not None:
        entry["metric"] = {k: _plain(v) for k, v in ref.metric.items()}
    if ref.row is not None:
        entry["row"] = dict(ref.row)
    return entry


def build_record(refs: list[Ref], index: CellIndex, config_sha256: str | None) -> dict:
    """The provenance record: every entry by id, the cells they name, the config digest."""
    entries: dict[str, dict] = {}
    for ref in refs:
        if ref.id in entries:
            raise ValueError(f"provenance: the id {ref.id!r} is used twice in the report")
        entries[ref.id] = make_entry(ref, index, config_sha256)
    children: dict[str, list[str]] = {}
    for ref in refs:
        if ref.parent:
            children.setdefault(ref.parent, []).append(ref.id)
    for parent, kids in children.items():
        if parent in entries:
            entries[parent]["children"] = kids
    used = sorted({c["cell"] for e in entries.values() for c in e["cells"]}, key=label_key)
    return {
        "schema": SCHEMA,
        "config_sha256": config_sha256,
        "cells": {label: index.info(label) for label in used},
        "entries": entries,
    }


def dumps(record: dict) -> str:
    """Stable bytes: sorted keys, fixed indentation, a final newline."""
    return json.dumps(record, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def write_record(record: dict, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(record), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Code and server versions behind a target's cells (the report's per-target note)
# --------------------------------------------------------------------------------------------


def version_groups(index: CellIndex, target) -> tuple[dict, dict]:
    """(code, server): version -> sorted (run, rep) pairs whose cells it produced.

    code versions are (commit, dirty) pairs: the same commit with and without local changes is
    two versions. Empty dicts when the cells table records neither.
    """
    code: dict[tuple, set] = {}
    server: dict[str, set] = {}
    for label in index.labels(target):
        c = index.cells[label]
        if "code_commit" in c and (c["code_commit"] is not None or c["code_dirty"] is not None):
            code.setdefault((c["code_commit"], c["code_dirty"]), set()).add((c["run"], c["rep"]))
        if c.get("server_build") is not None:
            server.setdefault(str(c["server_build"]), set()).add((c["run"], c["rep"]))
    return (
        {k: sorted(v) for k, v in sorted(code.items(), key=lambda kv: (str(kv[0]), ""))},
        {k: sorted(v) for k, v in sorted(server.items())},
    )


def reps_text(pairs: list[tuple[str, int]]) -> str:
    """run1 reps 1–3, 5; run2 rep 2: which runs and reps, with consecutive reps as ranges."""
    by_run: dict[str, list[int]] = {}
    for run, rep in pairs:
        by_run.setdefault(str(run), []).append(int(rep))
    parts = []
    for run in sorted(by_run, key=lambda r: (len(r), r)):
        reps = sorted(set(by_run[run]))
        spans, start, prev = [], reps[0], reps[0]
        for cur in reps[1:] + [None]:
            if cur is not None and cur == prev + 1:
                prev = cur
                continue
            spans.append(str(start) if start == prev else f"{start}\u2013{prev}")
            start = prev = cur
        parts.append(f"{run} rep{'s' if len(reps) > 1 else ''} {', '.join(spans)}")
    return "; ".join(parts)


def code_text(commit, dirty) -> str:
    state = {True: "dirty", False: "clean"}.get(dirty, "dirty state unknown")
    return f"commit {commit if commit is not None else 'unknown'} ({state})"


# --------------------------------------------------------------------------------------------
# explain: the raw request rows behind one entry
# --------------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_raw(path: str, results: Path) -> Path | None:
    """A recorded raw-file path as it is found now. Recorded paths are relative to the
    directory the pipeline ran in, which is the results directory's parent (not necessarily
    the current directory: a file of the same name there may be another run's)."""
    p = Path(path)
    candidates = [p] if p.is_absolute() else [results.parent / p, results / p]
    return next((c for c in candidates if c.is_file()), None)


def verify_raw(entry: dict, results: Path) -> list[dict]:
    """Each raw file of an entry with its status now: OK, MISMATCH or MISSING."""
    out = []
    for raw in entry.get("raw_files", []):
        found = resolve_raw(raw["path"], results) if raw.get("path") is not None else None
        if found is None:
            out.append({**raw, "status": "MISSING", "now": None, "found": None})
            continue
        now = _sha256(found)
        status = "OK" if now == raw.get("sha256") else "MISMATCH"
        out.append({**raw, "status": status, "now": now, "found": str(found)})
    return out


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


def _arm_name(arm) -> str:
    arm = int(arm)
    return f"serial-{arm}" if arm == SERIAL_ARM else f"parallel-{arm}"


def _print_frame(frame, out) -> None:
    import pandas as pd

    with pd.option_context("display.max_colwidth", None, "display.width", None):
        text = frame.to_string(index=False, float_format=lambda x: f"{x:.3f}")
    print("\n".join("  " + line for line in text.splitlines()), file=out)


def per_rep_values(name: str, cells, measured):
    """A headline number's value in each rep, recomputed from cells.parquet the way analyse
    does (None when the metric is not a headline metric or the cells do not allow it)."""
    from slotbench.analyse import cell_ratios

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
        f"{values[name].median():.4g}):",
        file=out,
    )
    _print_frame(values, out)


def explain(entry_id: str, results: Path, columns: list[str] | None = None, out=None) -> int:
    """Print one entry and the raw requests behind it; 0 when every raw file still matches."""
    import pandas as pd

    out = out or sys.stdout
    prov_path = results / "provenance.json"
    if not prov_path.is_file():
        print(
            f"explain: {prov_path} not found; run the pipeline (snakemake --cores 1) or point "
            "--results at a results directory",
            file=sys.stderr,
        )
        return 2
    record = json.loads(prov_path.read_text(encoding="utf-8"))
    entries = record.get("entries", {})
    found, candidates = find_entry(entries, entry_id)
    if found is None:
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
    entry = entries[found]
    status = 0

    print(f"{found}  ({entry.get('kind')})", file=out)
    print(f"  {entry.get('title', '')}", file=out)
    metric = entry.get("metric")
    if metric:
        value = metric.get("value")
        interval = ""
        if metric.get("ci_low") is not None and metric.get("ci_high") is not None:
            interval = f", 95% interval {metric['ci_low']:.4g} to {metric['ci_high']:.4g}"
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
    if not cells.empty:
        details = record.get("cells", {})
        for f in ("position", "code_commit", "code_dirty", "server_build"):
            cells[f] = [details.get(c, {}).get(f) for c in cells["cell"]]
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
        if metric and measured is not None:
            _print_per_rep(metric, cells, measured, out)

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

    req_path = results / "requests.parquet"
    if not req_path.is_file():
        print(f"\nrequests: {req_path} not found", file=out)
        return 1
    requests = pd.read_parquet(req_path)
    wanted = columns or REQUEST_COLUMNS
    unknown = [c for c in wanted if c not in requests and c != "role"]
    if unknown:
        print(
            f"explain: no column {', '.join(unknown)} in {req_path}; columns: "
            + ", ".join(requests.columns),
            file=sys.stderr,
        )
        return 2
    if cells.empty:
        print("\nrequests (0)", file=out)
        return status
    rows, missing, others = entry_requests(cells, requests)
    arms = ", ".join(
        f"{n} of {_arm_name(arm)}"
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
    if status:
        print("\nexplain: some raw data no longer matches the record (see above)", file=out)
    return status


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
    parser = argparse.ArgumentParser(
        prog="python -m slotbench explain",
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
    parser.add_argument("--results", default="results", help="results directory (default: results)")
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
    results = Path(args.results)
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
