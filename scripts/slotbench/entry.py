"""Small conveniences shared by the rule entry points in scripts/."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO


class Tee:
    """Progress goes to the terminal and to the rule's log file."""

    def __init__(self, *streams: TextIO):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
            stream.flush()
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


@contextmanager
def progress_log(path: str | Path) -> Iterator[Tee]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        yield Tee(sys.stderr, fh)


def fail(message: str, log: TextIO | None = None) -> None:
    """Exit the job with a plain message instead of a traceback."""
    print(f"\nERROR: {message}", file=log or sys.stderr)
    raise SystemExit(1)
