"""What every check reads (Tables) and writes (Verdict): one shape for every trap.

A verdict record says, for one trap and one target: whether the check could look at all
(``assessable``), whether the trap fired, the verdict in words, the threshold and the config
key that sets it, the evidence numbers, the cells behind it and one sentence. ``effect`` says
what the verdict does to the headline now: "refuse" (no headline), "provisional" (a headline
marked provisional), "exclude" (the verdict's arms get no headline), "warn" (a warning before
the headline), "none" (a quiet check). The report
renders any list of them without knowing the trap.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from slotbench.core.cells import cell_labels
from slotbench.measure import rawfiles
from slotbench.tables.consolidate import headline_cells

EFFECTS = ("none", "warn", "exclude", "provisional", "refuse")
VERDICT_SCHEMA = "slotbench.verdict/1"


@dataclass
class Verdict:
    trap: str
    title: str
    target: str
    assessable: bool
    fired: bool
    verdict: str  # the verdict in words: "no", "yes", "position bias", "not assessable", …
    summary: str  # the traps table's one-line evidence
    sentence: str
    threshold: float | None = None
    config_key: str | None = None
    evidence: dict = field(default_factory=dict)
    cells: list[str] = field(default_factory=list)
    effect: str = "none"
    arms: list[int] = field(default_factory=list)  # the arms the verdict concerns, if any
    order: int = 0

    def __post_init__(self) -> None:
        if self.effect not in EFFECTS:
            raise ValueError(f"verdict {self.trap}: effect {self.effect!r} is not one of {EFFECTS}")

    def record(self) -> dict:
        """Plain JSON: NaN and numpy scalars become None and Python numbers."""
        return plain(asdict(self) | {"schema": VERDICT_SCHEMA})


def plain(value):
    """JSON-ready copy (rawfiles.plain): NaN/NA -> None, numpy scalars -> Python, tuples ->
    lists, every key a string."""
    return rawfiles.plain(value, key=str)


def records(frame: pd.DataFrame) -> list[dict]:
    """A detail table as plain JSON rows."""
    return plain(frame.to_dict("records")) if frame is not None and not frame.empty else []


@dataclass
class Tables:
    """Everything a check may read. Measured cells and requests exclude the control arm."""

    cells: pd.DataFrame
    requests: pd.DataFrame
    control: pd.DataFrame
    thermal: pd.DataFrame
    summary: pd.DataFrame
    fingerprints: list[dict] = field(default_factory=list)
    servers: list[dict] = field(default_factory=list)
    host: pd.DataFrame | None = None  # what the rest of the machine did (hostload samples)
    # every cell, those whose server numbers failed the cross-check included (``cells`` holds
    # only the cells behind the headline, consolidate.headline_cells); None when not given
    all_cells: pd.DataFrame | None = None
    # the server's own metric samples over each rep (target, run, rep, arm, position, phase,
    # t_s, source, role, metric, labels, value, error): empty where the server had no
    # /metrics or the results were measured before they were scraped
    server_metrics: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def targets(self) -> list[str]:
        """Every measured target, those none of whose cells is behind the headline included:
        every check gives each of them a verdict."""
        cells = self.cells if self.all_cells is None else self.all_cells
        return sorted(set(cells["target"].astype(str))) if not cells.empty else []

    def has_rate_arms(self, target: str) -> bool:
        """Whether any cell of ``target`` (behind the headline or not) is a rate arm's."""
        cells = self.cells if self.all_cells is None else self.all_cells
        return bool((cells[cells["target"] == target]["arm"] < 0).any())

    def behind_headline(self) -> "Tables":
        """These tables with only the targets that have a cell behind the headline."""
        return dataclasses.replace(self, all_cells=None)

    @functools.cached_property
    def measured_requests(self) -> pd.DataFrame:
        """The measured requests (the control arm's left out), made once: every check reads
        them, and a big run's requests are hundreds of MB."""
        req = self.requests
        if "control" in req:
            req = req[~req["control"].fillna(False).astype(bool)]
        return req.reset_index(drop=True)

    def target_cells(self, target: str) -> list[str]:
        return cell_labels(self.cells[self.cells["target"] == target])

    def fingerprints_of(self, target: str) -> list[dict]:
        fps = [fp for fp in self.fingerprints if str(fp.get("target")) == target]
        return sorted(fps, key=lambda fp: str(fp.get("run")))


def constant(**named) -> str:
    """How a verdict names the constants of the method that decided it, e.g.
    ``constant(SERIALISED_SHARE=0.8)``: "SERIALISED_SHARE = 0.8, see docs/method.md#constants",
    where every such constant is listed with its value and what it decides."""
    return ", ".join(f"{k} = {v:g}" for k, v in named.items()) + ", see docs/method.md#constants"


def setting(settings: dict, key: str):
    """A value of the resolved config by its dotted key (e.g. "checks.rotation_threshold")."""
    value = settings
    for part in key.split("."):
        value = value[part]
    return value


def load_tables(inputs: dict) -> Tables:
    """Tables from the pipeline's files: cells, requests, control, thermal (Parquet), summary
    (CSV), servers (JSON), fingerprints (a list of JSON paths) and, where given and present,
    the server's metric samples (server_metrics, Parquet)."""
    cells = pd.read_parquet(inputs["cells"])
    return Tables(
        cells=headline_cells(cells),
        all_cells=cells,
        requests=pd.read_parquet(inputs["requests"]),
        control=pd.read_parquet(inputs["control"]),
        thermal=pd.read_parquet(inputs["thermal"]),
        summary=pd.read_csv(inputs["summary"]),
        fingerprints=[json.loads(Path(p).read_text()) for p in inputs.get("fingerprints", [])],
        servers=json.loads(Path(inputs["servers"]).read_text()) if "servers" in inputs else [],
        host=pd.read_parquet(inputs["host"]) if "host" in inputs else None,
        server_metrics=read_optional(inputs.get("server_metrics")),
    )


def read_optional(path) -> pd.DataFrame:
    """A Parquet table that older results do not have: empty where no path or no file."""
    if not path or not Path(str(path)).is_file():
        return pd.DataFrame()
    return pd.read_parquet(path)


def judged(
    trap: str,
    title: str,
    target: str,
    fired,
    summary: str,
    sentence: str,
    effect: str = "none",
    verdict: str | None = None,
    **fields,
) -> Verdict:
    """A verdict of a check that could look: "yes" when the trap fired, else "no". ``effect``
    is what it does to the headline when it fired; a quiet verdict does nothing."""
    return Verdict(trap, title, target, assessable=True, fired=bool(fired),
                   verdict=verdict or ("yes" if fired else "no"), summary=summary,
                   sentence=sentence, effect=effect if fired else "none", **fields)


def no_cells_behind_headline(trap: str, title: str, target: str) -> Verdict:
    """The verdict of a check that reads the headline's cells, for a target with none left."""
    return not_assessable(
        trap, title, target, "no cell is behind the headline",
        f"No cell of {target} is behind the headline (see the server numbers check), so this "
        "check had nothing to read.", evidence={"no_cells": True},
    )


def not_assessable(
    trap: str, title: str, target: str, summary: str, sentence: str, **fields
) -> Verdict:
    """A verdict of a check that lacked what it needs: never a pass
    (docs/method.md#not-assessable-is-not-a-pass)."""
    return Verdict(trap, title, target, assessable=False, fired=False, verdict="not assessable",
                   summary=summary, sentence=sentence, **fields)
