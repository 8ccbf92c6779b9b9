"""Figures for the report: what the operator gains and what each user loses, per arm.

Every figure is drawn from cells.parquet / ratios.parquet only (never from the checks stage; the
timeline adds thermal samples from the same raw files), and make_all returns, for each figure,
the cells and raw-file SHA-256s behind it, so any picture traces back to raw files.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede the pyplot import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from slotbench.analysis.across import common_arm, ordered  # noqa: E402
from slotbench.analysis.analyse import position_medians  # noqa: E402
from slotbench.core import stats# noqa: E402
from slotbench.core.cells import (  # noqa: E402
    SERIAL_ARM,
    arm_name,
    cell_label,
    cell_labels,
    raw_hashes,
)
from slotbench.figures.captions import CAPTIONS, TITLES  # noqa: E402
from slotbench.figures import server  # noqa: E402
from slotbench.figures.thermal import draw_thermal, samples_of  # noqa: E402
from slotbench.tables.consolidate import headline_cells  # noqa: E402

DPI = 110
FACET_W, FACET_H = 4.4, 3.4
MAX_COLS = 3
# PNG metadata without a Software stamp, so identical data gives identical bytes.
PNG_METADATA = {"Software": None}

FIGURE_IDS = ("throughput", "ttft", "decomposition", "positions", "timeline", "capacity",
              "across", "server_batch")

MULTI_TARGET = {"across"}  # shown in the report with two targets or more; always written


def arm_palette(arms) -> dict[int, tuple]:
    """One colour per arm, shared by every figure so an arm looks the same everywhere."""
    arms = sorted({int(a) for a in arms})
    colours = sns.color_palette("colorblind", max(len(arms), 1))
    return {arm: colours[i] for i, arm in enumerate(arms)}


def facets(n: int):
    """A grid of ``n`` axes (at least one), one per target, extra axes hidden."""
    n = max(n, 1)
    ncols = min(n, MAX_COLS)
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(FACET_W * ncols, FACET_H * nrows),
                             squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def no_data(ax, what: str) -> None:
    """A panel that says what it has none of."""
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
        ax.scatter(i + offset + rng.uniform(-0.06, 0.06, vals.size), vals, s=12, alpha=0.45,
                   color=colour, marker=marker, linewidths=0)
        xs.append(i + offset)
        medians.append(stats.median(vals))
    if xs:
        ax.plot(xs, medians, color=colour, marker=marker, markersize=8, linewidth=1.5, label=label)
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels([arm_name(a) for a in arms])
    ax.set_xlim(-0.6, len(arms) - 0.4)


def save(fig, path: Path) -> None:
    """The figure as PNG, the same bytes for the same data."""
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
        )


def _per_target(df: pd.DataFrame, path: Path, empty_what: str, draw) -> None:
    """One panel per target; ``draw(ax, frame, arms)`` fills a panel with that target's rows."""
    targets = _targets(df)
    fig, axes = facets(len(targets))
    for ax, target in zip(axes, targets or [None]):
        if target is None:
            no_data(ax, empty_what)
            continue
        frame = df[df["target"] == target]
        draw(ax, frame, sorted(frame["arm"].astype(int).unique()))
        ax.set_title(target)
    save(fig, path)


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
                    color=palette[int(arm)], label=arm_name(arm))
        ax.set_xticks(sorted(frame["position"].unique()))
        ax.set_xlabel("position in rep order")
        ax.set_ylabel("median aggregate tok/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="best")

    _per_target(medians, path, "cells", draw)


def _time_unit(seconds: pd.Series) -> tuple[float, str]:
    """A divisor and unit for seconds since the first cell that keep tick labels short."""
    span = float(seconds.max()) if len(seconds) else 0.0
    if span >= 2 * 3600:
        return 3600.0, "h"
    if span >= 600:
        return 60.0, "min"
    return 1.0, "s"


def plot_timeline(cells: pd.DataFrame, path: Path, thermal: pd.DataFrame | None = None) -> None:
    """Aggregate tok/s of every cell over time, annotated with the machine's thermal state."""
    palette = arm_palette(cells["arm"]) if not cells.empty else {}
    names = {arm_name(a): c for a, c in palette.items()}

    def draw(ax, frame, arms):
        frame = frame.copy()
        origin = float(frame["t_start_unix"].min())
        divisor, unit = _time_unit(frame["t_start_unix"] - origin)
        frame["elapsed"] = (frame["t_start_unix"] - origin) / divisor
        frame["arm"] = frame["arm"].map(arm_name)  # legend reads "arm", values serial-1 …
        sns.scatterplot(data=frame, x="elapsed", y="agg_tps", hue="arm",
                        hue_order=[arm_name(a) for a in arms], palette=names, style="run",
                        ax=ax, s=28)
        target = frame["target"].iloc[0]
        extra = draw_thermal(ax, samples_of(thermal, target), origin, divisor)
        ax.set_xlabel(f"time since first cell ({unit})")
        ax.set_ylabel("aggregate tok/s")
        ax.set_ylim(bottom=0)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles + extra, labels + [h.get_label() for h in extra], fontsize=6,
                  loc="best")

    _per_target(cells, path, "cells", draw)


def plot_capacity(ratios: pd.DataFrame, path: Path, assessed: dict | None = None) -> None:
    assessed = assessed or {}
    slo = assessed.get("slo") or {}
    colours = sns.color_palette("dark", 4)

    def draw(ax, frame, arms):
        record = (assessed.get("targets") or {}).get(str(frame["target"].iloc[0])) or {}
        rows = record.get("arms") or []
        if not rows:
            no_data(ax, "capacity record")
            return
        x = [r["arm"] for r in rows]
        for name, label, colour, marker in (("agg_tps", "aggregate", colours[0], "o"),
                                            ("user_tps", "per user", colours[3], "s")):
            y = np.array([r[name] if r[name] is not None else np.nan for r in rows], dtype=float)
            lo = np.array([r[f"{name}_lo"] if r[f"{name}_lo"] is not None else np.nan
                           for r in rows], dtype=float)
            hi = np.array([r[f"{name}_hi"] if r[f"{name}_hi"] is not None else np.nan
                           for r in rows], dtype=float)
            ax.errorbar(x, y, yerr=[np.nan_to_num(y - lo), np.nan_to_num(hi - y)], color=colour,
                        marker=marker, capsize=3, label=label)
        if slo.get("user_tps_min") is not None:
            ax.axhline(slo["user_tps_min"], color=colours[3], linestyle="--", linewidth=1,
                       label=f"slo.user_tps_min {slo['user_tps_min']:g}")
        sat = (record.get("saturation") or {}).get("arm")
        if sat is not None:
            ax.axvspan(sat, max(x), color="0.9", zorder=0, label=f"saturated after {sat}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(a) for a in x])
        ax.set_xlabel("requests in flight")
        ax.set_ylabel("tokens / s")
        ax.set_ylim(bottom=0)
        twin = ax.twinx()
        pct = slo["ttft_percentile"]
        ttft = [r["ttft"] if r["ttft"] is not None else np.nan for r in rows]
        twin.plot(x, ttft, color=colours[1], marker="^", linewidth=1, label=f"TTFT {pct}")
        if slo.get("ttft_s_max") is not None:
            twin.axhline(slo["ttft_s_max"], color=colours[1], linestyle="--", linewidth=1,
                         label=f"slo.ttft_s_max {slo['ttft_s_max']:g} s")
        twin.set_ylabel(f"TTFT {pct} (s)")
        twin.set_ylim(bottom=0)
        twin.grid(False)
        handles = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper left")

    _per_target(ratios, path, "cells", draw)


def plot_across(summary: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Per metric, one row of point-and-interval per target; returns the rows drawn."""
    arm = common_arm(summary) if len(summary) else None
    metrics = {"speedup": "speedup", "user_ratio": "per-user change", "ttft_ratio": "TTFT ratio"}
    height = max(2.4, 1.2 + 0.45 * (summary["target"].nunique() if len(summary) else 1))
    fig, axes = plt.subplots(1, len(metrics), figsize=(10, height), squeeze=False, sharey=True)
    rows = ordered(summary, arm) if arm is not None else summary.iloc[0:0]
    for ax, (metric, label) in zip(axes[0], metrics.items()):
        if rows.empty:
            no_data(ax, "parallel arm shared by the targets")
            continue
        y = np.arange(len(rows))[::-1]
        value, lo, hi = (rows[c].to_numpy(float) for c in (metric, f"{metric}_lo", f"{metric}_hi"))
        ax.errorbar(value, y, xerr=[np.nan_to_num(value - lo), np.nan_to_num(hi - value)],
                    fmt="o", capsize=3, color="#1b4f9c")
        ax.axvline(1.0, color="0.5", linestyle="--", linewidth=1)
        ax.set_yticks(y, rows["target"].tolist())
        ax.set_xlabel(f"{label} at {arm}-way")
    save(fig, path)
    return rows


def plot_server_batch(cells: pd.DataFrame, samples: pd.DataFrame | None, path) -> tuple:
    """The figure (rows: targets, columns: arms); returns (the cells drawn, scrapes per cell)."""
    samples = server.server_rows(samples)
    targets = sorted(cells["target"].astype(str).unique()) if not cells.empty else []
    arms = sorted(cells["arm"].astype(int).unique()) if not cells.empty else []
    ncols, nrows = max(len(arms), 1), max(len(targets), 1)
    fig, axes = plt.subplots(nrows, ncols, figsize=(FACET_W * ncols, FACET_H * nrows),
                             squeeze=False)
    drawn, scrapes = [], {}
    if not targets:
        server.not_assessable(axes[0][0], "no cells")
    for i, target in enumerate(targets):
        tc = cells[cells["target"].astype(str) == target]
        ts = samples[samples["target"].astype(str) == target]
        chosen = server.typical_rep(tc, ts) if not ts.empty else None
        for ax in axes[i][1:]:
            ax.set_visible(chosen is not None)
        if chosen is None:
            server.not_assessable(axes[i][0], server.why_none(tc, ts))
            axes[i][0].set_title(f"{target}: no server telemetry", fontsize=9)
            continue
        run, rep = chosen
        rep_cells = tc[(tc["run"].astype(str) == run) & (tc["rep"] == rep)]
        for ax, arm in zip(axes[i], arms):
            cell = rep_cells[rep_cells["arm"] == arm]
            ax.set_visible(not cell.empty)
            if cell.empty:
                continue
            cell = next(cell.itertuples())
            rows = server.cell_rows(ts, cell)
            series = server.draw_cell(ax, cell, rows)
            ax.set_title(f"{target} {run}/rep{rep}: {arm_name(arm)} (position {cell.position})",
                         fontsize=8)
            label = cell_label(target, run, rep, arm)
            scrapes[label] = {"scrapes": int(rows["t_s"].nunique()),
                              "batch_metric": series["batch_metric"],
                              "queue_metric": series["queue_metric"]}
        drawn.append(rep_cells)
    save(fig, path)
    return (pd.concat(drawn) if drawn else cells.iloc[0:0]), scrapes


PLOTTERS = {
    "throughput": (plot_throughput, "cells"),
    "ttft": (plot_ttft, "cells"),
    "decomposition": (plot_decomposition, "ratios"),
    "positions": (plot_positions, "cells"),
    "timeline": (plot_timeline, "cells"),
    "capacity": (plot_capacity, "ratios"),
    "across": (plot_across, "summary"),
    "server_batch": (plot_server_batch, "cells"),
}


def make_all(
    cells: pd.DataFrame,
    ratios: pd.DataFrame,
    outdir: str | Path,
    files: dict[str, str] | None = None,
    thermal: pd.DataFrame | None = None,
    capacity: dict | None = None,
    summary: pd.DataFrame | None = None,
    server_metrics: pd.DataFrame | None = None,
) -> dict[str, dict]:
    """Write every figure as PNG into outdir and return fig_id -> provenance. Of ``cells``, only
    the cells behind the headline are drawn (consolidate.headline_cells).

    `files` optionally overrides a figure's basename (default "<fig_id>.png"). The decomposition
    figure's sources include the serial cells (its ratios' denominators). `thermal` (samples from
    the same raw files) annotates the timeline; without samples it says "no thermal source".
    `server_metrics` (server_metrics.parquet, the same raw files) draws the server's batch and
    queue over each cell of one rep per target; without it that figure says "not assessable".
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = files or {}
    cells = headline_cells(cells)  # the cells the analysis and the checks read
    summary = summary if summary is not None else pd.DataFrame(columns=["target", "arm"])
    # these figures put the concurrency levels on their axes; rate arms (negative) are drawn
    # on the open loop's own axes
    cells, ratios, summary = (df[df["arm"] > 0] for df in (cells, ratios, summary))
    frames = {"cells": cells, "ratios": ratios, "summary": summary}
    sources = {}
    sns.set_theme(style="whitegrid", context="paper")
    for fig_id, (plot, frame_name) in PLOTTERS.items():
        frame = frames[frame_name]
        basename = files.get(fig_id, f"{fig_id}.png")
        if fig_id == "timeline":
            plot(frame, outdir / basename, thermal)
        elif fig_id == "capacity":
            plot(frame, outdir / basename, capacity)
        elif fig_id == "across":  # its cells: each drawn target's cells of that arm and serial
            drawn = plot(frame, outdir / basename)
            arms = {SERIAL_ARM, *drawn["arm"].astype(int)} if len(drawn) else set()
            frame = ratios[ratios["target"].astype(str).isin(set(drawn["target"].astype(str)))
                           & ratios["arm"].astype(int).isin(arms)]
        elif fig_id == "server_batch":  # its cells: the rep drawn of each target
            frame, scrapes = plot(frame, server_metrics, outdir / basename)
        else:
            plot(frame, outdir / basename)
        sources[fig_id] = {
            "title": TITLES[fig_id],
            "file": basename,
            "caption": CAPTIONS[fig_id],
            "cells": cell_labels(frame),
            "raw_sha256": raw_hashes(frame),
        }
        if fig_id == "server_batch":  # the scrapes behind each cell, from its raw file
            sources[fig_id]["scrapes"] = scrapes
        if fig_id in MULTI_TARGET:
            sources[fig_id]["shown"] = bool(frame["target"].nunique() >= 2)
    return sources
