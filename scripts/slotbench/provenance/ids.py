"""Provenance you can audit: every table row, figure and headline number traced to raw cells.

The report names, for each thing it shows, the cells (target, run, rep, arm) behind it, the SHA-256
of each raw file they came from, the pipeline commit and dirty flag and the server build that
produced those cells, and the SHA-256 of the resolved config. Within-rep ratios (speedup,
user_ratio, ttft_ratio, gen_gain, pipelining, efficiency) divide by the serial cell of the same
rep, so their entries name those serial cells too: a number is only auditable with its denominator.
The record is written as results/<experiment>/provenance.json (sorted keys, stable order: the same
inputs give the same bytes), and ``python -m slotbench explain ID`` prints the raw request rows
behind one entry, checking each raw file against its recorded SHA-256 (no server needed). An entry
cites its cells by set, once per role ("all cells of pacer, arm 256", the serial cells of the same
reps), each set named once in the record by rule or, failing one, by id
(slotbench.provenance.cellsets), so the record and the report stay small whatever the number of
cells, and every id still resolves to its cells and their raw files' SHA-256s.

Ids are short paths a person can type: ``headline/<target>/arm<N>/<metric>``,
``positions/<target>/arm<N>``, ``openloop/<target>/arm-<rate × 1000>`` (a rate arm's row),
``integrity/<target>/prompts``, ``figure/<name>`` … (see
:func:`headline_id` and friends).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from slotbench.core.cells import (
    CELL_KEYS,
    SERIAL_ARM,
    arm_name,
    cell_label,
    label_fields,
    label_key,
    parse_label,
)
from slotbench.measure.rawfiles import plain
from slotbench.provenance import cellsets

SCHEMA = "slotbench.provenance/2"
# Ratios taken against the serial cell of the same rep (docs/method.md#within-rep-ratios): their
# cells include it.
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
)
# The HTML page lists an entry's (or a table's) cells and raw files one by one up to this many
# cells; past it, it names the sets they are (provenance.json and explain resolve them).
LIST_LIMIT = 120
CELL_FIELDS = ("position", "raw_file", "raw_sha256", "code_commit", "code_dirty", "server_build")
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


def capacity_id(target) -> str:
    """The capacity curve of a target (per arm: per-user rate, TTFT, aggregate, levels)."""
    return _join("capacity", target)


def telemetry_id(target) -> str:
    """The server's evidence and a token's cost of a target (per arm: batch per decode step,
    queue, joules and dollars per output token)."""
    return _join("telemetry", target)


def openloop_id(target, arm=None, what=None) -> str:
    """The open loop's table of a target, one rate arm's row of it (``openloop/<target>/arm-500``)
    or ``what`` of it, e.g. its capacity in requests/s (``openloop/<target>/capacity``)."""
    return _join("openloop", target, _arm(arm), what)


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


def integrity_id(target, trap=None, *parts) -> str:
    """The measurement-integrity overview of a target, one trap's evidence
    (``integrity/<target>/prompts``) or one row of it (``…/prompts/run1/rep2/arm4/request1``)."""
    return _join("integrity", target, trap, *parts)


# --------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------


class CellIndex:
    """label -> what the cells table records about a cell (raw file, SHA-256, code, server)."""

    def __init__(self, frame=None):
        self.cells: dict[str, dict] = {}
        self._reps: dict[tuple[str, str, int], dict] = {}
        self._labels: dict[tuple, list[str]] = {}
        if frame is None or len(frame) == 0 or not all(k in frame for k in CELL_KEYS):
            return
        for rec in frame.to_dict("records"):
            key = (str(rec["target"]), str(rec["run"]), int(rec["rep"]), int(rec["arm"]))
            info = {"target": key[0], "run": key[1], "rep": key[2], "arm": key[3]}
            info |= {f: plain(rec.get(f)) for f in CELL_FIELDS}
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
        info = label_fields(label)
        same_rep = self._reps.get((info["target"], info["run"], info["rep"]))
        if same_rep is not None:
            info |= {f: same_rep.get(f) for f in CELL_FIELDS if f != "position"}
        return info

    def rep_hash(self, target, run, rep) -> str | None:
        """The SHA-256 of the raw file of one rep, when the cells table records it."""
        return (self._reps.get((str(target), str(run), int(rep))) or {}).get("raw_sha256")

    def targets(self) -> list[str]:
        return sorted({c["target"] for c in self.cells.values()})

    def labels(self, target=None, arm=None, run=None) -> list[str]:
        key = (target, None if arm is None else int(arm), run)
        if key not in self._labels:  # the table never changes: each selection is made once
            self._labels[key] = self._select(*key)
        return list(self._labels[key])

    def _select(self, target, arm, run) -> list[str]:
        out = [
            label
            for label, c in self.cells.items()
            if (target is None or c["target"] == target)
            and (arm is None or c["arm"] == int(arm))
            and (run is None or c["run"] == run)
        ]
        return sorted(out, key=label_key)

    def scope(self, labels) -> str:
        """A few words for a set of cells: "60 cells (all of embedded)", "20 cells (all
        parallel-4 cells of embedded)", "3 cells of embedded", "1 cell: embedded/run1/rep2/arm4"."""
        labels = sorted(set(labels), key=label_key)
        n = len(labels)
        if n == 0:
            return "no cells"
        if n == 1:
            return f"1 cell: {labels[0]}"
        keys = [self.info(label) for label in labels]
        targets = {k["target"] for k in keys}
        if len(targets) > 1:
            return f"{n} cells of {len(targets)} targets"
        target = targets.pop()
        if set(labels) == set(self.labels(target)):
            return f"{n} cells (all of {target})"
        arms = {k["arm"] for k in keys}
        if len(arms) == 1 and None not in arms:
            arm = arms.pop()
            if set(labels) == set(self.labels(target, arm)):
                return f"{n} cells (all {arm_name(arm)} cells of {target})"
        return f"{n} cells of {target}"

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


def _groups(ref: Ref) -> list[tuple[str, list[str]]]:
    """(role, labels) of a Ref's cells, roles in ROLES order."""
    groups: dict[str, list[str]] = {}
    for label, role in ref.cells:
        groups.setdefault(role, []).append(label)
    return sorted(groups.items(), key=lambda rl: (ROLES.index(rl[0]) if rl[0] in ROLES
                                                  else len(ROLES), rl[0]))


def listing(ref: Ref, index: CellIndex) -> tuple[list[dict], list[dict]]:
    """A Ref's cells one by one (cell, target, run, rep, arm, role, raw_sha256) and its raw
    files (path, sha256), as ``cellsets.entry_cells`` / ``entry_raw_files`` resolve them."""
    cells, raw = [], set()
    for label, role in ref.cells:
        info = index.info(label)
        cells.append({"cell": label, **{k: info.get(k) for k in ("target", "run", "rep", "arm")},
                      "role": role, "raw_sha256": info.get("raw_sha256")})
        if info.get("raw_file") is not None or info.get("raw_sha256") is not None:
            raw.add((info.get("raw_file"), info.get("raw_sha256")))
    raw_files = [{"path": p, "sha256": s}
                 for p, s in sorted(raw, key=lambda ps: tuple(map(str, ps)))]
    return cells, raw_files


def make_entry(ref: Ref, index: CellIndex, config_sha256: str | None,
               sets: cellsets.SetNamer) -> dict:
    """One entry: what is shown where, its cells cited by set (one per role), how many cells
    and raw files they are, and the code, server builds and config behind them."""
    infos = {label: index.info(label) for label, _ in ref.cells}
    raw = {(i.get("raw_file"), i.get("raw_sha256")) for i in infos.values()
           if i.get("raw_file") is not None or i.get("raw_sha256") is not None}
    code, builds = _versions_of([i for i in infos.values() if "raw_sha256" in i])
    entry = {
        "id": ref.id,
        "kind": ref.kind,
        "title": ref.title,
        "anchor": ref.anchor or None,
        "parent": ref.parent or None,
        "cells": [{"role": role, "set": sets.name(labels), "n_cells": len(labels)}
                  for role, labels in _groups(ref)],
        "n_cells": len(ref.cells),
        "n_raw_files": len(raw),
        "code": code,
        "server_builds": builds,
        "config_sha256": config_sha256,
    }
    if ref.metric is not None:
        entry["metric"] = {k: plain(v) for k, v in ref.metric.items()}
    if ref.row is not None:
        entry["row"] = dict(ref.row)
    return entry


def entry_view(entry: dict, record: dict, listed: tuple | None) -> dict:
    """An entry as the HTML page shows it: ``roles`` (role -> cells), and either ``cells`` and
    ``raw_files`` listed one by one (``listed``, from :func:`listing`) or ``sets``, the titles
    of the sets it cites."""
    roles: dict[str, int] = {}
    for group in entry["cells"]:
        roles[group["role"]] = roles.get(group["role"], 0) + group["n_cells"]
    view = {**entry, "roles": roles, "cells": None, "raw_files": None, "sets": None}
    if listed is not None:
        return view | {"cells": listed[0], "raw_files": listed[1]}
    sets = record["sets"]
    return view | {"sets": [(g["role"], set_title(sets, g["set"])) for g in entry["cells"]]}


def set_title(sets: dict, set_id: str) -> str:
    """A set in words: its rule's title, or how many cells it lists, with its id."""
    spec = sets[set_id]
    if "title" in spec:
        return f"{spec['title']} ({set_id})"
    return f"{spec['n_cells']:,} cells ({set_id})"


def build_record(refs: list[Ref], index: CellIndex, config_sha256: str | None) -> dict:
    """The provenance record: every entry by id, citing its cells by set; the sets; every rep
    of the cells table (raw file, SHA-256, versions, its arms' positions); the config digest."""
    entries: dict[str, dict] = {}
    sets = cellsets.SetNamer(index)
    for ref in refs:
        if ref.id in entries:
            raise ValueError(f"provenance: the id {ref.id!r} is used twice in the report")
        entries[ref.id] = make_entry(ref, index, config_sha256, sets)
    children: dict[str, list[str]] = {}
    for ref in refs:
        if ref.parent:
            children.setdefault(ref.parent, []).append(ref.id)
    for parent, kids in children.items():
        if parent in entries:
            entries[parent]["children"] = kids
    return {
        "schema": SCHEMA,
        "config_sha256": config_sha256,
        "reps": cellsets.reps_record(index),
        "sets": sets.sets,
        "entries": entries,
    }


def dumps(record: dict) -> str:
    """Stable bytes: sorted keys, fixed indentation, a final newline."""
    return json.dumps(record, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def write_record(record: dict, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(record), encoding="utf-8")


