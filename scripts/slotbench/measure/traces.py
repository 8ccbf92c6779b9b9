"""Request traces of LLM serving: when real users' requests arrived and how long they were, read
from the files their publishers released, for workloads that replay them.

Three formats, each read exactly as its publisher defines it:

- ``mooncake`` (Mooncake's FAST'25 traces, JSON Lines): one object a line, ``timestamp`` (ms from
  the trace's start), ``input_length``, ``output_length`` and ``hash_ids``, one id per 512-token
  block of the input; requests whose hash_ids begin alike share that prefix (and its KV cache).
- ``azure`` (the Azure LLM inference trace of 2023, CSV): ``TIMESTAMP,ContextTokens,
  GeneratedTokens``, the time a date and clock with 7 fractional digits of the second (100 ns;
  Python's %f takes at most 6, so it is read here by hand), CRLF line endings and no newline
  after the last row.
- ``burstgpt`` (BurstGPT, CSV): ``Timestamp`` in seconds from midnight of the first day (a whole
  number or not), ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log
  Type``. A row of 0 response tokens is a request that failed: it is dropped from the rows and
  counted in ``Trace.dropped["failed"]``, its fields checked all the same.

A trace is read whole and strictly: a row out of time order, malformed, negative or missing a
field stops the read with a TraceError naming file:line and the field, rather than replaying a
trace other than the one published. Rows keep the file's order; times become seconds from the
first row kept.

A workload takes a trace's lengths alone (sample_lengths, drawn with replacement) or a window of
its consecutive rows with their gaps (replay_window), scaled to what a small model's context holds
(length_scale) and its server keeps up with (time_scale). The repository ships no real rows:
config/workloads/traces/ holds a small synthetic trace of each format (example_trace).
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

FORMATS = ("mooncake", "azure", "burstgpt")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_HEADER = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
                   "Log Type")
HEADERS = {"azure": AZURE_HEADER, "burstgpt": BURSTGPT_HEADER}
AZURE_TICKS_PER_S = 10**7  # Azure's TIMESTAMP resolution: 100 ns
# each format's time field, and how many of its units make a second
TIME_FIELD = {"mooncake": ("timestamp", 1000), "azure": ("TIMESTAMP", AZURE_TICKS_PER_S),
              "burstgpt": ("Timestamp", 1)}
MOONCAKE_BLOCK_TOKENS = 512  # Mooncake's prefix blocks: one hash id per 512 input tokens
# the key of Trace.dropped that counts BurstGPT's failed requests (0 response tokens)
FAILED = "failed"
EXAMPLE_SEED = 1  # the committed examples' (config/workloads/traces/), not the config's seed

_AZURE_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,7}))?", re.ASCII)
_INTEGER = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?")


class TraceError(ValueError):
    """A trace that cannot be read as published; the message is one line naming the file, and
    the line of the row at fault where there is one."""


@dataclass(frozen=True)
class TraceRow:
    """One request: when it arrived (seconds from the trace's first row), its input and output
    tokens, and (Mooncake only) the ids of its input's 512-token prefix blocks."""

    t_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Trace:
    """A trace read whole: its file, its format, its rows in the file's (time) order, and how
    many rows were left out for which reason (reason -> count; BurstGPT's ``failed``)."""

    path: str
    format: str
    rows: tuple[TraceRow, ...]
    dropped: dict[str, int]


def detect_format(path: str | Path) -> str:
    """The trace's format, from its first line: a JSON object with Mooncake's keys, or Azure's
    or BurstGPT's CSV header. Anything else is a TraceError that shows what line 1 holds."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        return _format_of(path, f.readline(1 << 20).rstrip("\r\n"))


def _format_of(path, first: str) -> str:
    if first.startswith("{"):
        try:
            keys = set(json.loads(first))
        except (ValueError, TypeError):
            keys = set()
        if set(MOONCAKE_KEYS) <= keys:
            return "mooncake"
    header = tuple(first.split(","))
    for fmt, expected in HEADERS.items():
        if header == expected:
            return fmt
    raise TraceError(f"{path}:1: not a trace of a known format ({', '.join(FORMATS)}): "
                     f"line 1 is {_show(first) if first else 'empty'}")


def read_trace(path: str | Path, format: str) -> Trace:
    """Every row of the trace at ``path``, in ``format`` (one of FORMATS, or ``auto``: from its
    first line, as detect_format). Strict: a row out of time order (time going back; equal times
    are fine), malformed, negative or missing a field, a blank line between rows, or a trace with
    no rows at all, is a TraceError naming file:line and the field."""
    if format != "auto" and format not in FORMATS:
        raise TraceError(f"{path}: no trace format {format!r}; one of auto, {', '.join(FORMATS)}")
    lines = _lines(path)
    fmt = _format_of(path, lines[0] if lines else "") if format == "auto" else format
    header = HEADERS.get(fmt)
    if header and (not lines or tuple(lines[0].split(",")) != header):
        raise TraceError(f"{path}:1: not the {fmt} header {','.join(header)!r} but "
                         f"{_show(lines[0]) if lines else 'an empty file'}")
    records = _mooncake(path, lines) if fmt == "mooncake" else _csv(path, lines, fmt)
    return _assemble(str(path), fmt, records)


def _lines(path) -> list[str]:
    """The file's lines without their endings (CRLF or LF), blank lines at its end left out."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text") from None
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    blank = next((number for number, line in enumerate(lines, 1) if not line.strip()), None)
    if blank is not None:
        raise TraceError(f"{path}:{blank}: an empty line between rows")
    return lines


def _mooncake(path, lines: list[str]) -> list[tuple]:
    found = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError as e:
            raise TraceError(f"{path}:{number}: not a JSON object ({e.msg}, column {e.colno})"
                             ) from None
        if not isinstance(row, dict):
            raise TraceError(f"{path}:{number}: not a JSON object but {_show(row)}")
        try:
            t, inp, out, ids = (row[k] for k in MOONCAKE_KEYS)
        except KeyError as e:
            raise TraceError(f"{path}:{number}: no {e.args[0]!r} field") from None
        if (not isinstance(ids, list) or not set(map(type, ids)) <= {int}
                or min(ids, default=0) < 0):
            raise TraceError(f"{path}:{number}: hash_ids is {_show(ids)}, not a list of "
                             "non-negative integers")
        found.append((number, _time(path, number, "timestamp", t),
                      _count(path, number, "input_length", inp),
                      _count(path, number, "output_length", out), tuple(ids)))
    return found


def _csv(path, lines: list[str], fmt: str) -> list[tuple]:
    header, found, days = HEADERS[fmt], [], {}
    counts = (1, 2) if fmt == "azure" else (2, 3)  # the input's and the output's columns
    for number, line in enumerate(lines[1:], 2):
        fields = line.split(",")  # as published: no field quoted, none holding a comma
        if len(fields) != len(header):
            missing = f"no {header[len(fields)]!r} field: " if len(fields) < len(header) else ""
            raise TraceError(f"{path}:{number}: {missing}{len(fields)} fields, where the header "
                             f"has {len(header)}")
        if fmt == "azure":
            t = _azure_ticks(path, number, fields[0], days)
        else:
            for i in (1, 5):  # Model, Log Type
                if not fields[i].strip():
                    raise TraceError(f"{path}:{number}: {header[i]} is empty")
            _count(path, number, header[4], fields[4])  # Total tokens: checked, not used
            t = _time(path, number, header[0], fields[0])
        found.append((number, t, *(_count(path, number, header[i], fields[i]) for i in counts),
                      None))
    return found


def _assemble(path: str, fmt: str, records: list[tuple]) -> Trace:
    """The rows in time order, from the first kept row's time; BurstGPT's failures dropped."""
    field, per_second = TIME_FIELD[fmt]
    rows, dropped = [], ({FAILED: 0} if fmt == "burstgpt" else {})
    first = previous = None
    previous_line = 0
    for number, t, inp, out, ids in records:
        if previous is not None and t < previous:
            raise TraceError(f"{path}:{number}: {field} is earlier than on line {previous_line}: "
                             "the rows must be in time order")
        previous, previous_line = t, number
        if fmt == "burstgpt" and out == 0:
            dropped[FAILED] += 1
            continue
        if first is None:
            first = t
        rows.append(TraceRow((t - first) / per_second, inp, out, ids))
    if not rows:
        failed = f" ({dropped[FAILED]} failed requests, dropped)" if dropped.get(FAILED) else ""
        raise TraceError(f"{path}: no rows{failed}")
    return Trace(path, fmt, tuple(rows), dropped)


def _count(path, number: int, field: str, raw) -> int:
    """A token count: a whole number, not negative (a JSON integer, or a CSV field's digits)."""
    if type(raw) is int:
        n = raw
    elif type(raw) is str and _INTEGER.fullmatch(raw):
        n = int(raw)
    else:
        raise TraceError(f"{path}:{number}: {field} is {_show(raw)}, not a whole number")
    if n < 0:
        raise TraceError(f"{path}:{number}: {field} is {n}, negative")
    return n


def _time(path, number: int, field: str, raw) -> float:
    """A time in the trace's own unit: a finite number, not negative."""
    if type(raw) in (int, float):
        t = raw
    elif type(raw) is str and _NUMBER.fullmatch(raw):
        t = float(raw)
    else:
        raise TraceError(f"{path}:{number}: {field} is {_show(raw)}, not a number")
    if not math.isfinite(t) or t < 0:
        raise TraceError(f"{path}:{number}: {field} is {t}, "
                         f"{'negative' if t < 0 else 'not a finite number'}")
    return t


def _azure_ticks(path, number: int, text: str, days: dict[str, int]) -> int:
    """An Azure TIMESTAMP in 100 ns ticks since 0001-01-01 (``days`` caches each date's day)."""
    match = _AZURE_TIME.fullmatch(text)
    try:
        if match is None:
            raise ValueError(text)
        _, _, _, hour, minute, second, fraction = match.groups()
        if (day := days.get(text[:10])) is None:
            day = days[text[:10]] = date.fromisoformat(text[:10]).toordinal()
        h, m, s = int(hour), int(minute), int(second)
        if h > 23 or m > 59 or s > 59:
            raise ValueError(text)
    except ValueError:
        raise TraceError(f"{path}:{number}: TIMESTAMP is {_show(text)}, not a time like "
                         "2023-11-16 18:15:46.1234567") from None
    seconds = ((day * 24 + h) * 60 + m) * 60 + s
    return seconds * AZURE_TICKS_PER_S + int((fraction or "").ljust(7, "0"))


def _show(value, width: int = 60) -> str:
    text = repr(value) if value != "" else "empty"
    return text if len(text) <= width else text[: width - 1] + "…"


def _positive(name: str, value) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, not {value!r}")


def scale_length(n: int, length_scale: float) -> int:
    """A trace's token count scaled: round(n × length_scale), never below 1 (a request of 0
    tokens cannot be sent, and a row of 0 scales to 1)."""
    _positive("length_scale", length_scale)
    if n < 0:
        raise ValueError(f"a token count cannot be negative: {n}")
    return max(1, round(n * length_scale))


def sample_lengths(trace: Trace, n: int, rng: random.Random,
                   length_scale: float) -> list[tuple[int, int]]:
    """``n`` (input, output) token pairs of rows drawn with replacement, each scaled by
    ``length_scale``: the trace's joint lengths without its times. From ``rng`` alone."""
    _positive("length_scale", length_scale)
    picked = [rng.choice(trace.rows) for _ in range(n)]
    return [(scale_length(r.input_tokens, length_scale),
             scale_length(r.output_tokens, length_scale)) for r in picked]


def replay_window(trace: Trace, n: int, rng: random.Random, time_scale: float,
                  length_scale: float) -> list[dict]:
    """``n`` consecutive rows from a start ``rng`` draws, as requests to replay: ``offset_s``
    from the window's first row (the trace's gaps × ``time_scale``: below 1 arrives faster),
    scaled ``input_tokens`` and ``output_tokens``, ``row`` (its index in the trace) and
    ``prefix`` (Mooncake's block ids, see prefix_blocks; None in other formats). A trace of
    fewer than ``n`` rows is a TraceError."""
    _positive("time_scale", time_scale)
    _positive("length_scale", length_scale)
    if n < 0 or n > len(trace.rows):
        raise TraceError(f"{trace.path}: a window of {n} rows, but the trace has "
                         f"{len(trace.rows)}")
    start = rng.randrange(len(trace.rows) - n + 1)
    window = trace.rows[start : start + n]
    t0 = window[0].t_s if window else 0.0
    return [{"offset_s": (row.t_s - t0) * time_scale,
             "input_tokens": scale_length(row.input_tokens, length_scale),
             "output_tokens": scale_length(row.output_tokens, length_scale),
             "row": start + i,
             "prefix": None if row.hash_ids is None else list(row.hash_ids)}
            for i, row in enumerate(window)]


def prefix_blocks(row: TraceRow, length_scale: float) -> tuple[int, tuple[int, ...]] | None:
    """A Mooncake row's prefix at ``length_scale``: (tokens per block: 512 × length_scale, at
    least 1; the block ids), id i naming the prompt's tokens i × block to (i + 1) × block; None
    without hash_ids. The last block is partial, and rounding can leave the scaled input a little
    longer or shorter than the ids cover: a prompt cuts them at its length or fills the rest."""
    if row.hash_ids is None:
        return None
    return scale_length(MOONCAKE_BLOCK_TOKENS, length_scale), row.hash_ids


def length_quantiles(values, qs=(0.1, 0.5, 0.9, 0.99)) -> dict[float, int]:
    """q -> the nearest-rank quantile of ``values`` (the smallest value with a share q of them at
    or below it): for the report that sets the lengths sent beside the trace's."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values to take quantiles of")
    found = {}
    for q in qs:
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile is between 0 and 1, not {q}")
        # exact for a decimal q: 0.07 of 100 values is rank 7, not the float 7.000000000000001's 8
        rank = max(1, math.ceil(Decimal(repr(q)) * len(ordered)))
        found[q] = ordered[rank - 1]
    return found


def example_trace(format: str, rows: int = 64, seed: int = EXAMPLE_SEED) -> str:
    """A small synthetic trace of ``rows`` rows in ``format``, exactly as its publisher writes
    one, from ``seed`` alone: lognormal lengths near the real traces' medians, exponential gaps
    (Poisson arrivals). Mooncake's later turns of a conversation share an earlier turn's full
    blocks; Azure's times carry all 7 digits (CRLF, no newline after the last row); BurstGPT's
    whole seconds and one request in 20 or so failed (0 response tokens)."""
    if format not in FORMATS:
        raise ValueError(f"no trace format {format!r}; one of {', '.join(FORMATS)}")
    if rows < 1:
        raise ValueError(f"an example trace has at least one row, not {rows}")
    write = {"mooncake": _example_mooncake, "azure": _example_azure}.get(format, _example_burstgpt)
    return write(rows, random.Random(seed))


def _lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return min(high, max(low, round(rng.lognormvariate(math.log(median), sigma))))


def _example_mooncake(rows: int, rng: random.Random) -> str:
    lines, seen, t_ms, next_id = [], [], 0, 0
    for _ in range(rows):
        if seen and rng.random() < 0.4:  # a later turn: an earlier turn's full blocks, then more
            earlier_length, earlier_ids = rng.choice(seen)
            prefix = earlier_ids[: earlier_length // MOONCAKE_BLOCK_TOKENS]
            length = len(prefix) * MOONCAKE_BLOCK_TOKENS + _lognormal(rng, 400, 0.8, 1, 8000)
        else:
            prefix, length = [], _lognormal(rng, 6000, 0.9, 64, 120_000)
        fresh = math.ceil(length / MOONCAKE_BLOCK_TOKENS) - len(prefix)
        ids = prefix + list(range(next_id, next_id + fresh))
        next_id += fresh
        seen.append((length, ids))
        row = {"timestamp": t_ms, "input_length": length,
               "output_length": _lognormal(rng, 350, 0.7, 1, 2000), "hash_ids": ids}
        lines.append(json.dumps(row))
        t_ms += round(rng.expovariate(3.4) * 1000)
    return "\n".join(lines) + "\n"


def _example_azure(rows: int, rng: random.Random) -> str:
    start, ticks = datetime(2023, 11, 16, 18, 0, 0), rng.randrange(AZURE_TICKS_PER_S)
    lines = [",".join(AZURE_HEADER)]
    for _ in range(rows):
        when = start + timedelta(seconds=ticks // AZURE_TICKS_PER_S)
        context = _lognormal(rng, 1000, 1.0, 2, 14_000)
        generated = _lognormal(rng, 130, 0.9, 7, 1000)
        lines.append(f"{when:%Y-%m-%d %H:%M:%S}.{ticks % AZURE_TICKS_PER_S:07d},"
                     f"{context},{generated}")
        ticks += max(1, round(rng.expovariate(5.5) * AZURE_TICKS_PER_S))
    return "\r\n".join(lines)


def _example_burstgpt(rows: int, rng: random.Random) -> str:
    t = rng.randrange(86_400)  # seconds from midnight of the first day
    lines = [",".join(BURSTGPT_HEADER)]
    for _ in range(rows):
        model = "GPT-4" if rng.random() < 0.15 else "ChatGPT"
        log_type = "API log" if rng.random() < 0.3 else "Conversation log"
        request = _lognormal(rng, 600, 1.0, 1, 30_000)
        response = 0 if rng.random() < 0.05 else _lognormal(rng, 250, 0.9, 1, 4000)
        lines.append(f"{t},{model},{request},{response},{request + response},{log_type}")
        t += round(rng.expovariate(0.25))
    return "\n".join(lines) + "\n"
