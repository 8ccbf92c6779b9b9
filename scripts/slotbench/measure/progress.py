"""A rep's progress on the terminal: one line, rewritten in place (``\\r``) about twice a second
while a cell runs: the arm, its requests done of its total, and the tokens a second so far.
Nothing is written when stderr is not a terminal (a log file, a pipe, a cluster job's output).

It costs the measurement nothing it could see: the line is drawn by a thread of its own, which
only reads what the cell's event loop already keeps (the records of the requests that are done,
their bodies still unparsed: loadgen parses after the cell), so the loop does no extra work per
chunk. Tokens of a request still streaming are counted once it is done; a request's tokens are
its events (one per token on every backend's stream), counted from its body until the cell
parses it, and its parsed count after.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

from slotbench.measure.backends.transport import lines

REDRAW_S = 0.5  # at most about two updates a second
CLEAR = "\r\x1b[K"  # back to the line's start, and erase it
NOT_TOKENS = (b"data: [DONE]", b"event:", b":")  # lines of a stream that carry no token


def on_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def streamed_tokens(rec) -> int:
    """A finished request's tokens: its parsed count, else its body's events (SSE ``data:``
    lines, NDJSON objects), the final one's summary included."""
    if getattr(rec, "output_tokens", None) is not None:
        return rec.output_tokens
    answer = getattr(rec, "answer", None)
    if answer is None:
        return 0
    return sum(1 for _, line in lines(list(answer.reads))
               if line.strip() and not line.startswith(NOT_TOKENS))


class Progress:
    """The progress line of one rep; a context manager that draws it while it is open."""

    clock = staticmethod(time.monotonic)

    def __init__(self, label: str, stream: TextIO | None = None):
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.enabled = on_terminal(self.stream)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.cell: tuple[str, int, float] | None = None  # (what, total requests, start)
        self.records: list | None = None  # the running cell's records (loadgen fills them in)
        self.counted: dict[int, int] = {}  # tokens of each finished request, once counted
        self.shown = False

    # -- what the rep says ---------------------------------------------------------------------

    def start_cell(self, what: str, total: int) -> None:
        """A cell begins: ``what`` it is (e.g. "position 1: arm 2"), its requests."""
        if not self.enabled:
            return
        with self.lock:
            self.cell, self.records, self.counted = (what, total, self.clock()), None, {}
        self.draw()

    def watch(self, records: list) -> None:
        """The list the event loop puts each request's record in when it is done (called once
        per cell, before its timing starts)."""
        if self.enabled:
            self.records = records

    def end_cell(self) -> None:
        """The cell is over: its line goes, so the rep's log line takes its place."""
        if not self.enabled:
            return
        with self.lock:
            self.cell, self.records = None, None
            self._write(CLEAR if self.shown else "")
            self.shown = False

    # -- the line --------------------------------------------------------------------------------

    def line(self) -> str | None:
        if self.cell is None:
            return None
        what, total, started = self.cell
        records = self.records or []
        for i, rec in enumerate(list(records)):
            if rec is not None and i not in self.counted:
                self.counted[i] = streamed_tokens(rec)
        done = len(self.counted)
        text = f"[{self.label}] {what}: {done}/{total} requests"
        elapsed = self.clock() - started
        tokens = sum(self.counted.values())
        if tokens and elapsed > 0:
            text += f", {tokens / elapsed:.1f} tok/s so far"
        return text

    def draw(self) -> None:
        with self.lock:
            text = self.line()
            if text is None:
                return
            width = _columns(self.stream) - 1  # a line that wraps cannot be rewritten
            self._write(CLEAR + text[:width])
            self.shown = True

    def _write(self, text: str) -> None:
        if not text:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop drawing
            self.enabled = False

    def _run(self) -> None:
        while not self.stop.wait(REDRAW_S):
            self.draw()

    def __enter__(self) -> "Progress":
        if self.enabled:
            self.thread = threading.Thread(target=self._run, name="slotbench-progress",
                                           daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        self.end_cell()


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80
