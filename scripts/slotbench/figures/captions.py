"""Every figure's title and caption, written once.

The report takes them from the figures' sources.json (figures/plots.py, figures/openloop.py and
figures/frontier.py put them there). The captions ``snakemake --report`` shows beside each figure, report/<figure>.rst, are
made from them by ``caption_rst`` (``.venv/bin/python -m slotbench docs`` rewrites them; its
``--check`` and a test fail when one is out of date).
"""

from __future__ import annotations

import re
import textwrap

TITLES = {
    "throughput": "Operator throughput vs per-user generation rate",
    "ttft": "Time to first token by arm",
    "decomposition": "Speedup split into batching (gen_gain) and pipelining",
    "positions": "Median operator throughput at each rotation position",
    "timeline": "Operator throughput over the course of the runs",
    "capacity": "Capacity curve: aggregate and per-user rate against concurrency",
    "across": "Targets side by side at the widest arm they share",
    "server_batch": "The server's batch per decode step and queue over each cell of a typical rep",
}

CAPTIONS = {
    "throughput": (
        "Per target and arm: aggregate tok/s across the server (tokens produced over the cell's "
        "wall clock, what the operator buys) and per-user tok/s (median per-request generation "
        "rate, what each user gets). Small points are cells; large markers joined by lines are "
        "medians across reps, runs pooled."
    ),
    "ttft": (
        "Client-side time from sending a request to its first streamed token (median of the "
        "cell's requests; includes queueing). Small points are cells; large markers are medians."
    ),
    "decomposition": (
        "Within-rep ratios against serial-1 of the same rep. speedup = aggregate gain; "
        "gen_gain = per-user rate × concurrency / serial rate (what batching in the generation "
        "stage delivered); pipelining = speedup / gen_gain (overlap of one request's prefill "
        "with another's decode). Below the dashed line at 1 a stage loses rather than gains."
    ),
    "positions": (
        "Each arm's median aggregate tok/s at each position it occupied in the rotated order "
        "(runs pooled). Flat lines mean the order did not bias the arm; the position effect "
        "(best position over worst, reps and arms accounted for) is what the report checks "
        "against its threshold."
    ),
    "timeline": (
        "Aggregate tok/s of every cell against its start time, relative to the target's first "
        "cell. A downward drift within a run is thermal or other decay that rotation must absorb. "
        "Where the client host (the machine slotbench ran on; the server's too only when it "
        "ran there, managed or on a loopback address) exposed a thermal source, its clock (mean "
        "over the CPUs, or each GPU's) and the hottest temperature sampled during the reps are "
        "drawn on extra axes against the same time, and every sample that reported throttling "
        'or thermal pressure is a dotted red vertical line; a panel without samples says "no '
        'thermal source".'
    ),
    "capacity": (
        "Per target: median aggregate tok/s and per-user tok/s of each arm against its "
        "concurrency (log scale), with bootstrap intervals over the arm's cells (one per rep), "
        "and the judged TTFT percentile on the right-hand axis. Dashed lines are the service "
        "levels (slo.user_tps_min, slo.ttft_s_max) where set; the shaded band starts at the "
        "saturation point, after which the next arm adds less than slo.saturation_gain."
    ),
    "across": (
        "Every target at the widest parallel arm all of them ran, in the order of the Across "
        "targets table (speedup, highest first): median speedup, per-user change and TTFT ratio "
        "with their bootstrap intervals over the reps. Intervals that do not overlap are the "
        "differences the table names."
    ),
    "server_batch": (
        "One row per target, one panel per arm, for the target's typical rep: of the reps whose "
        "every cell has server scrapes with a batch series, the one whose parallel arms' "
        "aggregate tok/s lie closest to the arms' medians. x is seconds since the cell's start "
        "(the dotted line is its end); the blue steps are the batch the server decoded per step "
        "between consecutive scrapes (llama.cpp: the difference of its busy-slot total, "
        "n_busy_slots_per_decode × n_decode_total, over the decode steps between the two "
        "scrapes; vLLM, SGLang, TGI: the running-requests gauge), the dashed line the requests "
        "in flight, the red steps (right axis) the server's queue gauge. Batching formed where "
        "the blue steps reach the dashed line; a queue that stays up while the batch stays low "
        "means the server held requests back. A target whose scrapes have no batch series (a "
        "rep measured before telemetry, a server without /metrics) is one panel that says "
        "\"not assessable\" and why. The scrapes come from the drawn cells' raw files."
    ),
}
OPEN_TITLES = {
    "latency_load": "Open loop: TTFT and per-user rate against the offered rate",
    "achieved_offered": "Open loop: achieved against offered rate",
    "concurrency_axis": "Both loops on one axis: effective concurrency",
}

OVERLOAD_NOTE = (
    " Arms the overload check marked (their queue grew all cell long) are red crosses (X, +), "
    "not joined to the curve: their numbers say how long the cell ran, not what the server does "
    "at that rate."
)
OPEN_CAPTIONS = {
    "latency_load": (
        "Per target with rate arms: TTFT p50 and p95 (counted from each request's planned "
        "arrival; left axis) and per-user tok/s (right axis) of each rate arm against its offered "
        "rate, medians over the arm's cells (one per rep) with bootstrap intervals. Dotted lines "
        "are slo.ttft_s_max and slo.user_tps_min where set." + OVERLOAD_NOTE
    ),
    "achieved_offered": (
        "Per target with rate arms: the rate achieved (completions per second from the first "
        "completion to the last) against the rate offered, medians with "
        "bootstrap intervals over the arm's cells. On the dashed line y = x the server keeps up; "
        "where the points fall below it, the server saturates (the knee)." + OVERLOAD_NOTE
    ),
    "concurrency_axis": (
        "Per target with rate arms: every arm, closed loop (concurrency levels) and open loop "
        "(rate arms), at its effective concurrency (requests in flight, time-weighted): aggregate "
        "tok/s on the left axis and TTFT p95 on the right, medians with bootstrap intervals over "
        "the arm's cells. A closed arm's TTFT counts from the send, a rate arm's from the planned "
        "arrival." + OVERLOAD_NOTE
    ),
}

# The frontier of a grid of workloads (figures/frontier.py): drawn only when the config has a grid
FRONTIER_TITLES = {
    "frontier": "The workloads' frontier: per-user against aggregate rate, TTFT, and the split",
}
FRONTIER_CAPTIONS = {
    "frontier": (
        "The grid's workloads side by side, one colour each: (a) per-user against aggregate "
        "tok/s of every arm with both intervals, the non-dominated points ringed; (b) TTFT "
        "against the requests in flight; (c) gen_gain and pipelining at the widest arm. In (a) "
        "every concurrency arm is a point, median per-user tok/s (x) against median aggregate "
        "tok/s (y), with their bootstrap intervals over the reps as error bars in both "
        "directions, a workload's arms joined in order and labelled with their concurrency; a "
        "point ringed in black is non-dominated: no point of any workload has both a higher "
        "per-user and a higher aggregate rate. (b) is the median TTFT with its interval. (c) "
        "gives gen_gain (batching, circles) and pipelining (overlap, triangles) with their "
        "intervals; above the dashed line at 1 a stage gains. The points, the non-dominated "
        "set and the split are analysis/frontier.json's, made from analysis/summary.csv."
    ),
}

# What report/<figure>.rst adds to a figure's caption: where its sources are, and (for a figure
# the report shows only with two targets or more) why it may be missing from the report.
SOURCES_NOTE = (
    "The cells and raw-file SHA-256s behind this figure are listed in "
    "``results/<experiment>/figures/sources.json`` and under the figure in "
    "``results/<experiment>/report.md``."
)
RST_NOTES = {
    "across": (
        "With one target there is nothing to set side by side, and the report does not show it."
    ),
    "frontier": "Drawn only when the config has a grid of workloads (workload.grid).",
}
RST_WIDTH = 100


def rst_text(text: str) -> str:
    """Plain text as reStructuredText: its markup characters escaped."""
    text = re.sub(r"([\\*`|])", r"\\\1", text)
    return re.sub(r"(?<=\w)_(?=\W|$)", r"\\_", text)  # word_ would be a reference


def caption_rst(fig_id: str) -> str:
    """report/<fig_id>.rst: the title in bold, the caption, then where its sources are."""
    titles, captions = TITLES | FRONTIER_TITLES, CAPTIONS | FRONTIER_CAPTIONS
    text = f"**{rst_text(titles[fig_id])}.** {rst_text(captions[fig_id])}"
    if fig_id in RST_NOTES:
        text += " " + rst_text(RST_NOTES[fig_id])
    paragraphs = [text, SOURCES_NOTE]
    wrapped = [
        textwrap.fill(p, RST_WIDTH, break_long_words=False, break_on_hyphens=False)
        for p in paragraphs
    ]
    return "\n\n".join(wrapped) + "\n"
