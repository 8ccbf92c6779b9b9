"""Figures for the report: what the operator gains and what each user loses, per arm.

Every figure is drawn from cells.parquet / ratios.parquet only (never from the checks stage), and
make_all returns, for each figure, the cells and raw-file SHA-256s behind it, so the report can
trace every picture back to raw files.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede the pyplot import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from slotbench.cells import cell_labels, position_medians, raw_hashes  # noqa: E402
from slotbench.report import arm_name  # noqa: E402

DPI = 110
FACET_W, FACET_H = 4.4, 3.4
MAX_COLS = 3
# PNG metadata without a Software stamp, so identical data gives identical bytes.
PNG_METADATA = {"Software": None}

FIGURE_IDS = ("throughput", "ttft", "decomposition", "positions", "timeline")

TITLES = {
    "throughput": "Operator throughput vs per-user generation rate",
    "ttft": "Time to first token by arm",
    "decomposition": "Speedup split into batching (gen_gain) and pipelining",
    "positions": "Median operator throughput at each rotation position",
    "timeline": "Operator throughput over the course of the runs",
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
        "(runs pooled). Flat lines mean the order did not bias the arm; the widest relative "
        "spread is the rotation bias the report checks against its threshold."
    ),
    "timeline": (
        "Aggregate tok/s of every cell against its start time, relative to the target's first "
        "cell. A downward drift within a run is thermal or other decay that rotation must absorb."
    ),
}


def arm_palette(arms) -> dict[int, tuple]:
    """One colour per arm, shared by every figure so an arm looks the same everywhere."""
    arms = sorted({int(a) for a in arms})
    colours = sns.color_palette("colorblind", max(len(arms), 1))
    return {arm: colours[i] for i, arm in enumerate(arms)}


def _facets(targets: list[str]):
    """A grid with one axes per target (at least one), extra axes hidden."""
    n = max(len(targets), 1)
    ncols = min(n, MAX_COLS)
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(FACET_W * ncols, FACET_H * nrows), squeeze=False
    )
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _strip_with_median(ax, frame, value, arms, *, offset, colour, label, marker="o", rng):
    """Cells as small jittered points plus a median marker per arm, medians joined by a line."""
    xs, medians = [], []
    for i, arm in enumerate(arms):
        vals = frame.loc[frame["arm"] == arm, value].dropna().to_numpy(dtype=float)
        if vals.size == 0:
            continue
        jitter = rng.uniform(-0.06, 0.06, vals.size)
        ax.scatter(
            i + offset + jitter, vals, s=12, alpha=0.45, color=colour, marker=marker, linewidths=0
        )
        xs.append(i + offset)
        medians.append(float(np.median(vals)))
    if xs:
        ax.plot(xs, medians, color=colour, marker=marker, markersize=8, linewidth=1.5, label=label)
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels([arm_name(a) for a in arms])
    ax.set_xlim(-0.6, len(arms) - 0.4)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata=PNG_METADATA)
    plt.close(fig)


def _targets(df: pd.DataFrame) -> list[str]:
    return sorted(df["target"].dropna().unique().tolist()) if not df.empty else []


def _strips(ax, frame, arms, series, colours, spacing, rng) -> None:
    """Several metrics side by side per arm, centred on the arm's tick."""
    centre = (len(series) - 1) / 2
    for k, ((col, label, marker), colour) in enumerate(zip(series, colours)):
        _strip_with_median(
            ax, frame, col, arms, offset=(k - centre) * spacing, colour=colour, label=label,
            marker=marker, rng=rng,
        )  # fmt: skip


def _per_target(df: pd.DataFrame, path: Path, empty_what: str, draw) -> None:
    """One panel per target; ``draw(ax, frame, arms)`` fills a panel with that target's rows."""
    targets = _targets(df)
    fig, axes = _facets(targets)
    for ax, target in zip(axes, targets or [None]):
        if target is None:
            _no_data(ax, empty_what)
            continue
        frame = df[df["target"] == target]
        draw(ax, frame, sorted(frame["arm"].astype(int).unique()))
        ax.set_title(target)
    _save(fig, path)


def plot_throughput(cells: pd.DataFrame, path: Path) -> None:
    series = [("agg_tps", "operator (aggregate)", "o"), ("user_tps", "per user", "s")]
    colours = sns.color_palette("dark", 4)
    rng = np.random.default_rng(0)

    def draw(ax, frame, arms):
        _strips(ax, frame, arms, series, [colours[0], colours[3]], 0.25, rng)
        ax.set_ylabel("tokens / s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="best")

    _per_target(cells, path, "cells", draw)


def plot_ttft(cells: pd.DataFrame, path: Path) -> None:
    rng = np.random.default_rng(1)
    colour = sns.color_palette("dark", 4)[1]

    def draw(ax, frame, arms):
        _strip_with_median(
            ax, frame, "ttft_s", arms, offset=0.0, colour=colour, label="median TTFT", rng=rng
        )
        ax.set_ylabel("time to first token (s)")
        ax.set_ylim(bottom=0)

    _per_target(cells, path, "cells", draw)


def plot_decomposition(ratios: pd.DataFrame, path: Path) -> None:
    parallel = ratios[ratios["arm"] > 1] if not ratios.empty else ratios
    series = [
        ("speedup", "speedup (aggregate)", "o"),
        ("gen_gain", "gen_gain (batching)", "s"),
        ("pipelining", "pipelining (overlap)", "^"),
    ]
    colours = sns.color_palette("colorblind", 3)
    rng = np.random.default_rng(2)

    def draw(ax, frame, arms):
        _strips(ax, frame, arms, series, colours, 0.22, rng)
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1)
        ax.set_ylabel("ratio vs serial-1 (same rep)")
        ax.legend(fontsize=8, loc="best")

    _per_target(parallel, path, "parallel arms", draw)


def plot_positions(cells: pd.DataFrame, path: Path) -> None:
    medians = position_medians(cells) if not cells.empty else pd.DataFrame()
    palette = arm_palette(medians["arm"]) if not medians.empty else {}

    def draw(ax, frame, arms):
        for arm, grp in frame.groupby("arm", sort=True):
            grp = grp.sort_values("position")
            ax.plot(grp["position"], grp["median_agg_tps"], marker="o",
                    color=palette[int(arm)], label=arm_name(arm))  # fmt: skip
        ax.set_xticks(sorted(frame["position"].unique()))
        ax.set_xlabel("position in rep order")
        ax.set_ylabel("median aggregate tok/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="best")

    _per_target(medians, path, "cells", draw)


def _elapsed(seconds: pd.Series) -> tuple[pd.Series, str]:
    """Seconds since the first cell, in a unit that keeps tick labels short."""
    span = float(seconds.max()) if len(seconds) else 0.0
    if span >= 2 * 3600:
        return seconds / 3600, "h"
    if span >= 600:
        return seconds / 60, "min"
    return seconds, "s"


def plot_timeline(cells: pd.DataFrame, path: Path) -> None:
    palette = arm_palette(cells["arm"]) if not cells.empty else {}
    names = {arm_name(a): c for a, c in palette.items()}

    def draw(ax, frame, arms):
        frame = frame.copy()
        elapsed, unit = _elapsed(frame["t_start_unix"] - frame["t_start_unix"].min())
        frame["elapsed"] = elapsed
        frame["arm"] = frame["arm"].map(arm_name)  # legend reads "arm", values serial-1 …
        sns.scatterplot(data=frame, x="elapsed", y="agg_tps", hue="arm",
                        hue_order=[arm_name(a) for a in arms], palette=names, style="run",
                        ax=ax, s=28)  # fmt: skip
        ax.set_xlabel(f"time since first cell ({unit})")
        ax.set_ylabel("aggregate tok/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="best")

    _per_target(cells, path, "cells", draw)


PLOTTERS = {
    "throughput": (plot_throughput, "cells"),
    "ttft": (plot_ttft, "cells"),
    "decomposition": (plot_decomposition, "ratios"),
    "positions": (plot_positions, "cells"),
    "timeline": (plot_timeline, "cells"),
}


def make_all(
    cells: pd.DataFrame,
    ratios: pd.DataFrame,
    outdir: str | Path,
    files: dict[str, str] | None = None,
) -> dict[str, dict]:
    """Write every figure as PNG into outdir and return fig_id -> provenance.

    `files` optionally overrides a figure's basename (default "<fig_id>.png"). The decomposition
    figure's sources include the serial cells, since they are the denominators of its ratios.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = files or {}
    frames = {"cells": cells, "ratios": ratios}
    sources = {}
    sns.set_theme(style="whitegrid", context="paper")
    for fig_id, (plot, frame_name) in PLOTTERS.items():
        frame = frames[frame_name]
        basename = files.get(fig_id, f"{fig_id}.png")
        plot(frame, outdir / basename)
        sources[fig_id] = {
            "title": TITLES[fig_id],
            "file": basename,
            "caption": CAPTIONS[fig_id],
            "cells": cell_labels(frame),
            "raw_sha256": raw_hashes(frame),
        }
    return sources
