"""The checks layer: one module per trap, each turning the tables into verdict records.

A trap module defines ``TRAP`` (its id and file name), ``TITLE``, ``ORDER`` (its place in the
traps table), ``TABLES`` (the detail CSVs it writes) and ``check(tables, settings)``, which
returns one :class:`~slotbench.checks.base.Verdict` per target it applies to and the detail
tables. A module that can judge a target from all of its cells and requests, those kept out of
the headline too, says ``ALL_CELLS = True``; every other module reads the targets that have
cells behind the headline, and a target with none gets its "not assessable" verdict, unless
the module's ``applies(tables, target)`` says the trap does not apply to it (no rate arm, not
an Ollama target).
Modules are found by looking in this package, so adding a trap means adding one module
here (and, if it needs one, a detail renderer in ``slotbench/report/details/``); nothing else
changes. ``decision`` turns the verdicts into each target's headline decision.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import pandas as pd

from slotbench.checks.base import Tables, Verdict, no_cells_behind_headline
from slotbench.checks.decision import headline_decision

# Its modules are found by looking (slotbench.core.code follows them as a rule's code).
DISCOVERED = True
# Modules of this package that are not traps.
INFRASTRUCTURE = {"base", "decision", "stopping"}


def trap_modules() -> list:
    """Every trap module of this package, in traps-table order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in INFRASTRUCTURE or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "TRAP"):
            found.append(module)
    return sorted(found, key=lambda m: (m.ORDER, m.TRAP))


def run_checks(tables: Tables, settings: dict) -> tuple[list[Verdict], dict[str, pd.DataFrame]]:
    """Every trap's verdicts (traps-table order) and detail tables."""
    verdicts, details = [], {}
    headline = tables.behind_headline()
    lost = [t for t in tables.targets if t not in headline.targets]
    for module in trap_modules():
        everything = getattr(module, "ALL_CELLS", False)
        found, written = module.check(tables if everything else headline, settings)
        if not everything:
            applies = getattr(module, "applies", lambda tables, target: True)
            found += [no_cells_behind_headline(module.TRAP, module.TITLE, t) for t in lost
                      if applies(tables, t)]
        if set(written) != set(module.TABLES):
            raise RuntimeError(
                f"check {module.TRAP} wrote tables {sorted(written)}, but declares "
                f"{sorted(module.TABLES)} in TABLES"
            )
        for verdict in found:
            verdict.order = module.ORDER
        verdicts += found
        details |= written
    return verdicts, details


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n",
                    encoding="utf-8")


def write_checks(outdir, verdicts: list[Verdict], details: dict[str, pd.DataFrame]) -> dict:
    """results/<experiment>/checks/: <trap>.json (its verdict records), the detail CSVs,
    headline.json."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    by_trap: dict[str, list[dict]] = {m.TRAP: [] for m in trap_modules()}
    for verdict in verdicts:
        by_trap.setdefault(verdict.trap, []).append(verdict.record())
    for trap, recs in by_trap.items():
        write_json(outdir / f"{trap}.json", recs)
    for name, frame in details.items():
        frame.to_csv(outdir / f"{name}.csv", index=False)
    decision = headline_decision([v.record() for v in verdicts])
    write_json(outdir / "headline.json", decision)
    return decision


def read_verdicts(checks_dir) -> list[dict]:
    """Every verdict record in a checks directory, in traps-table order."""
    found = []
    for path in sorted(Path(checks_dir).glob("*.json")):
        if path.name == "headline.json":
            continue
        found += json.loads(path.read_text(encoding="utf-8"))
    return sorted(found, key=lambda r: (r["order"], r["trap"], r["target"]))


__all__ = ["Tables", "Verdict", "trap_modules", "run_checks", "write_checks", "read_verdicts"]
