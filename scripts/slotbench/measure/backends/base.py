"""What every backend returns for one streamed request, how it fails, and the one way every
backend streams: post through the transport, check the status, parse the body once it is over."""

from __future__ import annotations

import copy
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field, fields
from html.parser import HTMLParser
from urllib.parse import urlsplit

from slotbench.core.defaults import default
from slotbench.measure.backends.transport import (
    Answer,
    LoopThread,
    StreamError,
    lines,
    make_session,
)


_RUNNER_LOCK = threading.Lock()
# The most of a server's answer an error message shows: one line of it, for the terminal.
LINE_CHARS = 120


class BackendError(RuntimeError):
    """A request failed at the server or on the wire; the message says in one line what the
    server said. ``body`` keeps the server's whole answer when that line could not show all of
    it (an HTML page, a long text), for the job's log (slotbench.core.entry.fail)."""

    def __init__(self, message: str, body: str | None = None):
        super().__init__(message)
        self.body = body or None


@dataclass
class RequestRecord:
    """One streamed generation. Times are monotonic seconds (time.monotonic())."""

    t_sent: float
    t_first: float | None = None
    t_last: float | None = None  # arrival of the last chunk that carried generated text
    t_done: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    gen_s: float | None = None
    done_reason: str | None = None
    server: dict = field(default_factory=dict)
    chunks: int = 0
    # how the generated text arrived: the reads (socket reads, stamped on arrival) that carried
    # any, the text chunks in the last of them, and the most in any one; a stream buffered on
    # its way (a proxy, Nagle's algorithm) comes in few reads of many chunks
    # (checks/buffering.py)
    text_reads: int = 0
    last_read_chunks: int = 0
    most_read_chunks: int = 0
    # "server" when gen_s/output_tokens come from the server's own timings, "client" when they
    # were derived from token arrival times on this side (e.g. an OpenAI server without timings)
    timing_source: str = "server"
    answer: Answer | None = field(default=None, repr=False)  # the body, until parsed
    # an open-loop request's planned moment (loadgen: its TTFT and latency count from here)
    t_planned: float | None = None
    t_ready: float | None = None  # when the client got round to sending it (launch skew)
    # arrival of each non-blank line of the body, kept only for benchmarks (keep_arrivals)
    arrivals: list | None = field(default=None, repr=False)
    # a conversation's turn (workload multi_turn): its session and turn, the whole prompt sent
    # (the history and the new message) and the reply, which the next turn carries
    turn: dict | None = field(default=None, repr=False)

    def text_arrived(self, t: float) -> None:
        """A chunk of generated text arrived in the read stamped ``t``: the first and last
        token's times and the reads that carried text (chunks are counted by the caller)."""
        if self.t_first is None:
            self.t_first = t
        if t != self.t_last:
            self.text_reads += 1
            self.last_read_chunks = 0
        self.t_last = t
        self.last_read_chunks += 1
        self.most_read_chunks = max(self.most_read_chunks, self.last_read_chunks)

    def to_raw(self, origin: float) -> dict:
        """Times relative to ``origin`` (the rep's start), as stored in raw files."""
        out = {key: getattr(self, key) for key in RAW_FIELDS if key not in TIMES}
        out["server"] = copy.deepcopy(out["server"])
        for key in ("t_planned", "t_ready"):
            value = out.pop(key)
            if value is not None:
                out[f"{key}_s"] = value - origin
        if out["turn"] is None:
            del out["turn"]
        if out["arrivals"] is None:
            del out["arrivals"]
        else:
            out["arrivals"] = [t - origin for t in out["arrivals"]]
        for key in TIMES:
            value = getattr(self, key)
            out[f"{key}_s"] = None if value is None else value - origin
        return out


TIMES = ("t_sent", "t_first", "t_last", "t_done")
RAW_FIELDS = [f.name for f in fields(RequestRecord) if f.name != "answer"]



class Backend:
    """Interface: subclasses speak one server's protocol."""

    name = "base"
    path = "/"  # the generation endpoint, for messages

    def __init__(self, base_url: str, target: dict | None = None,
                 timeout_s: float | None = None):
        """``target`` is a resolved target (one made by hand gets the schema's defaults for its
        backend's keys); ``timeout_s`` the request timeout, request_timeout_s unless given."""
        self.base_url = base_url.rstrip("/")
        self.target = target or {}
        self.model = self.target.get("model")
        self.timeout_s = default("request_timeout_s") if timeout_s is None else timeout_s
        self.aborted = False
        self._runner: LoopThread | None = None
        self.session = make_session()  # the control plane (model facts, tokenizer, load)
        # benchmarks/fidelity.py: keep each line's arrival time (never set by the pipeline)
        self.keep_arrivals = bool(self.target.get("keep_arrivals"))

    # -- what each backend says -----------------------------------------------------------

    def request(self, prompt: str, num_predict: int, temperature: float, seed: int,
                allow_cache: bool) -> tuple[str, dict, dict]:
        """The generation's URL, JSON body and extra headers. ``allow_cache`` lets the server
        reuse a cached prompt prefix (only the control arm and a nonce-less plan ask for it;
        measured requests never do)."""
        raise NotImplementedError

    def parse(self, answer: Answer, rec: "RequestRecord") -> None:
        """Fill ``rec`` from a 200 answer's body (every event parsed as strict JSON), or raise
        the BackendError that says what the server did."""
        raise NotImplementedError

    def reply_text(self, answer: Answer) -> str:
        """The text a streamed answer generated, read from its body (a conversation's next turn
        carries it as history); the events that do not parse carry none."""
        texts = []
        for _, line in lines(answer.reads):
            payload = line[5:].strip() if line.startswith(b"data:") else line.strip()
            try:
                event = json.loads(payload)
            except ValueError:
                continue
            if isinstance(event, dict):
                texts.append(self.event_text(event))
        return "".join(texts)

    def event_text(self, event: dict) -> str:
        """The generated text one parsed stream event carries ("" where none)."""
        return ""

    def error_event(self, data: bytes) -> bool:
        """Whether a piece of body holding an error mark is an error event (read mid-stream)."""
        return any(_is_error(line) for _, line in lines([(0.0, data)]))

    def unreachable(self, exc: Exception) -> BackendError:
        return BackendError(f"POST {self.path}: cannot reach {self.base_url}: {exc}")

    def http_error(self, answer: Answer) -> BackendError:
        return BackendError(f"POST {self.path}: HTTP {answer.status_code}: {error_text(answer)}",
                            body=error_body(answer))

    # -- streaming ------------------------------------------------------------------------

    def generate(self, prompt: str, num_predict: int, temperature: float, seed: int,
                 allow_cache: bool = False) -> RequestRecord:
        """One streamed generation, from a caller that is not a coroutine (tests, tools)."""
        runner = self.runner()
        prepared = self.prepare(prompt, num_predict, temperature, seed, allow_cache)
        return runner.run(self.send(runner.client, prepared))

    def runner(self) -> LoopThread:
        """This backend's event loop thread (made on first use)."""
        with _RUNNER_LOCK:
            if self._runner is None:
                self._runner = LoopThread()
        return self._runner

    def prepare(self, prompt: str, num_predict: int, temperature: float, seed: int,
                allow_cache: bool = False) -> tuple[str, bytes, dict]:
        """A generation's URL, encoded body and headers, made before anything is timed."""
        url, body, headers = self.request(prompt, num_predict, temperature, seed, allow_cache)
        data = json.dumps(body, separators=(",", ":")).encode()
        return url, data, {"Content-Type": "application/json"} | headers

    async def send(self, client, prepared: tuple[str, bytes, dict],
                   finish: bool = True) -> RequestRecord:
        """One streamed generation on ``client`` (transport.Client). With ``finish=False`` a
        body that arrived whole is left unparsed in ``rec.answer`` for ``finish()`` later (a
        cell parses after its last request, so parsing never delays a stamp); a failed one
        raises at once, so the rep stops on it."""
        url, data, headers = prepared
        rec = RequestRecord(t_sent=time.monotonic())
        try:
            answer = await client.post(url, data, headers, self.timeout_s, self.error_event)
        except StreamError as exc:
            raise self.unreachable(exc) from None
        rec.t_sent = answer.t_sent if answer.t_sent is not None else rec.t_sent
        rec.answer = answer
        failed = (answer.error is not None or answer.error_event or answer.cut_reason
                  or answer.status_code != 200)
        if finish or failed:
            self.finish(rec)
        return rec

    def finish(self, rec: RequestRecord) -> RequestRecord:
        """Parse a streamed answer into ``rec``; raise what went wrong, named."""
        answer, rec.answer = rec.answer, None
        if answer is None:
            return rec
        if answer.cut_reason is not None:
            try:  # count what did arrive, for the message
                self.parse(answer, rec)
            except BackendError:
                pass
            raise self._cut_short(answer.cut_reason, rec)
        if answer.status_code == 0:
            raise self.unreachable(answer.error or StreamError("no answer"))
        if answer.status_code != 200:
            raise self.http_error(answer)
        kind = answer.headers.get("content-type", "")
        if kind.startswith("text/html"):  # a web site, not an inference server
            raise BackendError(
                f"POST {self.path}: {self.base_url} answered a web page ({kind}), not a "
                f"{self.name} stream; are the target's url and backend right?", body=answer.text
            )
        self.parse(answer, rec)
        rec.t_done = answer.t_done
        if self.keep_arrivals:
            rec.arrivals = [t for t, line in lines(answer.reads) if line.strip()]
        return rec

    def abort(self) -> None:
        """End every stream being read now and any about to start, from any thread: each of
        their generations raises a BackendError. For a rep that stops (a failed request, an
        interrupt), so it does not wait for the others to finish or time out."""
        self.aborted = True
        if self._runner is not None:
            self._runner.call(self._runner.client.abort)

    def _cut_short(self, reason: str, rec: RequestRecord) -> BackendError:
        if reason == "abort":
            return BackendError(f"POST {self.path} was abandoned after {rec.chunks} chunks: the "
                                "rep stopped")
        return BackendError(
            f"POST {self.path} took longer than request_timeout_s ({self.timeout_s:g} s) after "
            f"{rec.chunks} chunks; the server is too slow or stalled (raise request_timeout_s "
            "if it is only slow)"
        )

    def tokenizer(self):
        """A callable text → token count, or None when the server cannot tokenize.

        Without one the plan cannot equalise prompt lengths up front; the checks still verify
        equality from the server-reported prompt token counts.
        """
        return None

    def pin_outputs(self) -> bool:
        """Make every later request produce exactly the tokens it asks for (its end-of-sequence
        token ignored), where the server can; whether it can. A workload's planned output length
        is pinned where this is True, else only a ceiling."""
        return False

    def slot_context(self) -> tuple[int, str] | None:
        """The tokens one request may hold (prompt and output together), and where that number
        comes from; None where the server does not say."""
        return None

    def load(self) -> None:
        """Bring the model into memory with the measured requests' load-time options.

        Called before the warm-up generations; a no-op where the server has nothing to load.
        """

    def placement(self) -> list | dict | None:
        """Where the server holds the model, asked just before and just after each cell (Ollama's
        /api/ps); None where the server has no such endpoint."""
        return None

    def describe(self) -> dict:
        """Server facts for the fingerprint and for every raw rep file (version, slots, …)."""
        raise NotImplementedError

    def model_facts(self, described: dict) -> dict:
        """Model facts (quantisation, digest, size …) from what describe() returned."""
        return {}

    @staticmethod
    def now() -> float:
        return time.monotonic()


def _is_error(line: bytes) -> bool:
    """An SSE ``error:`` event, or a JSON line or ``data:`` event whose object has "error"."""
    if line.startswith(b"error:"):
        return True
    payload = line[5:] if line.startswith(b"data:") else line
    try:
        event = json.loads(payload)
    except ValueError:
        return False
    return isinstance(event, dict) and ("error" in event or event.get("object") == "error")


def error_message(body) -> str:
    """The message in a server's decoded error body or event: ``{"error": {"message": …}}``
    (OpenAI, vLLM, llama.cpp), ``{"error": text}`` or ``{"message": …}``, else all of it."""
    err = body.get("error", body) if isinstance(body, dict) else body
    return str(err.get("message", err)) if isinstance(err, dict) else str(err)


def error_text(resp) -> str:
    """What an error answer (requests.Response or transport.Answer) said, in one line of at
    most LINE_CHARS characters: the JSON body's message (:func:`error_message`), else the body
    (:func:`body_line`: an HTML page by its title), else the reason phrase."""
    return _said(resp)[0]


def error_body(resp) -> str | None:
    """An error answer's whole body when :func:`error_text` could not show all of it (for the
    job's log), else None."""
    return _said(resp)[1]


def _said(resp) -> tuple[str, str | None]:
    text = resp.text or ""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if body is None:
        line = body_line(text) or resp.reason or "an empty answer"
        return line, text if text.strip() and line != text.strip() else None
    message = error_message(body)
    line = one_line(message) or resp.reason or "an empty message"
    return line, text if line != message else None


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` with its whitespace (newlines too) collapsed, cut to ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def body_line(text: str | None, limit: int = LINE_CHARS, quote: bool = False) -> str:
    """A body fit for one line of a message, at most ``limit`` characters: an HTML page as
    ``an HTML page titled "…"`` (untitled: by its first line of text), other markup by its
    text, any other text as it is; tags stripped, whitespace collapsed, in quotes with
    ``quote``; "" for no body. Error pages run to dozens of lines; the terminal gets one."""
    text = text or ""
    page = _Page.read(text) if _is_markup(text) else None
    if page is not None and (page.title or page.is_page):
        lead, words = (("an HTML page titled ", page.title) if page.title else
                       ("an HTML page: ", page.first_line() or "no text"))
        return lead + json.dumps(one_line(words, limit - len(lead) - 2), ensure_ascii=False)
    if page is not None:
        text = "".join(page.text)
    if quote:
        return repr(one_line(text, limit - 2)) if text.strip() else "nothing"
    return one_line(text, limit)


def _is_markup(text: str) -> bool:
    """Whether a body is HTML (or XML): it opens with a tag and closes one."""
    head = text.lstrip()[:2000].lower()
    return head.startswith("<") and re.search(r"</[a-z][\w-]*\s*>|<!doctype html|<html\b",
                                              head) is not None


class _Page(HTMLParser):
    """An HTML page's title and its text, split into lines where blocks break."""

    BREAKS = {"br", "p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "tr", "pre", "hr",
              "body", "center", "table", "address", "header", "footer", "main", "section"}
    HIDDEN = {"script", "style", "head"}
    PAGE = {"html", "head", "body", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title, self.text, self._open, self.is_page = "", [], [], False

    @classmethod
    def read(cls, text: str) -> "_Page":
        page = cls()
        page.feed(text)
        page.close()
        page.title = " ".join(page.title.split())
        return page

    def handle_decl(self, decl):
        self.is_page = self.is_page or decl.lower().startswith("doctype html")

    def handle_starttag(self, tag, attrs):
        self.is_page = self.is_page or tag in self.PAGE
        self.text.append("\n" if tag in self.BREAKS else " ")  # adjacent tags' texts apart
        if tag == "body" and "head" in self._open:  # a head left open ends here
            self._open.clear()
        if tag in self.HIDDEN or tag == "title":
            self._open.append(tag)

    def handle_endtag(self, tag):
        self.text.append("\n" if tag in self.BREAKS else " ")
        if tag in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag):]

    def handle_data(self, data):
        if "title" in self._open:
            self.title += data
        elif not self._open:
            self.text.append(data)

    def first_line(self) -> str:
        return next((" ".join(line.split()) for line in "".join(self.text).splitlines()
                     if line.strip()), "")


def finite(value, field_name: str, rec: RequestRecord):
    """A server's number as sent, or None when it is not a finite number (NaN, infinity, text),
    noted in rec.server["invalid"] so the cross-check names it and raw files stay valid JSON."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if math.isfinite(number):
        return value
    note = f"{field_name}={value!r}"
    if note not in rec.server.setdefault("invalid", []):
        rec.server["invalid"].append(note)
    return None
