"""Small conveniences shared by the rule entry points in scripts/: a progress log that also
goes to the terminal, plain errors instead of tracebacks, and a job that ends cleanly when it is
interrupted or Snakemake goes away."""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

# How often a job checks that the Snakemake that started it is still there.
PARENT_POLL_S = 0.5


class Tee:
    """Progress goes to the terminal and to the rule's log file (``file``: what goes only to
    the log, e.g. a server's whole answer, is written there)."""

    def __init__(self, *streams: TextIO, file: TextIO | None = None):
        self.streams = streams
        self.file = file

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
            stream.flush()
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


class Interrupted(Exception):
    """The job was interrupted (Ctrl-C, SIGTERM) or the Snakemake that started it is gone."""


@contextmanager
def progress_log(path: str | Path, on_interrupt: str = "nothing was written") -> Iterator[Tee]:
    """The job's log, teed to the terminal. An interrupt (Ctrl-C, SIGTERM, or Snakemake going
    away) ends the job with one line saying what became of its work, never a traceback."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        log = Tee(sys.stderr, fh, file=fh)
        try:
            with watch_parent():
                yield log
        except (KeyboardInterrupt, Interrupted) as exc:
            why = str(exc) or "interrupted"
            print(f"\nINTERRUPTED ({why}): {on_interrupt}; the next snakemake run resumes",
                  file=log)
            raise SystemExit(130) from None


def _interrupt(signum, frame):
    raise Interrupted({signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}.get(
        signum, f"signal {signum}"))


@contextmanager
def watch_parent() -> Iterator[None]:
    """While the job runs, SIGTERM and SIGHUP interrupt it, and so does its parent (Snakemake)
    exiting: a Snakemake that is killed or stopped must not leave a job measuring on."""
    parent = os.getppid()
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    done = threading.Event()

    def watch():
        while not done.wait(PARENT_POLL_S):
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGHUP)  # handled in the main thread
                return

    watcher = threading.Thread(target=watch, name="slotbench-parent-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        for s, handler in previous.items():
            signal.signal(s, handler)


def fail(message: str, log: TextIO | None = None, cause: BaseException | None = None) -> None:
    """Exit the job with a plain message instead of a traceback.

    When ``cause`` carries the server's whole answer (``body``: an HTML error page runs to
    dozens of lines, the message holds one line of it), the answer goes only to the job's log
    file and the message's first line says where it is, so the terminal stays readable."""
    body = getattr(cause, "body", None)
    file = getattr(log, "file", None)
    if body and file is not None:
        first, newline, rest = message.partition("\n")
        message = (f"{first} (the server's full answer is in {file.name})" + newline + rest)
    print(f"\nERROR: {message}", file=log or sys.stderr)
    if body and file is not None:
        file.write(f"\nThe server's full answer:\n{body.rstrip()}\n")
        file.flush()
    raise SystemExit(1)


def fail_and_withdraw(message: str, withdraw: list[str], log: TextIO | None = None) -> None:
    """Fail the job, and withdraw the outputs built from what it refuses (e.g. the report built
    from raw files that are now refused): they must not stay published as if nothing happened."""
    gone = [p for p in withdraw if Path(p).exists()]
    for path in gone:
        Path(path).unlink()
    if gone:
        message += (f" The report built from these raw files ({', '.join(gone)}) was withdrawn "
                    "until they are settled.")
    fail(message, log)
