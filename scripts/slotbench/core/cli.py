"""The command line's one way to read arguments: `slotbench COMMAND --help` says what the command
does and shows an example, and a wrong argument is one line naming the command, never a usage
dump (exit 2, as argparse's own errors)."""

from __future__ import annotations

import argparse
import sys

PROG = "slotbench"
EXIT_USAGE = 2  # a wrong argument, as argparse's own errors


class Parser(argparse.ArgumentParser):
    """A command's parser. ``examples``: command lines shown under "Example" in its --help."""

    def __init__(self, *args, examples: list[str] | tuple[str, ...] = (), **kwargs):
        if examples:
            label = "Example" if len(examples) == 1 else "Examples"
            kwargs["epilog"] = "\n".join(
                [*([kwargs["epilog"], ""] if kwargs.get("epilog") else []),
                 f"{label}:", *(f"  {line}" for line in examples)])
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """One line: the command, what is wrong, where the options are listed."""
        if message.startswith("unrecognized arguments: "):
            extra = message.removeprefix("unrecognized arguments: ")
            message = f"unrecognized argument{'s' if ' ' in extra else ''} {extra}"
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (`{self.prog} --help` shows the "
                              "options)\n")


def say(message: str) -> None:
    """A line for the person at the terminal (stderr: stdout stays the command's output)."""
    print(message, file=sys.stderr, flush=True)


class CommandError(Exception):
    """A problem the command states in one line and exits 1 on (bad input, nothing answering)."""
