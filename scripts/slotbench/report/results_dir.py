"""A finished run's results directory, read for the documentation: which shipped config made it,
on which machine and when.

The directory is the one a run wrote (``results/`` by default); nothing here assumes its name.
A file it lacks is one line naming the file (``ResultsDirError``), never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from slotbench.core.code import REPO
from slotbench.workflow import config as sbconfig
from slotbench.workflow.configfile import merged

CONFIG_DIR = "config"
DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's configfile: every run starts from it
NOT_SHIPPED = {"config.yaml", "schema.yaml"}  # config/ files that are no --configfile
SNAKEMAKE = ".venv/bin/snakemake --cores 1"


class ResultsDirError(ValueError):
    """A results directory that lacks what the documentation needs from it."""


def need(results: Path, rel: str) -> Path:
    """``results/rel``, which must exist."""
    path = Path(results) / rel
    if not path.exists():
        raise ResultsDirError(f"{results} has no {rel}: give the results directory of a "
                              "finished run (snakemake writes it)")
    return path


def read_json(results: Path, rel: str):
    path = need(results, rel)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsDirError(f"{path}: not readable JSON ({exc})") from None


def resolved_config(results: Path) -> dict:
    """The config the run's rules saw (config.resolved.yaml)."""
    path = need(results, "config.resolved.yaml")
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ResultsDirError(f"{path}: not readable YAML ({exc})") from None
    if not isinstance(cfg, dict):
        raise ResultsDirError(f"{path}: holds no config")
    return cfg


def shipped_files(repo: Path = REPO) -> list[str]:
    """The shipped --configfile files, relative to the repository, sorted: config/*.yaml and
    the workloads' examples, config/workloads/*.yaml."""
    return sorted(p.relative_to(repo).as_posix()
                  for p in [*(repo / CONFIG_DIR).glob("*.yaml"),
                            *(repo / CONFIG_DIR / "workloads").glob("*.yaml")]
                  if p.name not in NOT_SHIPPED)


def candidates(repo: Path = REPO) -> list[tuple[str, ...]]:
    """The shipped ways to run: the default, each shipped file, and the smoke config with each
    other file (``--configfile config/smoke.yaml config/paired.yaml``)."""
    files = shipped_files(repo)
    smoke = f"{CONFIG_DIR}/smoke.yaml"
    return [(), *((f,) for f in files), *((smoke, f) for f in files if f != smoke)]


def _load(repo: Path, rel: str) -> dict:
    return yaml.safe_load((repo / rel).read_text(encoding="utf-8")) or {}


def shipped_config(cfg: dict, repo: Path = REPO) -> tuple[str, ...] | None:
    """The --configfile files of the shipped way to run whose resolved config is ``cfg`` (()
    for the default), or None when it is none of them. The experiment's name is not part of
    the match: `slotbench run config/paired.yaml --smoke` measures into paired-smoke what
    `--configfile config/smoke.yaml config/paired.yaml` measures into paired."""
    want = sbconfig.canonical(cfg)
    base = _load(repo, DEFAULT_CONFIG)
    for files in candidates(repo):
        config = base
        for rel in files:
            config = merged(config, _load(repo, rel))
        config = merged(config, {"experiment": cfg.get("experiment")})
        try:
            if sbconfig.canonical(sbconfig.resolve(config)) == want:
                return files
        except sbconfig.ConfigError:  # a file meant to go with another (paired.yaml alone)
            continue
    return None


def command(files: tuple[str, ...]) -> str:
    """The command that runs a shipped config."""
    return SNAKEMAKE + (" --configfile " + " ".join(files) if files else "")


def fingerprints(results: Path) -> list[dict]:
    """Every run's fingerprint, by target and run."""
    paths = sorted(need(results, "fingerprint").glob("*/*.json"))
    if not paths:
        raise ResultsDirError(f"{results}/fingerprint holds no fingerprint: give the results "
                              "directory of a finished run")
    return [read_json(results, str(p.relative_to(results))) for p in paths]


def machine(fps: list[dict]) -> dict:
    """The client host the fingerprints name (the first run's; runs on one machine share it);
    fingerprints written before the client host was told apart from the server's call it
    ``host``."""
    first = min(fps, key=lambda fp: str(fp.get("created_utc")))
    host = first.get("client_host") or first.get("host") or {}
    return {k: host.get(k) for k in ("cpu_model", "cores", "memory_gb", "machine")}


def machine_text(m: dict) -> str:
    """"AMD EPYC 7B13 (2 CPUs, 23.4 GB memory, x86_64)"."""
    memory = f", {m['memory_gb']:g} GB memory" if m.get("memory_gb") else ""
    arch = f", {m['machine']}" if m.get("machine") else ""
    return f"{m.get('cpu_model') or 'an unnamed CPU'} ({m.get('cores')} CPUs{memory}{arch})"


def measured_utc(fps: list[dict]) -> str:
    """When the run began: its first fingerprint's UTC time, "2026-12-06 00:21 UTC"."""
    first = min(str(fp.get("created_utc")) for fp in fps)
    return first[:16].replace("T", " ") + " UTC"


def commit(fps: list[dict]) -> str:
    """The pipeline's commit (short) the run measured with, "+ changes" when its tree differed."""
    pipeline = min(fps, key=lambda fp: str(fp.get("created_utc"))).get("pipeline") or {}
    short = str(pipeline.get("commit") or "unknown")[:7]
    return short + (" + changes" if pipeline.get("dirty") else "")


def serial_tps(summary_rows: list[dict]) -> float | None:
    """The serial arm's aggregate tok/s of the first target (by name), as the analysis wrote
    it: what sets a run's time."""
    serial = sorted((str(r["target"]), float(r["agg_tps"])) for r in summary_rows
                    if str(r.get("arm")) == "1" and r.get("agg_tps") not in (None, ""))
    return round(serial[0][1], 1) if serial else None
