"""The --configfile files of a Snakemake command line, checked before Snakemake reads them.

Snakemake reads every --configfile right after its profiles, before the workflow, and answers a
missing file with a traceback and a YAML error with a message that names neither the file nor the
line. The workflow profile (profiles/default/profile.yaml) calls :func:`refuse_bad` while
Snakemake parses it, so a file that cannot be a config gets one line naming it (and, for a YAML
error, its line and column) and nothing runs. The check lives in the checkout, not in an
installed entry point, so a reinstall of Snakemake keeps it.

Only the standard library and PyYAML: it runs inside Snakemake's own process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml


def configfile_args(argv: list[str]) -> list[str]:
    """The files a Snakemake command line names with --configfile (or --configfiles)."""
    files, taking = [], False
    for arg in argv:
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            taking = name in ("--configfile", "--configfiles")
            if taking and eq:
                files.append(value)
                taking = False
        elif taking:
            files.append(arg)
    return files


def configfile_problem(path: str) -> str | None:
    """Why a --configfile cannot be read as a config (missing, unreadable, not YAML, not a
    mapping), naming the file and, for a YAML error, its line and column; None if it can."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"config file {path} does not exist"
    except (OSError, UnicodeDecodeError) as exc:
        return f"config file {path} cannot be read: {getattr(exc, 'strerror', None) or exc}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"config file {path}{where}: not valid YAML ({what})"
    if data is None:
        return f"config file {path} is empty; give keys such as `targets:` or `reps:`, or drop it"
    if not isinstance(data, dict):
        return (f"config file {path} must hold keys (such as `targets:`), not a "
                f"{type(data).__name__}")
    return None


def read(path: str | Path) -> dict:
    """A config file's keys; ValueError with :func:`configfile_problem`'s line if it has none."""
    problem = configfile_problem(str(path))
    if problem:
        raise ValueError(problem)
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def merged(*configs: dict) -> dict:
    """Configs merged in order, as Snakemake merges its config files: a later file's mapping
    is merged into the earlier one key by key, any other value (a list too) replaces it."""
    out: dict = {}
    for config in configs:
        out = _merge(out, config)
    return out


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def refuse_bad(argv: list[str]) -> None:
    """Exit with one line if a --configfile in ``argv`` cannot be read as a config; otherwise
    forget this package, so that the workflow imports the one of its own checkout."""
    for path in configfile_args(argv):
        problem = configfile_problem(path)
        if problem:
            sys.exit(f"Error: {problem}; nothing was run.")
    for name in [m for m in sys.modules if m == "slotbench" or m.startswith("slotbench.")]:
        del sys.modules[name]
