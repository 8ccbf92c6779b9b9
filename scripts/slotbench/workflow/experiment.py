"""Experiments: each config's results in a folder of their own, results/<experiment>/, named by
the config's ``experiment`` key; the config `slotbench run` writes for a server it was given the
URL of, saved in that folder so that Snakemake alone reproduces the run; and the experiments
that have results."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from slotbench.core.code import REPO
from slotbench.core.experiments import results_dir
from slotbench.core.defaults import default
from slotbench.core.urls import endpoint
from slotbench.workflow import config as sbconfig
from slotbench.workflow.configfile import merged, read

KEY = "experiment"
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
SAVED = "config.yaml"  # the config `slotbench run --url` writes in the experiment's folder
# the configs an experiment's folder may hold, the one that reruns it best first
CONFIGS = ("config.resolved.yaml", SAVED)


def default_experiment() -> str:
    """The experiment of a config that names none: the schema's default."""
    return default(KEY)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an experiment (it names a folder), or None."""
    if NAME.fullmatch(name):
        return None
    return (f"experiment name {name!r} is not 1-64 letters, digits, _ and - (it names the "
            "folder of its results)")


def derived_name(backend: str, url: str, smoke: bool = False) -> str:
    """An experiment's name from the server measured: ``<backend>-<host>-<port>``, with
    ``-smoke`` for the smoke size; every character a folder name should not hold becomes -."""
    _, host, port = endpoint(url)
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{backend}-{host}-{port}").strip("-")
    return smoke_name(name) if smoke else name[:64]


def smoke_name(name: str) -> str:
    """The experiment of ``name``'s config at the smoke size: ``<name>-smoke``, 64 characters at
    most."""
    return name[: 64 - len("-smoke")] + "-smoke"


def validate(cfg: dict) -> dict:
    """The config resolved (slotbench.workflow.config.resolve): ConfigError names what is
    wrong."""
    return sbconfig.resolve(cfg)


def build(files: list[Path], overrides: dict, repo: Path = REPO) -> dict:
    """The config of a run: config/config.yaml, then ``files`` in order (config/smoke.yaml,
    the user's), then ``overrides`` (the experiment, the one target of `run --url`), merged as
    Snakemake merges config files. ValueError names a file that cannot be read."""
    base = read(repo / "config" / "config.yaml")
    return merged(base, *(read(f) for f in files), overrides)


def save(cfg: dict, command: str, repo: Path = REPO) -> str:
    """Write ``cfg`` as results/<experiment>/config.yaml with a header that says how it was
    made and how to run it again; returns its path relative to the checkout."""
    rel = f"{results_dir(cfg[KEY])}/{SAVED}"
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Written by `{command}`.\n"
              f"# The same run again, from the checkout: snakemake --cores 1 --configfile {rel}\n")
    tmp = path.with_name(f".{SAVED}.tmp")
    tmp.write_text(header + yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    tmp.replace(path)
    return rel


def existing(repo: Path = REPO) -> list[str]:
    """The experiments with results: folders of results/ that hold a config."""
    results = repo / "results"
    if not results.is_dir():
        return []
    return sorted(p.name for p in results.iterdir()
                  if p.is_dir() and any((p / name).is_file() for name in CONFIGS))


def saved_config(experiment: str, repo: Path = REPO) -> str:
    """The config an experiment's results were made with (config.resolved.yaml, else the one
    `slotbench run` wrote), relative to the checkout; LookupError in one line naming the
    experiments that have results when it has none."""
    folder = results_dir(experiment)
    for name in CONFIGS:
        if (repo / folder / name).is_file():
            return f"{folder}/{name}"
    there = existing(repo)
    known = (f"experiments with results: {', '.join(there)}" if there
             else "no experiment has results yet (slotbench run makes them)")
    what = "has no config" if (repo / folder).is_dir() else "does not exist"
    raise LookupError(f"{folder} {what}; {known}")
