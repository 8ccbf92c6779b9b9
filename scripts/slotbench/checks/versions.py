"""Trap: cells produced by different pipeline code versions or server builds, pooled as one.

Every raw file records the pipeline commit and dirty flag and the server build that produced
it. A target whose cells mix versions pools them in every number; the report then says which
runs and reps used each, so a version change that moved the numbers can be separated.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged
from slotbench.core.fmt import code_text, reps_text

TRAP = "versions"
TITLE = "Mixed versions (code or server build)"
ORDER = 95
TABLES = ()


def version_groups(cells: pd.DataFrame) -> tuple[dict, dict]:
    """(code, server): version -> sorted (run, rep) pairs whose cells it produced.

    code versions are (commit, dirty) pairs: the same commit with and without local changes is
    two versions. Empty dicts when the cells table records neither.
    """
    code: dict[tuple, set] = {}
    server: dict[str, set] = {}
    for rec in cells.to_dict("records"):
        commit, dirty = rec.get("code_commit"), rec.get("code_dirty")
        commit = None if pd.isna(commit) else commit
        dirty = None if pd.isna(dirty) else bool(dirty)
        if commit is not None or dirty is not None:
            code.setdefault((commit, dirty), set()).add((str(rec["run"]), int(rec["rep"])))
        build = rec.get("server_build")
        if build is not None and not pd.isna(build):
            server.setdefault(str(build), set()).add((str(rec["run"]), int(rec["rep"])))
    return (
        {k: sorted(v) for k, v in sorted(code.items(), key=lambda kv: (str(kv[0]), ""))},
        {k: sorted(v) for k, v in sorted(server.items())},
    )


def _describe(groups: dict, name, plural: str, unrecorded: str) -> str:
    if not groups:
        return unrecorded
    if len(groups) == 1:
        return f"all cells: {name(next(iter(groups)))}"
    return f"{len(groups)} {plural}: " + "; ".join(
        f"{name(v)} for {reps_text(pairs)}" for v, pairs in groups.items()
    )


def _one_version(code: dict, server: dict) -> str:
    code_one = code_text(*next(iter(code))) if code else None
    build_one = f"server build {next(iter(server))}" if server else None
    if code_one and build_one:
        return f"Versions: all cells: {code_one}, {build_one}."
    known = code_one or build_one
    if known:
        missing = "server build" if code_one else "pipeline code version"
        return f"Versions: all cells: {known}; {missing} not recorded."
    return "Versions: pipeline code version and server build not recorded."


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    verdicts = []
    for target in tables.targets:
        code, server = version_groups(tables.cells[tables.cells["target"] == target])
        mixed = len(code) > 1 or len(server) > 1
        evidence = {"code": [{"commit": c, "dirty": d, "reps": reps_text(p)}
                             for (c, d), p in code.items()],
                    "server_builds": [{"build": b, "reps": reps_text(p)}
                                      for b, p in server.items()]}
        if not mixed:
            line = _one_version(code, server)
            verdicts.append(Verdict(
                TRAP, TITLE, target, assessable=bool(code or server), fired=False,
                verdict="no" if code or server else "not assessable",
                summary=line.removeprefix("Versions: ").rstrip("."), sentence=line,
                evidence=evidence,
            ))
            continue
        code_txt = _describe(code, lambda cd: code_text(*cd), "pipeline code versions",
                             "pipeline code version not recorded")
        server_txt = _describe(server, lambda b: b, "server builds", "server build not recorded")
        text = (
            f"Warning: the cells of {target} were not all produced by the same versions. "
            f"Pipeline code: {code_txt}. Server build: {server_txt}. Every number in this section "
            "pools them; if a version change may have moved the numbers, compare those runs "
            "separately or measure again with one version."
        )
        if any(dirty for _, dirty in code):
            text += (" A dirty work tree's changes are not recorded, so dirty cells of one "
                     "commit may differ too.")
        summary = f"{len(code)} code versions, {len(server)} server builds pooled"
        verdicts.append(
            judged(
                TRAP,
                TITLE,
                target,
                True,
                summary,
                text,
                evidence=evidence | {"warnings": [text]},
                effect="warn",
            )
        )
    return verdicts, {}
