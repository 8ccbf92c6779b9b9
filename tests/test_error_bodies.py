"""A server's error answer becomes one line of a message: an HTML page by its title,
a JSON error by its message, any text collapsed and cut; the whole answer rides along on the
error (``body``) and goes only to the job's log, whose path the terminal line names.

The same through the real ``snakemake`` command: tests/test_faults.py
(test_an_html_error_page_is_one_line_and_the_log_holds_it)."""

from __future__ import annotations

import io
import json

import pytest

from doubles.fault_server import ERROR_PAGE, ERROR_PAGE_TITLE, FaultServer
from slotbench.core.entry import Tee, fail
from slotbench.measure.backends import BackendError
from slotbench.measure.backends.base import LINE_CHARS, body_line, error_body, error_text
from slotbench.measure.backends.llamacpp import LlamaCppBackend
from slotbench.measure.backends.transport import Answer
from slotbench.measure.execute import RepError

UNTITLED = (b"<html>\n<head><style>h1 { color: red }</style></head>\n<body>\n"
            b"<h1>Service   Unavailable</h1>\n<p>Back soon.</p>\n</body>\n</html>\n")
LONG_TEXT = ("upstream connect error or disconnect/reset before headers. reset reason: "
             "connection termination\n" * 10).encode()
JSON_ERROR = json.dumps({"error": {"code": 500, "type": "server_error", "message":
                                   "llama_decode failed:\n" + "out of memory " * 20}}).encode()


def answer(status: int, body: bytes, reason: str = "Not Implemented") -> Answer:
    out = Answer()
    out.status_code, out.reason, out.reads = status, reason, [(0.0, body)] if body else []
    return out


@pytest.mark.parametrize("body, shown, kept", [
    (ERROR_PAGE, f'an HTML page titled "{ERROR_PAGE_TITLE}"', True),
    (UNTITLED, 'an HTML page: "Service Unavailable"', True),
    (LONG_TEXT, "upstream connect error or disconnect/reset before headers. reset reason: "
                "connection termination upstream", True),
    (JSON_ERROR, "llama_decode failed: out of memory out of memory", True),
    (b'{"error": {"code": 503, "message": "Loading model"}}', "Loading model", False),
    (b"", "Not Implemented", False),
], ids=["html with title", "html without title", "long text", "json", "short json", "empty"])
def test_an_error_body_is_one_short_line(body, shown, kept):
    said = error_text(answer(501, body))
    assert said.startswith(shown)
    assert "\n" not in said and len(said) <= LINE_CHARS
    assert "<" not in said
    assert error_body(answer(501, body)) == (body.decode() if kept else None)


def test_an_empty_body_without_a_reason_still_says_something():
    assert error_text(answer(502, b"", reason="")) == "an empty answer"


def test_a_long_title_is_cut_to_the_line():
    page = b"<html><head><title>" + b"Gateway Timeout " * 30 + b"</title></head></html>"
    said = body_line(page.decode())
    assert said.startswith('an HTML page titled "Gateway Timeout') and said.endswith('…"')
    assert len(said) <= LINE_CHARS


@pytest.fixture(scope="module")
def server():
    with FaultServer(slots=2, measured_predict=8) as srv:
        yield srv


def test_the_backend_error_says_one_line_and_keeps_the_whole_page(server):
    server.tokenize_fault = "http501_html"
    backend = LlamaCppBackend(server.url, timeout_s=5)
    try:
        with pytest.raises(BackendError) as tokenize:
            backend.count_tokens("hello")
    finally:
        server.tokenize_fault = None
    server.arm("http501_html")
    try:
        with pytest.raises(BackendError) as completion:
            backend.generate("Request 123456. Say something.", 8, 0.0, 1)
    finally:
        server.arm(None)
    for exc, path in ((tokenize.value, "/tokenize"), (completion.value, "/completion")):
        assert str(exc) == f'POST {path}: HTTP 501: an HTML page titled "{ERROR_PAGE_TITLE}"'
        assert exc.body == ERROR_PAGE.decode()


def test_a_web_page_where_json_belongs_is_named_by_its_title(server):
    server.web_page = True
    try:
        with pytest.raises(BackendError, match=r'answered an HTML page titled "Welcome to '
                                               r'nginx!", not llama-server\'s token list') as exc:
            LlamaCppBackend(server.url, timeout_s=5).count_tokens("hello")
    finally:
        server.web_page = False
    assert "<h1>Welcome to nginx!</h1>" in exc.value.body


def test_fail_puts_the_whole_answer_in_the_log_only(tmp_path):
    terminal = io.StringIO()
    path = tmp_path / "run1.log"
    cause = BackendError('POST /tokenize: HTTP 501: an HTML page titled "501"',
                         body=ERROR_PAGE.decode())
    with open(path, "w", encoding="utf-8") as fh, pytest.raises(SystemExit):
        fail(f"target fault, run run1, plan: {cause}", Tee(terminal, fh, file=fh), cause=cause)
    lines = terminal.getvalue().strip().splitlines()
    assert lines == [f'ERROR: target fault, run run1, plan: POST /tokenize: HTTP 501: an HTML '
                     f"page titled \"501\" (the server's full answer is in {path})"]
    logged = path.read_text()
    assert logged.startswith("\n" + lines[0] + "\n") and ERROR_PAGE.decode() in logged


def test_a_rep_error_points_at_the_log_on_its_first_line(tmp_path):
    """A rep's message runs to several lines (what became of the rep, how to resume); the
    pointer to the log ends the first, the one that says what failed."""
    error = RepError("target fault, run run1, rep 2, arm 2 (position 0), request 3: POST "
                     "/completion: HTTP 501: …\nThis rep was not recorded; reps already "
                     "written stay valid.", body="<html>the page</html>")
    terminal = io.StringIO()
    with open(tmp_path / "rep2.log", "w") as fh, pytest.raises(SystemExit):
        fail(str(error), Tee(terminal, fh, file=fh), cause=error)
    lines = terminal.getvalue().strip().splitlines()
    assert lines[0].endswith("request 3: POST /completion: HTTP 501: … (the server's full "
                             f"answer is in {tmp_path / 'rep2.log'})")
    assert lines[1].startswith("This rep was not recorded") and "<html>" not in terminal.getvalue()
