"""Experiments kept apart: every output of a config lands under results/<experiment>/.

A config names its experiment (the top-level key ``experiment``, ``article`` by default), and
its raw files, plans, fingerprints, tables, checks, analysis, figures, report, resolved config,
logs, archive and comparisons sit in ``results/<experiment>/``, laid out below it as they are
listed in ``LAYOUT``. So one experiment never measures another's reps again nor overwrites them.

Paths are relative to the working directory Snakemake runs in (the checkout). This module also
finds a result for the commands that read one (compare, explain): by the name of an experiment,
or by a directory, including a ``results/`` made before experiments had their own folders (the
old layout: the entries of ``LAYOUT`` directly in ``results/``), which is left as it is.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Iterable

import yaml

from slotbench.core.code import REPO
from slotbench.core.defaults import default

RESULTS = "results"  # the folder every experiment's folder sits in
# What an experiment's folder holds (a result from before experiments held them in results/).
LAYOUT = (
    "raw", "plan", "fingerprint", "consolidated", "checks", "analysis", "figures", "logs",
    "compare", "archive", "requests.parquet", "cells.parquet", "control.parquet",
    "thermal.parquet", "host.parquet", "servers.json", "inventory.json", "config.resolved.yaml",
    "report.md", "report.html", "provenance.json", "snakemake-report.zip",
)
# Any of these in a folder: it holds a result (an experiment's folder, or an old results/).
MARKERS = ("raw", "config.resolved.yaml", "report.md", "analysis", "checks")
RESOLVED_CONFIG = "config.resolved.yaml"


def name_of(cfg_or_name: dict | str) -> str:
    """The experiment's name: given, or a resolved config's ``experiment``."""
    if isinstance(cfg_or_name, dict):
        return str(cfg_or_name.get("experiment") or default("experiment"))
    return str(cfg_or_name)


def results_dir(cfg_or_name: dict | str) -> str:
    """The folder every output of the experiment lands in: ``results/<experiment>``, for a
    resolved config or an experiment's name. The one place that names it."""
    return f"{RESULTS}/{name_of(cfg_or_name)}"


def split(path: str | Path) -> tuple[str, str]:
    """An output path as (its result's folder, the path below it):
    ``results/smoke/raw/x/run1/rep1.json`` -> (``results/smoke``, ``raw/x/run1/rep1.json``);
    the old layout's ``results/raw/…`` -> (``results``, ``raw/…``); a path with no results/
    in it -> ("", the path). A prefix before results/ (a cluster's storage) stays with the
    folder."""
    parts = PurePosixPath(Path(path).as_posix()).parts
    if RESULTS not in parts[:-1]:
        return "", PurePosixPath(*parts).as_posix() if parts else ""
    at = parts.index(RESULTS)
    head, rest = parts[: at + 1], parts[at + 1 :]
    if rest[0] in LAYOUT or len(rest) == 1:  # a result from before experiments had folders
        return PurePosixPath(*head).as_posix(), PurePosixPath(*rest).as_posix()
    return PurePosixPath(*head, rest[0]).as_posix(), PurePosixPath(*rest[1:]).as_posix()


def holds_result(folder: Path) -> bool:
    """Whether ``folder`` holds a result: an experiment's folder, or an old-layout results/."""
    return any((Path(folder) / m).exists() for m in MARKERS)


def names(root: Path | str = RESULTS) -> list[str]:
    """The experiments whose folders ``root`` (a results/ folder) holds, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and p.name not in LAYOUT)


def old_layout(root: Path | str = RESULTS) -> list[str]:
    """The entries of a result made before experiments had their own folders, directly in
    ``root`` (empty when there is none), in LAYOUT's order."""
    root = Path(root)
    if not holds_result(root):
        return []
    return [name for name in LAYOUT if (root / name).exists()]


def old_name(root: Path | str = RESULTS) -> str:
    """The name to keep an old-layout result under: its resolved config's ``experiment``, if it
    has one, else the default; with ``-old`` added while an experiment of that name exists."""
    root = Path(root)
    name = default("experiment")
    try:
        recorded = yaml.safe_load((root / RESOLVED_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # none, or broken: the default stands
        recorded = None
    if isinstance(recorded, dict) and isinstance(recorded.get("experiment"), str):
        name = recorded["experiment"]
    while (root / name).exists():
        name += "-old"
    return name


def old_layout_note(root: Path | str = RESULTS) -> str | None:
    """One line for a results/ that holds a result from before experiments had their own
    folders: it is left untouched, and the command that keeps it as an experiment. None when
    there is none."""
    entries = old_layout(root)
    if not entries:
        return None
    root = Path(root)
    name = old_name(root)
    moved = " ".join(str(root / e) for e in entries)
    return (f"slotbench: note: {root}/ holds a result from before experiments had their own "
            f"folders ({root}/<experiment>/); it is left untouched. To keep it as the "
            f"experiment {name}: mkdir {root / name} && mv {moved} {root / name}/")


def folder_of(directory: Path | str) -> Path:
    """The result a directory holds: the directory itself (an experiment's folder, or an old
    results/), its results/ (a checkout with an old-layout result), or the one experiment its
    results folder holds. ValueError, one line, when it holds none or several."""
    directory = Path(directory)
    if holds_result(directory):
        return directory
    root = directory / RESULTS if (directory / RESULTS).is_dir() else directory
    if holds_result(root):
        return root
    found = names(root)
    if len(found) == 1:
        return root / found[0]
    if found:
        raise ValueError(f"{directory} holds the experiments {', '.join(found)}; name one "
                         f"(e.g. {root / found[0]})")
    raise ValueError(f"{directory}: no result in it (neither an experiment's folder nor a "
                     "results folder with one)")


def locate(what: str | Path, repo: Path | None = None) -> Path:
    """A result named on a command line: a path (a file, or a directory as folder_of reads it),
    or an experiment's name (no slash, not an existing path): ``results/<name>/`` of the
    checkout ``repo`` (this one, by default). ValueError, one line listing the experiments
    there, when it is neither."""
    repo = REPO if repo is None else Path(repo)
    path = Path(what)
    if path.is_file():
        return path
    if path.is_dir():
        return folder_of(path)
    text = str(what)
    if "/" not in text and text not in ("", ".", ".."):
        folder = repo / RESULTS / text
        if folder.is_dir():
            return folder
    found = names(repo / RESULTS)
    listed = ", ".join(found) if found else "none yet"
    raise ValueError(f"{text}: neither a path nor an experiment in {repo / RESULTS} "
                     f"(experiments there: {listed})")


def prefix_in(members: Iterable[str]) -> str:
    """The folder of the result among an archive's members (paths relative to the working
    directory): ``results/<experiment>/``, or ``results/`` for an archive made before
    experiments had their own folders; found by its resolved config."""
    configs = sorted(m for m in members if PurePosixPath(m).name == RESOLVED_CONFIG
                     and PurePosixPath(m).parts[0] == RESULTS and len(PurePosixPath(m).parts) <= 3)
    if not configs:
        return f"{RESULTS}/"
    return str(PurePosixPath(configs[0]).parent) + "/"
