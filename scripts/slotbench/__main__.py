"""Command line: ``python -m slotbench COMMAND …`` (run from the repository, after setup.sh).

Commands are looked up here and imported on use, so each lives in the module of its concern.
"""

from __future__ import annotations

import sys
from importlib import import_module

COMMANDS = {
    "explain": ("slotbench.provenance.explain", "main_explain",
                "print the raw request rows behind a figure or table cell"),
    "archive-verify": ("slotbench.workflow.archive", "main_verify",
                       "verify an archive's SHA-256 manifest"),
    "archive-render": ("slotbench.workflow.archive", "main_render",
                       "re-render the report from an archive, no server needed"),
    "compare": ("slotbench.report.compare", "main_compare",
                "compare two results (directories or archives) arm by arm"),
    "docs": ("slotbench.report.docs", "main_docs",
             "write the generated docs (config/README.md, captions, README example, run "
             "times); --check"),
}


def usage() -> str:
    lines = ["usage: python -m slotbench COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in {"-h", "--help"} or argv[0] not in COMMANDS:
        print(usage(), file=sys.stderr if argv and argv[0] not in {"-h", "--help"} else sys.stdout)
        return 0 if argv and argv[0] in {"-h", "--help"} else 2
    module, func, _ = COMMANDS[argv[0]]
    return int(getattr(import_module(module), func)(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
