"""The frontier of a grid of workloads (docs/workloads.md#the-frontier), in three panels: per-user
against aggregate tok/s with the non-dominated points marked, TTFT against concurrency, and the
split of each workload's speedup at its widest arm into gen_gain and pipelining.

Drawn from results/<experiment>/analysis/frontier.json alone (slotbench.analysis.frontier, which
took every number and interval from analysis/summary.csv and decided which points are
non-dominated). make_frontier returns its provenance as figures.make_all does: the cells and
raw-file SHA-256s behind every point, serial cells included (the ratios' denominators).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede the pyplot import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402

from slotbench.core.cells import arm_name, label_key  # noqa: E402
from slotbench.figures.captions import FRONTIER_CAPTIONS, FRONTIER_TITLES  # noqa: E402
from slotbench.figures.plots import no_data, save  # noqa: E402

FIGURE_ID = "frontier"
# The report section that shows it (slotbench.report.frontier), not the Figures section.
SECTION = "frontier"
FACTOR_MARKERS = {"gen_gain": ("o", "gen_gain (batching)"),
                  "pipelining": ("^", "pipelining (overlap)")}


def _num(value) -> float:
    return float("nan") if value is None else float(value)


def _bars(rows: list[dict], name: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """Values and their error bars (distances to the interval's ends) for errorbar()."""
    y = np.array([_num(r.get(name)) for r in rows], dtype=float)
    lo = np.array([_num(r.get(f"{name}_lo")) for r in rows], dtype=float)
    hi = np.array([_num(r.get(f"{name}_hi")) for r in rows], dtype=float)
    return y, [np.nan_to_num(y - lo).clip(0), np.nan_to_num(hi - y).clip(0)]


def short(workload: dict) -> str:
    """A workload's label on an axis: its lengths where fixed, else its target's name."""
    if workload["input_tokens"] is None or workload["output_tokens"] is None:
        return workload["target"]
    return f"in {workload['input_tokens']}\nout {workload['output_tokens']}"


def draw_frontier(ax, workloads: list[dict], colours: list) -> None:
    """(a) Per-user (x) against aggregate (y), both intervals; the non-dominated points ringed."""
    ringed = False
    for workload, colour in zip(workloads, colours):
        points = workload["points"]
        x, xerr = _bars(points, "user_tps")
        y, yerr = _bars(points, "agg_tps")
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, color=colour, marker="o", markersize=5,
                    capsize=2, linewidth=1.2, label=workload["target"])
        for p, px, py in zip(points, x, y):
            ax.annotate(str(p["arm"]), (px, py), fontsize=7, color=colour,
                        textcoords="offset points", xytext=(4, 4))
            if p["frontier"]:
                ax.scatter([px], [py], s=150, facecolors="none", edgecolors="black",
                           linewidths=1.4, zorder=5, label=None if ringed else "non-dominated")
                ringed = True
    ax.set_xlabel("per-user tok/s (median, interval over reps)")
    ax.set_ylabel("aggregate tok/s (median, interval over reps)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title("(a) the frontier", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)


def draw_ttft(ax, workloads: list[dict], colours: list) -> None:
    """(b) TTFT with its interval against the requests in flight, per workload."""
    arms = sorted({p["arm"] for w in workloads for p in w["points"]})
    for workload, colour in zip(workloads, colours):
        points = workload["points"]
        y, yerr = _bars(points, "ttft_s")
        ax.errorbar([p["arm"] for p in points], y, yerr=yerr, color=colour, marker="s",
                    markersize=4, capsize=2, linewidth=1.2, label=workload["target"])
    if arms and max(arms) / min(arms) >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(arms, [str(a) for a in arms])
    ax.set_xlabel("requests in flight")
    ax.set_ylabel("TTFT s (median, interval over reps)")
    ax.set_ylim(bottom=0)
    ax.set_title("(b) time to first token", fontsize=9)


def draw_split(ax, workloads: list[dict], colours: list) -> None:
    """(c) gen_gain and pipelining with their intervals at each workload's widest arm."""
    shown = [(i, w) for i, w in enumerate(workloads) if w["split"]]
    if not shown:
        no_data(ax, "parallel arm")
        return
    for factor, offset in zip(FACTOR_MARKERS, (-0.15, 0.15)):
        marker, label = FACTOR_MARKERS[factor]
        for n, (i, workload) in enumerate(shown):
            y, yerr = _bars([workload["split"]], factor)
            ax.errorbar([i + offset], y, yerr=yerr, color=colours[i], marker=marker,
                        markersize=7, capsize=3, linestyle="none",
                        label=label if n == 0 else None, markeredgecolor="black")
    ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1)
    ax.set_xticks([i for i, _ in shown], [short(w) for _, w in shown], fontsize=7)
    ax.set_xlim(-0.6, len(workloads) - 0.4)
    arms = sorted({w["split"]["arm"] for _, w in shown})
    ax.set_ylabel("ratio vs serial-1 (same rep)")
    ax.set_title(f"(c) the split at {', '.join(arm_name(a) for a in arms)}", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)


def make_frontier(front: dict, outdir: str | Path, file: str = f"{FIGURE_ID}.png") -> dict:
    """Write the figure into outdir; {fig_id: provenance} (title, file, caption, cells,
    raw_sha256, and the report section that shows it)."""
    path = Path(outdir) / file
    path.parent.mkdir(parents=True, exist_ok=True)
    workloads = front.get("workloads") or []
    sns.set_theme(style="whitegrid", context="paper")
    colours = sns.color_palette("colorblind", max(len(workloads), 1))
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2 + 0.2 * len(workloads)), squeeze=False)
    if not any(w["points"] for w in workloads):
        for ax in axes[0]:
            no_data(ax, "workload with measured arms")
    else:
        draw_frontier(axes[0][0], workloads, colours)
        draw_ttft(axes[0][1], workloads, colours)
        draw_split(axes[0][2], workloads, colours)
    save(fig, path)
    points = [p for w in workloads for p in w["points"]]
    return {FIGURE_ID: {
        "title": FRONTIER_TITLES[FIGURE_ID], "file": path.name,
        "caption": FRONTIER_CAPTIONS[FIGURE_ID],
        "cells": sorted({c for p in points for c in p["cells"]}, key=label_key),
        "raw_sha256": sorted({h for p in points for h in p["raw_sha256"]}),
        "section": SECTION}}
