"""`slotbench run` and `slotbench archive`: this checkout's workflow through Snakemake's own
command line.

Both start the ``snakemake`` of the Python that runs them (the venv's, beside
``sys.executable``) in the checkout, with ``--cores 1`` unless the Snakemake arguments after
``--`` give ``--cores``/``-c`` or ``--jobs``/``-j``, so the workflow profile (profiles/default)
applies as it does to a ``snakemake`` typed there. Each prints the Snakemake command it runs,
which typed in the checkout does the same.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable

from slotbench.core.cli import CommandError, Parser, say
from slotbench.core.code import REPO
from slotbench.measure.backends import BACKENDS
from slotbench.measure.detect import DetectError, detect, pick_model, server_root, target_for
from slotbench.workflow import experiment as exp
from slotbench.workflow.config import ConfigError
from slotbench.workflow.configfile import configfile_problem

SMOKE = "config/smoke.yaml"
SMOKE_EXPERIMENT = "smoke"  # config/smoke.yaml's experiment
CORES = re.compile(r"--cores(=.*)?|--jobs(=.*)?|-[cj]\S*")


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """The command's own arguments and Snakemake's (those after the first ``--``)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def snakemake_program() -> list[str]:
    """The venv's snakemake, beside the Python running this (``python -m snakemake`` where a
    venv has no launcher)."""
    launcher = Path(sys.executable).parent / "snakemake"
    return [str(launcher)] if launcher.is_file() else [sys.executable, "-m", "snakemake"]


def snakemake_args(configfiles: list[str], extra: list[str], targets: list[str] = ()) -> list[str]:
    """Snakemake's arguments: the targets, ``--cores 1`` unless ``extra`` sets cores or jobs,
    ``extra``, then the config files (last, so that ``--configfile``, which takes every word
    after it, never takes a target of ``extra``)."""
    cores = [] if any(CORES.fullmatch(a) for a in extra) else ["--cores", "1"]
    files = ["--configfile", *configfiles] if configfiles else []
    return [*targets, *cores, *extra, *files]


def start(args: list[str], repo: Path) -> int:
    """Run Snakemake in ``repo`` and return its exit code. Ctrl-C reaches Snakemake too (one
    process group): this waits for it to stop its jobs and servers rather than leave it."""
    say(f"slotbench: snakemake {shlex.join(args)}   (in {repo})")
    proc = subprocess.Popen([*snakemake_program(), *args], cwd=repo)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def _refuse_configfile_in(extra: list[str], parser: Parser) -> None:
    if any(a.split("=")[0] in ("--configfile", "--configfiles") for a in extra):
        parser.error("give config files as CONFIG arguments, before --, not as --configfile")


def checkout_path(path: str, repo: Path) -> str:
    """A config file the user named (from their directory) as Snakemake in the checkout finds
    it: relative to the checkout when inside it, else absolute."""
    full = Path(path).expanduser().resolve()
    problem = configfile_problem(str(full))
    if problem:
        raise CommandError(problem.replace(str(full), path))
    try:
        return str(full.relative_to(repo.resolve()))
    except ValueError:
        return str(full)


def run_parser() -> Parser:
    parser = Parser(
        prog="slotbench run",
        usage="slotbench run [CONFIG ...] [--url URL [--model M] [--backend B]] [--smoke]\n"
              "                     [--experiment NAME] [-- SNAKEMAKE-ARGS]",
        description=(
            "Measure: run this checkout's workflow through Snakemake's command line. CONFIG\n"
            "files are merged over config/config.yaml, as --configfile files are; --smoke adds\n"
            "config/smoke.yaml before them. With --url, slotbench asks the server what it is\n"
            "(GET /api/version: Ollama; /props: llama-server; /v1/models: OpenAI-compatible),\n"
            "writes the config of that one target to results/<experiment>/config.yaml and runs\n"
            "`snakemake --cores 1 --configfile` with it. Arguments after -- go to Snakemake."),
        examples=[".venv/bin/slotbench run --smoke",
                  ".venv/bin/slotbench run --url http://127.0.0.1:11434 --smoke",
                  ".venv/bin/slotbench run config/capacity.yaml -- --dry-run"],
    )
    parser.add_argument("configs", nargs="*", metavar="CONFIG",
                        help="config files, merged in order")
    parser.add_argument("--url", help="measure the server at this URL (its backend is detected)")
    parser.add_argument("--model", help="the model to measure (Ollama, OpenAI-compatible: needed "
                        "unless the server lists exactly one)")
    parser.add_argument("--backend", choices=sorted(BACKENDS),
                        help="the server's backend, instead of detecting it")
    parser.add_argument("--smoke", action="store_true",
                        help="the smoke size (config/smoke.yaml; docs/run-times.md says how long "
                        "it takes); a config naming its experiment NAME measures into NAME-smoke")
    parser.add_argument("--experiment", metavar="NAME", help="the experiment's name: its results "
                        "go to results/NAME/ (default: the config's, or with --url "
                        "<backend>-<host>-<port>, -smoke with --smoke)")
    return parser


def _target_config(args, files: list[str], argv: list[str], repo: Path) -> str:
    """Detect the server at --url, write the config of a run on it, return its path."""
    try:
        root = server_root(args.url)
        backend = args.backend or detect(root).backend
        model, why = pick_model(backend, root, args.model)
    except DetectError as exc:
        raise CommandError(str(exc)) from None
    if not args.backend:
        say(f"slotbench: {root} is {backend}" + (f"; measuring {why}" if why else ""))
    elif why:
        say(f"slotbench: measuring {why}")
    name = args.experiment or exp.derived_name(backend, root, args.smoke)
    target = target_for(backend, root, model, exp.derived_name(backend, root))
    cfg = _validated(files, {exp.KEY: name, "targets": [target]}, repo)
    if "matrix" in cfg:  # it would give the targets, and the server of --url none
        raise CommandError("--url measures the one server there, and a config file given has a "
                           "target matrix (`matrix:`); drop one of them")
    return exp.save(cfg, shlex.join(["slotbench", "run", *argv]), repo)


def _validated(files: list[str], overrides: dict, repo: Path) -> dict:
    """The config of the run (exp.build), checked before Snakemake starts."""
    try:
        cfg = exp.build([repo / f for f in files], overrides, repo)
        exp.validate(cfg)
    except (ValueError, ConfigError) as exc:  # ConfigError is a ValueError too
        raise CommandError(str(exc)) from None
    return cfg


def main_run(argv: list[str], repo: Path = REPO,
             starter: Callable[[list[str], Path], int] = start) -> int:
    own, extra = split_args(argv)
    parser = run_parser()
    args = parser.parse_intermixed_args(own)  # CONFIG files before and after the options
    _refuse_configfile_in(extra, parser)
    if not args.url and (args.model or args.backend):
        parser.error("--model and --backend describe the server of --url; give --url too")
    if args.experiment and exp.name_problem(args.experiment):
        parser.error(exp.name_problem(args.experiment))
    files = ([SMOKE] if args.smoke else []) + [checkout_path(c, repo) for c in args.configs]
    if args.url:
        return starter(snakemake_args([_target_config(args, files, argv, repo)], extra), repo)
    named = {exp.KEY: args.experiment} if args.experiment else {}
    cfg = _validated(files, named, repo)
    if args.smoke and not named and cfg[exp.KEY] != SMOKE_EXPERIMENT:
        # a config naming its own experiment, at the smoke size: beside it, not in it, so the
        # full run later measures its own reps rather than the smoke run's again
        named = {exp.KEY: exp.smoke_name(cfg[exp.KEY])}
        _validated(files, named, repo)
    if named:
        extra = ["--config", f"{exp.KEY}={named[exp.KEY]}", *extra]
    return starter(snakemake_args(files, extra), repo)


def archive_parser() -> Parser:
    parser = Parser(
        prog="slotbench archive",
        usage="slotbench archive [EXPERIMENT] [-- SNAKEMAKE-ARGS]",
        description=(
            "Archive an experiment: run Snakemake's archive target with the config its results\n"
            "were made with (results/EXPERIMENT/config.resolved.yaml, or the config.yaml that\n"
            "slotbench run wrote there), so no --configfile is needed. The archive holds the raw\n"
            "files with their SHA-256s, the tables, the report and the code's commit; slotbench\n"
            "archive-verify checks it, slotbench archive-render re-renders it without a server.\n"
            "Arguments after -- go to Snakemake."),
        examples=[".venv/bin/slotbench archive",
                  ".venv/bin/slotbench archive ollama-127-0-0-1-11434"],
    )
    parser.add_argument("experiment", nargs="?", metavar="EXPERIMENT",
                        help="the experiment (default: the default experiment's)")
    return parser


def main_archive(argv: list[str], repo: Path = REPO,
                 starter: Callable[[list[str], Path], int] = start) -> int:
    own, extra = split_args(argv)
    parser = archive_parser()
    args = parser.parse_args(own)
    _refuse_configfile_in(extra, parser)
    name = args.experiment or exp.default_experiment()
    try:
        config = exp.saved_config(name, repo)
    except LookupError as exc:
        raise CommandError(str(exc)) from None
    return starter(snakemake_args([config], extra, targets=["archive"]), repo)
