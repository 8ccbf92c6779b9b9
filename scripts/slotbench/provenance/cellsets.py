"""Sets of cells named once in provenance.json, by rule where a rule says it, else by id.

An entry of the provenance record does not list its cells: it cites, for each role, a set
(``{"role": "arm", "set": "target:pacer/arm:256", "n_cells": 1471}``). A set is one of

- a rule over the cells table: every cell of a target (``target:pacer``), of one of its runs
  (``target:pacer/run:run1``), of one arm (``target:pacer/arm:256``) or of one arm in one run,
  optionally but a few named cells (``…/except:<digest>``, e.g. a deviant cell's comparison
  cells: all of its arm but itself); ``all`` is every cell;
- a union of such sets (a figure of two arms of every target);
- an explicit list of labels (``cells:<digest>``), stored once however many entries cite it.

The record's ``reps`` maps every rep of the cells table (``target/run/repN``) to its raw file,
SHA-256, code version, server build and the position of each of its arms, so a rule is resolved
against the same cells the report had, and a cell's raw file and hash are found from its label.
:func:`set_labels`, :func:`entry_cells` and :func:`entry_raw_files` resolve a set or an entry
down to its cells and raw-file hashes (``python -m slotbench explain`` uses them), so the record
stays small whatever the run's size and every id still resolves to its cells and hashes.
"""

from __future__ import annotations

import hashlib

from slotbench.core.cells import arm_name, label_fields, label_key

RULE_KEYS = ("target", "run", "arm", "position")
REP_FIELDS = ("raw_file", "raw_sha256", "code_commit", "code_dirty", "server_build")
# A subset of a rule's cells is cited as the rule "except" these cells while they are at most
# this many (and fewer than half of it); past that it is listed.
MAX_EXCEPT = 32


def _digest(labels) -> str:
    return hashlib.sha256("\n".join(labels).encode()).hexdigest()[:16]


def rule_id(rule: dict) -> str:
    """``all``, ``target:T``, ``target:T/run:R``, ``target:T/arm:A``, ``target:T/run:R/arm:A``,
    ``target:T/arm:A/position:P``, and ``/except:<digest>`` when the rule leaves cells out."""
    parts = [f"{k}:{rule[k]}" for k in RULE_KEYS if rule.get(k) is not None]
    if rule.get("except"):
        parts.append(f"except:{_digest(rule['except'])}")
    return "/".join(parts) or "all"


def rule_title(rule: dict, n: int) -> str:
    """"all 1,471 cells of pacer, arm 256 (parallel-256)", "… but 1 named cell"."""
    where = [f"of {rule['target']}"] if rule.get("target") is not None else []
    if rule.get("run") is not None:
        where.append(f"run {rule['run']}")
    if rule.get("arm") is not None:
        where.append(f"arm {rule['arm']} ({arm_name(rule['arm'])})")
    if rule.get("position") is not None:
        where.append(f"at position {rule['position']}")
    text = f"all {n + len(rule.get('except') or ()):,} cells " + ", ".join(where)
    if rule.get("except"):
        text += f" but {len(rule['except'])} named cell{'s' * (len(rule['except']) != 1)}"
    return text.rstrip()


class SetNamer:
    """Names sets of labels against a CellIndex, each set once: ``name(labels)`` -> set id;
    ``sets`` is what the record stores."""

    def __init__(self, index):
        self.index = index
        self.sets: dict[str, dict] = {}
        self._named: dict[tuple, str] = {}
        self._rules: dict[tuple, frozenset] | None = None

    def _rule_sets(self) -> dict[tuple, frozenset]:
        """(target, run, arm, position) with None for "any" -> the labels of the cells table
        it covers."""
        if self._rules is None:
            rules: dict[tuple, set] = {(None,) * 4: set()}
            for label, c in self.index.cells.items():
                t, r, a, p = c["target"], c["run"], c["arm"], c.get("position")
                for key in ((None,) * 4, (t, None, None, None), (t, r, None, None),
                            (t, None, a, None), (t, r, a, None), (t, None, a, p)):
                    rules.setdefault(key, set()).add(label)
            self._rules = {k: frozenset(v) for k, v in rules.items()}
        return self._rules

    def name(self, labels) -> str:
        key = tuple(sorted(set(map(str, labels)), key=label_key))
        if key not in self._named:
            self._named[key] = self._name(key)
        return self._named[key]

    def _store(self, set_id: str, spec: dict) -> str:
        self.sets.setdefault(set_id, spec)
        return set_id

    def _listed(self, key: tuple) -> str:
        return self._store(f"cells:{_digest(key)}", {"cells": list(key), "n_cells": len(key)})

    def _name(self, key: tuple) -> str:
        rules, wanted = self._rule_sets(), frozenset(key)
        if not key or not wanted <= rules[(None,) * 4]:
            return self._listed(key)  # none, or cells the cells table does not hold
        runs = {(self.index.cells[k]["target"], self.index.cells[k]["run"]) for k in key}
        whole = [(None,) * 4] + [(t, None, None, None) for t in {t for t, _ in runs}]
        for rule in whole + ([(*runs.pop(), None, None)] if len(runs) == 1 else []):
            if rules.get(rule) == wanted:
                return self._rule(rule, ())
        parts: dict[tuple, list[str]] = {}
        for label in key:
            c = self.index.cells[label]
            parts.setdefault((c["target"], c["arm"]), []).append(label)
        names = [self._part(t, a, labels) for (t, a), labels in parts.items()]
        if len(names) == 1:
            return names[0]
        return self._store("union:" + _digest(sorted(names)),
                           {"union": sorted(names), "n_cells": len(key)})

    def _part(self, target, arm, labels: list[str]) -> str:
        """The cells of one target and arm: a rule (all of the arm, of it in one run or at one
        position, or either but a few cells), else a list."""
        rules, wanted = self._rule_sets(), frozenset(labels)
        runs = {self.index.cells[label]["run"] for label in labels}
        places = {self.index.cells[label].get("position") for label in labels}
        candidates = [(target, None, arm, None)]
        candidates += [(target, runs.pop(), arm, None)] if len(runs) == 1 else []
        candidates += [(target, None, arm, places.pop())] if len(places) == 1 else []
        for rule in candidates:
            full = rules.get(rule, frozenset())
            if full == wanted:
                return self._rule(rule, ())
            left_out = full - wanted
            if wanted <= full and len(left_out) <= min(MAX_EXCEPT, len(full) // 2):
                return self._rule(rule, tuple(sorted(left_out, key=label_key)))
        return self._listed(tuple(labels))

    def _rule(self, rule: tuple, left_out: tuple) -> str:
        spec = {k: v for k, v in zip(RULE_KEYS, rule) if v is not None}
        if left_out:
            spec["except"] = list(left_out)
        n = len(self._rule_sets()[rule]) - len(left_out)
        return self._store(rule_id(spec), {"rule": spec, "n_cells": n,
                                           "title": rule_title(spec, n)})


# --------------------------------------------------------------------------------------------
# The record's reps, and resolving sets and entries from the record alone
# --------------------------------------------------------------------------------------------


def reps_record(index) -> dict:
    """``target/run/repN`` -> the rep's raw file, SHA-256, code, server build and ``positions``
    (arm -> position) of every cell of the cells table; a cell whose own raw file or versions
    differ from its rep's first cell keeps them under ``cells``."""
    reps: dict[str, dict] = {}
    for label in sorted(index.cells, key=label_key):
        c = index.cells[label]
        rep = reps.setdefault(f"{c['target']}/{c['run']}/rep{c['rep']}",
                              {**{f: c.get(f) for f in REP_FIELDS}, "positions": {}})
        rep["positions"][str(c["arm"])] = c.get("position")
        own = {f: c.get(f) for f in REP_FIELDS if c.get(f) != rep[f]}
        if own:
            rep.setdefault("cells", {})[str(c["arm"])] = own
    return reps


def cell_info(record: dict, label: str) -> dict:
    """What the record says of a cell (as CellIndex.info does): target, run, rep, arm, position
    and its rep's raw file, SHA-256, code and server build."""
    info = label_fields(label)
    if info["target"] is None:
        return info
    arm = info["arm"]
    held = (record.get("reps") or {}).get(f"{info['target']}/{info['run']}/rep{info['rep']}")
    if held is None:
        return info
    info |= {f: held.get(f) for f in REP_FIELDS}
    if arm is not None and str(arm) in held["positions"]:
        info["position"] = held["positions"][str(arm)]
        info |= (held.get("cells") or {}).get(str(arm), {})
    return info


def _rule_labels(record: dict, rule: dict) -> list[str]:
    out = []
    for rep_label, rep in (record.get("reps") or {}).items():
        target, run, _rep = rep_label.rsplit("/", 2)
        if rule.get("target") not in (None, target) or rule.get("run") not in (None, run):
            continue
        for arm, position in rep["positions"].items():
            if rule.get("arm") is not None and int(arm) != int(rule["arm"]):
                continue
            if rule.get("position") is not None and position != rule["position"]:
                continue
            out.append(f"{rep_label}/arm{arm}")
    left_out = set(rule.get("except") or ())
    return sorted((x for x in out if x not in left_out), key=label_key)


def set_labels(record: dict, set_id: str) -> list[str]:
    """The labels of a set of the record, sorted (rep2 before rep10)."""
    spec = record["sets"][set_id]
    if "cells" in spec:
        return list(spec["cells"])
    if "union" in spec:
        found = {label for part in spec["union"] for label in set_labels(record, part)}
        return sorted(found, key=label_key)
    return _rule_labels(record, spec["rule"])


def entry_cells(record: dict, entry: dict) -> list[dict]:
    """Every cell an entry cites, one per (cell, role), sorted: cell, target, run, rep, arm,
    role and its raw file's SHA-256."""
    pairs = {(label, group["role"]) for group in entry.get("cells", [])
             for label in set_labels(record, group["set"])}
    out = []
    for label, role in sorted(pairs, key=lambda lr: (label_key(lr[0]), lr[1])):
        info = cell_info(record, label)
        out.append({"cell": label, **{k: info.get(k) for k in ("target", "run", "rep", "arm")},
                    "role": role, "raw_sha256": info.get("raw_sha256")})
    return out


def entry_raw_files(record: dict, entry: dict) -> list[dict]:
    """The raw files (path and SHA-256 as recorded) behind an entry's cells, sorted."""
    raw = set()
    for label in {c["cell"] for c in entry_cells(record, entry)}:
        info = cell_info(record, label)
        if info.get("raw_file") is not None or info.get("raw_sha256") is not None:
            raw.add((info.get("raw_file"), info.get("raw_sha256")))
    return [{"path": p, "sha256": s} for p, s in sorted(raw, key=lambda ps: tuple(map(str, ps)))]


def expand(record: dict) -> dict:
    """The record with every entry's cells and raw files listed one by one (what explain
    prints; the record itself cites them by set)."""
    entries = {eid: {**e, "cells": entry_cells(record, e), "raw_files": entry_raw_files(record, e)}
               for eid, e in record.get("entries", {}).items()}
    return {**record, "entries": entries}
