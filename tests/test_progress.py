"""A rep's progress line: drawn in place on a terminal (a pseudo-terminal here, as a user's
shell gives the rep's job), never when stderr is a pipe or a file, and never in the rep's log.
The rep runs against the scripted llama-server, through the real backend and client."""

from __future__ import annotations

import io
import os
import pty
import select
import sys
import threading

import pytest

from doubles.fault_server import FaultServer
from slotbench.measure.backends import make_backend
from slotbench.measure.backends.base import RequestRecord
from slotbench.measure.backends.transport import Answer
from slotbench.measure.execute import run_rep
from slotbench.measure.plan import make_rep_plan, run_plan
from slotbench.measure.progress import CLEAR, Progress, streamed_tokens

SETTINGS = {"num_predict": 8, "temperature": 0.0, "warmup_predict": 2, "request_timeout_s": 10,
            "cooldown_s": 0, "thermal_interval_s": 1.0}


class Connection:
    """A Connection's face for an external server: its backend, no managed server."""

    def __init__(self, backend):
        self.backend, self.server, self.target = backend, None, backend.target

    def describe(self):
        return {"backend": "llamacpp", "managed": False}

    def reps_before(self):
        return 0

    def rep_measured(self):
        pass


def rep_with_stderr(monkeypatch, stream, url: str) -> tuple[dict, str]:
    """One rep (arms 1 and 2, two requests each) with ``stream`` as sys.stderr; its raw record
    and what it wrote to its log."""
    target = {"name": "t", "backend": "llamacpp", "managed": False, "url": url}
    plan = run_plan("t", "run1", [1, 2], 2, 1, "Request {nonce}. Go.", 6, nonces=True,
                    control_arm=False)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    raw = run_rep(Connection(make_backend(target, url, 10)), plan,
                  make_rep_plan(plan, 1, client_processes=1), SETTINGS, {}, log=log)
    stream.flush()
    return raw, log.getvalue()


def read_all(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        out += chunk
    return out


class Recording:
    """A stream that notes which thread wrote to it."""

    def __init__(self, stream):
        self.stream, self.threads = stream, set()

    def isatty(self):
        return self.stream.isatty()

    def fileno(self):
        return self.stream.fileno()

    def write(self, text):
        self.threads.add(threading.current_thread().name)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def test_on_a_terminal_the_line_is_drawn_in_place_and_erased_after_each_cell(monkeypatch):
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "w", encoding="utf-8")
    recording = Recording(terminal)
    try:
        with FaultServer() as server:
            raw, log = rep_with_stderr(monkeypatch, recording, server.url)
        drawn = read_all(master).decode()
    finally:
        terminal.close()
        os.close(master)
    for cell in raw["cells"]:
        arm = cell["arm"]
        assert f"\r\x1b[K[t run1 rep 1] position {cell['position']}: arm {arm}: 0/2 requests" \
            in drawn, drawn
    assert drawn.count(CLEAR) >= 2 * len(raw["cells"])  # drawn, then erased, for every cell
    assert drawn.endswith(CLEAR)  # nothing is left on the line for the next output
    assert "\n" not in drawn.replace("\r\n", "")  # one line, rewritten
    assert "\r" not in log and "tok/s" in log
    assert all(len(c["requests"]) == 2 for c in raw["cells"])
    # the rep's own thread and the line's, never the event loop that stamps the tokens
    assert recording.threads <= {threading.main_thread().name, "slotbench-progress"}


def test_through_a_pipe_nothing_is_drawn(monkeypatch):
    read, write = os.pipe()
    pipe = os.fdopen(write, "w", encoding="utf-8")
    with FaultServer() as server:
        raw, log = rep_with_stderr(monkeypatch, pipe, server.url)
    pipe.close()
    with os.fdopen(read, "rb") as fh:
        assert fh.read() == b""
    assert "tok/s" in log and "\r" not in log  # the log has its lines, the pipe nothing
    assert [len(c["requests"]) for c in raw["cells"]] == [2, 2]


def llama_answer(tokens: int) -> Answer:
    """A finished llama-server stream as the transport keeps it: one read per event."""
    answer = Answer()
    events = [b'data: {"content":" w","stop":false}\n\n'] * tokens
    events.append(b'data: {"content":"","stop":true,"timings":{"predicted_n":%d}}\n\n' % tokens)
    answer.reads = [(float(i), e) for i, e in enumerate(events)]
    return answer


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_line_counts_the_finished_requests_and_their_tokens():
    now = [100.0]
    out = Terminal()
    progress = Progress("t run1 rep 1", out)
    progress.clock = lambda: now[0]
    progress.start_cell("position 0: arm 2", 4)
    assert out.getvalue() == CLEAR + "[t run1 rep 1] position 0: arm 2: 0/4 requests"
    now[0] = 102.0
    done, parsed = RequestRecord(t_sent=0.0), RequestRecord(t_sent=0.0, output_tokens=10)
    done.answer = llama_answer(29)
    progress.watch([done, None, parsed, None])
    # 29 token events and the final one, and 10 parsed tokens, in 2 s
    assert progress.line() == "[t run1 rep 1] position 0: arm 2: 2/4 requests, 20.0 tok/s so far"
    assert streamed_tokens(done) == 30 and streamed_tokens(parsed) == 10


def test_not_on_a_terminal_nothing_is_done():
    out = io.StringIO()
    with Progress("x", out) as progress:
        progress.start_cell("arm 1", 4)
        progress.end_cell()
    assert progress.thread is None and out.getvalue() == ""


@pytest.mark.parametrize("stream", [None, object()])
def test_a_stream_without_isatty_is_no_terminal(stream, monkeypatch):
    if stream is None:
        monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not Progress("x", stream).enabled
