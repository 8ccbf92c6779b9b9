"""Request traces (slotbench.measure.traces): each publisher's format read strictly, the real
Azure and Mooncake traces read to their published statistics, BurstGPT's failed requests dropped
and counted, and what a workload draws from a trace deterministic from its rng and scaled."""

from __future__ import annotations

import math
import random
import re
import time
from pathlib import Path

import pytest

from slotbench.measure.traces import (
    FORMATS,
    TraceError,
    TraceRow,
    detect_format,
    example_trace,
    length_quantiles,
    prefix_blocks,
    read_trace,
    replay_window,
    sample_lengths,
    scale_length,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "config" / "workloads" / "traces"
EXAMPLE_FILES = {"mooncake": "example-mooncake.jsonl", "azure": "example-azure.csv",
                 "burstgpt": "example-burstgpt.csv"}
# The real traces sit beside the checkout, never in it: /work/shared/traces for a checkout at
# /work/<name>. Their README gives the statistics the tests below hold the reader to.
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def real(name: str):
    if not SHARED.is_dir():
        pytest.skip(f"the real traces' folder {SHARED} is absent (it sits beside a checkout at "
                    "/work/<name>; the repository ships none of their rows)")
    return read_trace(SHARED / name, "auto")


@pytest.fixture(scope="module")
def azure():
    return real("azure-conv-2023.csv")


@pytest.fixture(scope="module")
def mooncake():
    return real("mooncake-conversation.jsonl")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


# --- the example traces --------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_example_file_is_the_generators_output_and_reads_back_as_its_format(fmt):
    path = EXAMPLES / EXAMPLE_FILES[fmt]
    assert path.read_bytes() == example_trace(fmt, rows=64, seed=1).encode(), (
        f"{path.relative_to(REPO)} is not example_trace({fmt!r}); rewrite it with "
        f"path.write_bytes(example_trace({fmt!r}).encode())")
    assert detect_format(path) == fmt
    trace = read_trace(path, "auto")
    assert trace.format == fmt and trace.path == str(path)
    assert len(trace.rows) + sum(trace.dropped.values()) == 64
    assert trace.rows[0].t_s == 0 and all(
        a.t_s <= b.t_s for a, b in zip(trace.rows, trace.rows[1:]))
    assert (trace.rows[0].hash_ids is not None) == (fmt == "mooncake")


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_example_comes_from_its_seed_alone(fmt):
    assert example_trace(fmt, rows=10, seed=7) == example_trace(fmt, rows=10, seed=7)
    assert example_trace(fmt, rows=10, seed=7) != example_trace(fmt, rows=10, seed=8)
    body = example_trace(fmt, rows=10).replace("\r\n", "\n").strip("\n").split("\n")
    assert len(body) == 10 + (fmt != "mooncake")
    with pytest.raises(ValueError, match="sharegpt"):
        example_trace("sharegpt")


def test_the_azure_example_is_crlf_with_seven_digit_times_and_no_final_newline():
    text = example_trace("azure")
    assert text.startswith(AZURE_HEADER + "\r\n") and not text.endswith("\n")
    lines = text.split("\r\n")
    assert len(lines) == 65 and not any("\n" in line or "\r" in line for line in lines)
    stamps = [line.split(",")[0] for line in lines[1:]]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{7}", s) for s in stamps)
    assert any(s[-1] != "0" for s in stamps)  # the 7th digit is used, not padding


def test_the_mooncake_example_keeps_the_block_invariant_and_shares_prefixes():
    trace = read_trace(EXAMPLES / EXAMPLE_FILES["mooncake"], "auto")
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / 512) for r in trace.rows)
    firsts = [r.hash_ids[0] for r in trace.rows]
    assert len(set(firsts)) < len(firsts), "no later turn shares an earlier turn's prefix"


def test_the_burstgpt_example_drops_and_counts_its_failed_requests():
    trace = read_trace(EXAMPLES / EXAMPLE_FILES["burstgpt"], "auto")
    failed = example_trace("burstgpt").count(",0,")  # a Response tokens of 0
    assert failed >= 1 and trace.dropped == {"failed": failed}
    assert len(trace.rows) == 64 - failed and all(r.output_tokens > 0 for r in trace.rows)


# --- detection -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt,text", [
    ("mooncake", '{"timestamp": 0, "input_length": 600, "output_length": 5, '
                 '"hash_ids": [0, 1]}\n'),
    ("azure", AZURE_HEADER + "\r\n2023-11-16 18:15:46.1234567,12,34"),
    ("burstgpt", BURSTGPT_HEADER + "\n5,ChatGPT,472,18,490,Conversation log\n"),
])
def test_the_format_is_detected_from_the_first_line(tmp_path, fmt, text):
    path = write(tmp_path, "trace", text)
    assert detect_format(path) == fmt
    assert read_trace(path, "auto").format == fmt == read_trace(path, fmt).format


@pytest.mark.parametrize("text,seen", [
    ("time,input,output\n1,2,3\n", "'time,input,output'"),
    ('{"timestamp": 0, "input_length": 5}\n', "input_length"),
    ("TIMESTAMP;ContextTokens;GeneratedTokens\r\n", "TIMESTAMP;"),
    ("", "empty"),
])
def test_an_unknown_first_line_is_a_trace_error_naming_what_it_holds(tmp_path, text, seen):
    path = write(tmp_path, "odd.csv", text)
    for attempt in (detect_format, lambda p: read_trace(p, "auto")):
        with pytest.raises(TraceError) as caught:
            attempt(path)
        message = str(caught.value)
        assert message.startswith(f"{path}:1: ") and seen in message and "\n" not in message


def test_a_named_format_that_the_file_is_not_is_refused(tmp_path):
    path = write(tmp_path, "a.csv", AZURE_HEADER + "\r\n2023-11-16 18:15:46.1234567,12,34")
    with pytest.raises(TraceError, match=f"^{re.escape(str(path))}:1: not the burstgpt header"):
        read_trace(path, "burstgpt")
    with pytest.raises(TraceError, match="no trace format 'splitwise'"):
        read_trace(path, "splitwise")


# --- the real traces -----------------------------------------------------------------------


def test_the_real_azure_trace_reads_to_its_published_statistics(azure):
    assert azure.format == "azure" and len(azure.rows) == 19_366 and azure.dropped == {}
    context = [r.input_tokens for r in azure.rows]
    generated = [r.output_tokens for r in azure.rows]
    assert length_quantiles(context, (0.5, 0.9)) == {0.5: 1020, 0.9: 2735}
    assert (min(context), max(context)) == (2, 14_050)
    assert (min(generated), max(generated)) == (7, 1000)
    assert length_quantiles(generated, (0.9,)) == {0.9: 424}
    assert round(azure.rows[-1].t_s, 1) == 3501.7
    # 19:14:08.4025270 - 18:15:46.6805900, to the tick
    assert azure.rows[-1].t_s == pytest.approx(3501.721937, abs=1e-9)
    assert azure.rows[0].hash_ids is None


def test_the_real_azure_trace_keeps_its_times_to_the_tick_and_in_order(azure):
    """Each row's time is its TIMESTAMP's 7 digits, counted here from the text another way (the
    trace spans one afternoon); no two rows tie, the closest 2 µs apart."""
    text = (SHARED / "azure-conv-2023.csv").read_bytes().decode().split("\r\n")[1:]
    ticks = [int(s[11:13]) * 36_000_000_000 + int(s[14:16]) * 600_000_000
             + int(s[17:19]) * 10_000_000 + int(s[20:27]) for s in text]
    assert [r.t_s for r in azure.rows] == pytest.approx(
        [(t - ticks[0]) / 1e7 for t in ticks], abs=1e-9)
    gaps = [b.t_s - a.t_s for a, b in zip(azure.rows, azure.rows[1:])]
    assert min(gaps) == pytest.approx(2e-6, abs=1e-9)  # strictly in order, 20 ticks at least


def test_seven_digit_times_keep_their_sub_microsecond_order(tmp_path):
    """Rows apart by less than a microsecond (which %f's six digits would tie or reverse) keep
    their order and gaps, across midnight too; a row 100 ns early is out of order."""
    stamps = ["2023-11-16 23:59:59.9999990", "2023-11-16 23:59:59.9999991",
              "2023-11-16 23:59:59.9999999", "2023-11-17 00:00:00.0000002"]
    path = write(tmp_path, "a.csv", "\r\n".join([AZURE_HEADER] + [f"{s},10,20" for s in stamps]))
    t = [r.t_s for r in read_trace(path, "auto").rows]
    assert t[0] == 0 and t == sorted(t) and len(set(t)) == 4
    assert [round((b - a) * 1e7) for a, b in zip(t, t[1:])] == [1, 8, 3]
    stamps[2] = "2023-11-16 23:59:59.9999989"
    path = write(tmp_path, "b.csv", "\r\n".join([AZURE_HEADER] + [f"{s},10,20" for s in stamps]))
    with pytest.raises(TraceError, match=f"^{re.escape(str(path))}:4: TIMESTAMP is earlier"):
        read_trace(path, "auto")


def test_the_real_mooncake_trace_reads_to_its_published_statistics(mooncake):
    assert mooncake.format == "mooncake" and len(mooncake.rows) == 12_031
    inputs = [r.input_tokens for r in mooncake.rows]
    outputs = [r.output_tokens for r in mooncake.rows]
    assert (min(inputs), max(inputs), min(outputs), max(outputs)) == (891, 126_195, 1, 2000)
    assert length_quantiles(inputs, (0.9,)) == {0.9: 27_367}
    assert mooncake.rows[0].t_s == 0 and mooncake.rows[-1].t_s == pytest.approx(3536.999)
    assert round(mooncake.rows[-1].t_s, 1) == 3537.0


def test_the_real_mooncake_trace_has_one_hash_id_per_512_token_block(mooncake):
    bad = [i for i, r in enumerate(mooncake.rows)
           if len(r.hash_ids) != math.ceil(r.input_tokens / 512)]
    assert not bad, f"rows {bad[:5]} break len(hash_ids) == ceil(input_length / 512)"
    ids = [h for r in mooncake.rows for h in r.hash_ids]
    assert (len(ids), len(set(ids))) == (288_500, 182_790)


def test_the_real_mooncake_trace_reads_in_well_under_a_second():
    real("mooncake-conversation.jsonl")
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        read_trace(SHARED / "mooncake-conversation.jsonl", "auto")
        best = min(best, time.perf_counter() - start)
    assert best < 1.0, f"3 MB of Mooncake trace took {best:.2f} s to read"


def test_no_example_row_is_a_real_traces_row(azure, mooncake):
    for name, example in (("azure-conv-2023.csv", "azure"),
                          ("mooncake-conversation.jsonl", "mooncake")):
        real_rows = set((SHARED / name).read_text().splitlines()[1:])
        ours = (EXAMPLES / EXAMPLE_FILES[example]).read_text().splitlines()[1:]
        assert not real_rows.intersection(ours), f"{EXAMPLE_FILES[example]} holds a real row"


# --- BurstGPT ------------------------------------------------------------------------------


def test_burstgpt_failed_requests_are_dropped_counted_and_still_checked(tmp_path):
    rows = ["10.5,ChatGPT,300,0,300,API log",  # failed: before the first row kept
            "12.25,GPT-4,400,50,450,Conversation log",
            "12.25,ChatGPT,500,0,500,Conversation log",
            "20,ChatGPT,600,70,670,API log"]
    trace = read_trace(write(tmp_path, "b.csv", "\n".join([BURSTGPT_HEADER] + rows) + "\n"), "auto")
    assert trace.dropped == {"failed": 2}
    assert [(r.t_s, r.input_tokens, r.output_tokens) for r in trace.rows] == [
        (0.0, 400, 50), (7.75, 600, 70)]
    rows[2] = "12.25,ChatGPT,-5,0,-5,Conversation log"  # a failed row is checked all the same
    path = write(tmp_path, "c.csv", "\n".join([BURSTGPT_HEADER] + rows))
    with pytest.raises(TraceError, match=f"^{re.escape(str(path))}:4: Total tokens is -5"):
        read_trace(path, "auto")


def test_a_burstgpt_trace_of_failures_alone_has_no_rows(tmp_path):
    path = write(tmp_path, "b.csv", BURSTGPT_HEADER + "\n5,ChatGPT,472,0,472,API log\n")
    with pytest.raises(TraceError, match=r"no rows \(1 failed requests, dropped\)"):
        read_trace(path, "auto")


# --- malformed rows ------------------------------------------------------------------------

MOONCAKE_ROW = '{"timestamp": %s, "input_length": %s, "output_length": %s, "hash_ids": %s}'
GOOD_MOONCAKE = MOONCAKE_ROW % (0, 600, 5, "[0, 1]")
GOOD_AZURE = "2023-11-16 18:15:46.1234567,12,34"
GOOD_BURSTGPT = "5,ChatGPT,472,18,490,Conversation log"
BAD_ROWS = [
    # (format, the bad row, the field its error names)
    ("mooncake", '{"timestamp": 5, "input_length": 600, "hash_ids": [0, 1]}', "output_length"),
    ("mooncake", MOONCAKE_ROW % (5, -600, 5, "[0, 1]"), "input_length is -600, negative"),
    ("mooncake", MOONCAKE_ROW % (5, 600, 5.5, "[0, 1]"), "output_length is 5.5"),
    ("mooncake", MOONCAKE_ROW % (5, 600, 5, '"0 1"'), "hash_ids"),
    ("mooncake", MOONCAKE_ROW % (5, 600, 5, "[0, -1]"), "hash_ids"),
    ("mooncake", MOONCAKE_ROW % ("null", 600, 5, "[0, 1]"), "timestamp is None"),
    ("mooncake", '{"timestamp": 5, "input_length": 600,', "not a JSON object"),
    ("mooncake", "", "an empty line between rows"),
    ("azure", "2023-11-16 18:15:46.12345678,12,34", "TIMESTAMP"),
    ("azure", "2023-11-31 18:15:46.1234567,12,34", "TIMESTAMP"),
    ("azure", "2023-11-16 18:15:46.1234567,12", "'GeneratedTokens'"),
    ("azure", "2023-11-16 18:15:46.1234567,12a,34", "ContextTokens is '12a'"),
    ("azure", "2023-11-16 18:15:46.1234567,,34", "ContextTokens is empty"),
    ("azure", "2023-11-16 18:15:46.1234567,12,34,56", "4 fields"),
    ("azure", "2023-11-16 18:15:46.1234567,12\r,34", "ContextTokens is '12\\r'"),
    ("azure", '"2023-11-16 18:15:46.1234567",12,34', "TIMESTAMP"),
    ("burstgpt", "5,ChatGPT,-472,18,490,Conversation log", "Request tokens is -472"),
    ("burstgpt", "five,ChatGPT,472,18,490,Conversation log", "Timestamp is 'five'"),
    ("burstgpt", "-5,ChatGPT,472,18,490,Conversation log", "Timestamp is -5.0, negative"),
    ("burstgpt", "nan,ChatGPT,472,18,490,Conversation log", "Timestamp"),
    ("burstgpt", "5,,472,18,490,Conversation log", "Model is empty"),
    ("burstgpt", "5,ChatGPT,472,18,490", "'Log Type'"),
]


@pytest.mark.parametrize("fmt,row,field", BAD_ROWS, ids=[f"{f}-{i}" for i, (f, _, _) in
                                                         enumerate(BAD_ROWS)])
def test_a_malformed_row_is_a_trace_error_naming_file_line_and_field(tmp_path, fmt, row, field):
    good = {"mooncake": GOOD_MOONCAKE, "azure": GOOD_AZURE, "burstgpt": GOOD_BURSTGPT}[fmt]
    header = {"azure": [AZURE_HEADER], "burstgpt": [BURSTGPT_HEADER]}.get(fmt, [])
    lines = header + [good, row, good]  # the bad row between good ones
    path = write(tmp_path, "t", "\n".join(lines) + "\n")
    with pytest.raises(TraceError) as caught:
        read_trace(path, "auto")
    message = str(caught.value)
    assert message.startswith(f"{path}:{len(header) + 2}: "), message
    assert field in message and "\n" not in message, message


@pytest.mark.parametrize("fmt,rows,line", [
    ("mooncake", [MOONCAKE_ROW % (t, 600, 5, "[0, 1]") for t in (0, 7, 7, 6)], 4),
    ("azure", [GOOD_AZURE, "2023-11-16 18:15:46.1234566,12,34"], 3),
    ("burstgpt", [GOOD_BURSTGPT, "4.999,ChatGPT,472,18,490,API log"], 3),
])
def test_a_row_earlier_than_the_one_before_is_out_of_order(tmp_path, fmt, rows, line):
    header = {"azure": [AZURE_HEADER], "burstgpt": [BURSTGPT_HEADER]}.get(fmt, [])
    path = write(tmp_path, "t", "\n".join(header + rows))
    with pytest.raises(TraceError, match=f"^{re.escape(str(path))}:{line}: .* is earlier than "
                                         f"on line {line - 1}: the rows must be in time order"):
        read_trace(path, "auto")


def test_trailing_blank_lines_and_crlf_endings_are_the_files_not_rows(tmp_path):
    path = write(tmp_path, "m.jsonl", f"{GOOD_MOONCAKE}\r\n{GOOD_MOONCAKE}\r\n\r\n\n")
    assert len(read_trace(path, "auto").rows) == 2
    with pytest.raises(TraceError, match="no rows"):
        read_trace(write(tmp_path, "a.csv", AZURE_HEADER + "\r\n"), "auto")


# --- what a workload draws from a trace ----------------------------------------------------


def test_scale_length_rounds_and_never_gives_zero():
    assert [scale_length(n, s) for n, s in [(1000, 0.5), (1000, 0.1), (7, 1.0), (3, 2.5)]] == [
        500, 100, 7, 8]
    assert all(scale_length(n, s) >= 1 for n in range(0, 2000, 7)
               for s in (1e-9, 1e-3, 0.01, 0.3, 1.0))
    assert scale_length(0, 1.0) == 1
    for bad in (0, -0.5, math.nan, math.inf):
        with pytest.raises(ValueError, match="length_scale"):
            scale_length(10, bad)


def test_sample_lengths_is_deterministic_from_the_rng_and_scaled():
    trace = read_trace(EXAMPLES / EXAMPLE_FILES["azure"], "auto")
    pairs = {(r.input_tokens, r.output_tokens) for r in trace.rows}
    drawn = sample_lengths(trace, 200, random.Random(3), 1.0)
    assert drawn == sample_lengths(trace, 200, random.Random(3), 1.0)
    assert drawn != sample_lengths(trace, 200, random.Random(4), 1.0)
    assert len(drawn) == 200 and set(drawn) <= pairs
    assert len(set(drawn)) > 40  # with replacement, from most of the 64 rows
    scaled = sample_lengths(trace, 200, random.Random(3), length_scale=0.05)
    assert scaled == [(scale_length(i, 0.05), scale_length(o, 0.05)) for i, o in drawn]
    assert min(min(p) for p in scaled) >= 1
    assert sample_lengths(trace, 0, random.Random(3), 1.0) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_replay_window_offsets_are_the_traces_gaps_times_time_scale(fmt):
    trace = read_trace(EXAMPLES / EXAMPLE_FILES[fmt], "auto")
    window = replay_window(trace, 20, random.Random(5), time_scale=0.25, length_scale=0.1)
    assert window == replay_window(trace, 20, random.Random(5), time_scale=0.25,
                                   length_scale=0.1)
    start = window[0]["row"]
    assert [w["row"] for w in window] == list(range(start, start + 20))
    rows = trace.rows[start : start + 20]
    assert window[0]["offset_s"] == 0
    for w, row in zip(window, rows):
        assert w["offset_s"] == pytest.approx((row.t_s - rows[0].t_s) * 0.25, abs=1e-12)
        assert (w["input_tokens"], w["output_tokens"]) == (
            scale_length(row.input_tokens, 0.1), scale_length(row.output_tokens, 0.1))
        assert w["prefix"] == (None if fmt != "mooncake" else list(row.hash_ids))
    starts = {replay_window(trace, 20, random.Random(s), 1.0, 1.0)[0]["row"] for s in range(20)}
    assert len(starts) > 5 and max(starts) <= len(trace.rows) - 20


def test_replay_window_on_the_real_azure_trace_keeps_its_gaps(azure):
    window = replay_window(azure, 500, random.Random(1), time_scale=2.0, length_scale=1.0)
    rows = azure.rows[window[0]["row"] : window[0]["row"] + 500]
    gaps = [b["offset_s"] - a["offset_s"] for a, b in zip(window, window[1:])]
    assert gaps == pytest.approx([(b.t_s - a.t_s) * 2 for a, b in zip(rows, rows[1:])],
                                 abs=1e-9)


def test_a_window_longer_than_the_trace_is_a_trace_error():
    trace = read_trace(EXAMPLES / EXAMPLE_FILES["azure"], "auto")
    assert len(replay_window(trace, 64, random.Random(1), 1.0, 1.0)) == 64
    with pytest.raises(TraceError, match=f"^{re.escape(trace.path)}: a window of 65 rows, but "
                                         "the trace has 64"):
        replay_window(trace, 65, random.Random(1), 1.0, 1.0)


def test_prefix_blocks_scale_the_block_and_keep_the_ids():
    row = TraceRow(0.0, 1100, 20, (4, 5, 6))
    assert prefix_blocks(row, 1.0) == (512, (4, 5, 6))
    assert prefix_blocks(row, 0.25) == (128, (4, 5, 6))
    assert prefix_blocks(row, 1e-6) == (1, (4, 5, 6))
    assert prefix_blocks(TraceRow(0.0, 1100, 20, None), 1.0) is None


def test_length_quantiles_are_nearest_rank():
    values = list(range(30, 0, -1))  # unsorted on purpose
    assert length_quantiles(values) == {0.1: 3, 0.5: 15, 0.9: 27, 0.99: 30}
    assert length_quantiles([5]) == {0.1: 5, 0.5: 5, 0.9: 5, 0.99: 5}
    assert length_quantiles([1, 2, 3, 4], (0, 0.25, 0.26, 1)) == {0: 1, 0.25: 1, 0.26: 2, 1: 4}
    assert length_quantiles(range(1, 101), (0.07,)) == {0.07: 7}  # 0.07 * 100 is 7.000000000000001
    with pytest.raises(ValueError):
        length_quantiles([])
    with pytest.raises(ValueError):
        length_quantiles([1], (1.5,))
