"""Command line: ``slotbench COMMAND …`` (the venv's launcher, which setup.sh's editable install
puts in place), or ``python -m slotbench COMMAND …``.

Commands are looked up here and imported on use, so each lives in the module of its concern,
with its own parser (slotbench.core.cli.Parser: --help shows an example, a wrong argument is one
line).
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from slotbench import __version__
from slotbench.core.cli import EXIT_USAGE, PROG, CommandError, Parser

COMMANDS = {
    "run": ("slotbench.workflow.launch", "main_run",
            "measure: run the workflow on a config, or on the server at --url"),
    "init": ("slotbench.workflow.starter", "main_init",
             "write a commented starter config for your own server"),
    "archive": ("slotbench.workflow.launch", "main_archive",
                "archive an experiment's results (raw files, hashes, report, code)"),
    "compare": ("slotbench.report.compare", "main_compare",
                "compare two results (directories or archives) arm by arm"),
    "explain": ("slotbench.provenance.explain", "main_explain",
                "print the raw request rows behind a figure or table cell"),
    "archive-verify": ("slotbench.workflow.archive", "main_verify",
                       "verify an archive's SHA-256 manifest"),
    "archive-render": ("slotbench.workflow.archive", "main_render",
                       "re-render the report from an archive, no server needed"),
    "docs": ("slotbench.report.docs", "main_docs",
             "write the generated docs (config/README.md, captions, README example, run "
             "times); --check"),
}


def version() -> str:
    """The package's version and the checkout's commit, +dirty when its files differ."""
    code = import_module("slotbench.measure.fingerprint").pipeline_version()
    repo = import_module("slotbench.core.code").REPO
    commit = code["commit"] + ("+dirty" if code["dirty"] else "")
    return f"{PROG} {__version__}, commit {commit} (checkout {repo})"


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the version and the commit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit()


def parser() -> Parser:
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, _, help_) in COMMANDS.items())
    top = Parser(
        prog=PROG,
        usage=f"{PROG} [--version] COMMAND [ARGS]",
        description="Measure what concurrency does to an LLM inference server.\n\n"
                    f"commands:\n{listing}\n\n`{PROG} COMMAND --help` says more of each.",
        examples=[".venv/bin/slotbench run --smoke",
                  ".venv/bin/slotbench run --url http://127.0.0.1:8080"],
    )
    top.add_argument("--version", action=_Version)
    top.add_argument("command", metavar="COMMAND", choices=list(COMMANDS), help=argparse.SUPPRESS)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        parser().print_help()
        return EXIT_USAGE
    if argv[0] not in COMMANDS:
        parser().parse_args(argv[:1])  # --help, --version, or one line saying what is wrong
        return EXIT_USAGE
    module, func, _ = COMMANDS[argv[0]]
    try:
        return int(getattr(import_module(module), func)(argv[1:]) or 0)
    except CommandError as exc:
        print(f"{PROG} {argv[0]}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
