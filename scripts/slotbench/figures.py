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

from slotbench import stats  # noqa: E402
from slotbench.across import common_arm, ordered  # noqa: E402
from slotbench.cells import SERIAL_ARM, arm_name, cell_labels, raw_hashes  # noqa: E402
from slotbench.analyse import position_medians  # noqa: E402
from slotbench.thermal import is_event  # noqa: E402

DPI = 110
FACET_W, FACET_H = 4.4, 3.4
MAX_COLS = 3
# PNG metadata without a Software stamp, so identical data gives identical bytes.
PNG_METADATA = {"Software": None}

FIGURE_IDS = ("throughput", "ttft", "decomposition", "positions", "timeline", "capacity",
              "across")

TITLES = {
    "throughput": "Operator throughput vs per-user generation rate",
    "ttft": "Time to first token by arm",
    "decomposition": "Speedup split into batching (gen_gain) and pipelining",
    "positions": "Median operator throughput at each rotation position",
    "timeline": "Operator throughput over the course of the runs",
    "capacity": "Capacity curve: aggregate and per-user rate against concurrency",
    "across": "Targets side by side at the widest arm they share",
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
        "Where the machine exposed a thermal source, the clock (mean over the CPUs, or each "
        "GPU's) and the hottest temperature sampled during the reps are drawn on extra axes "
        "against the same time, and every sample that reported throttling or thermal pressure is "
        'a dotted red vertical line; a panel without samples says "no thermal source".'
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
}
MULTI_TARGET = {"across"}  # shown in the report with two targets or more; always written
EVENT_COLOUR = "#c62828"
CLOCK_COLOUR = "0.35"
TEMP_COLOUR = "#b35806"
# Samples further apart than this (seconds) belong to different reps: the line breaks there.
THERMAL_GAP_S = 5.0


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
    fig, axes = plt.subplots(nrows, ncols, figsize=(FACET_W * ncols, FACET_H * nrows),
                             squeeze=False)  # fmt: skip
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
        ax.scatter(i + offset + rng.uniform(-0.06, 0.06, vals.size), vals, s=12, alpha=0.45,
                   color=colour, marker=marker, linewidths=0)
        xs.append(i + offset)
        medians.append(stats.median(vals))
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


def _time_unit(seconds: pd.Series) -> tuple[float, str]:
    """A divisor and unit for seconds since the first cell that keep tick labels short."""
    span = float(seconds.max()) if len(seconds) else 0.0
    if span >= 2 * 3600:
        return 3600.0, "h"
    if span >= 600:
        return 60.0, "min"
    return 1.0, "s"


def _thermal_of(thermal: pd.DataFrame | None, target) -> pd.DataFrame:
    """A target's thermal samples that have a time (empty when there are none)."""
    if thermal is None or thermal.empty or "target" not in thermal or "t_unix" not in thermal:
        return pd.DataFrame()
    rows = thermal[(thermal["target"].astype(str) == str(target)) & thermal["t_unix"].notna()]
    rows = rows.copy()
    for col in ("source", "sensor", "temp_c", "freq_mhz", "throttled", "pressure"):
        if col not in rows:
            rows[col] = None
    rows["temp_c"] = pd.to_numeric(rows["temp_c"], errors="coerce")
    rows["freq_mhz"] = pd.to_numeric(rows["freq_mhz"], errors="coerce")
    return rows


def _segments(x: np.ndarray, y: np.ndarray, gap: float):
    """Runs of consecutive samples, split where samples are more than ``gap`` apart."""
    if x.size == 0:
        return
    breaks = np.flatnonzero(np.diff(x) > gap) + 1
    for xs, ys in zip(np.split(x, breaks), np.split(y, breaks)):
        yield xs, ys


def _series(rows: pd.DataFrame, value: str, how: str) -> list[tuple[str, pd.Series]]:
    """Per kind of source (CPU clock vs GPU clock): one value per sampling time."""
    found = rows[rows[value].notna()]
    if found.empty:
        return []
    kind = np.where(found["source"].astype(str) == "nvidia", "GPU", "CPU")
    out = []
    for name in ("CPU", "GPU"):
        sel = found[kind == name]
        if not sel.empty:
            out.append((name, sel.groupby("t_unix", sort=True)[value].agg(how)))
    return out


def draw_thermal(ax, rows: pd.DataFrame, origin: float, divisor: float) -> list:
    """Clock and temperature on twin axes against the cells' time, events as vertical lines (a
    note when there is nothing to draw); returns legend handles for the extra lines."""
    from matplotlib.lines import Line2D

    usable = (
        not rows.empty
        and (rows["freq_mhz"].notna().any() or rows["temp_c"].notna().any()
             or rows["throttled"].notna().any() or rows["pressure"].notna().any())
    )  # fmt: skip
    if not usable:
        ax.text(0.99, 0.02, "no thermal source", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="0.4")  # fmt: skip
        return []
    handles = []
    gap = THERMAL_GAP_S / divisor
    twins = []
    for value, how, colour, label, unit in (
        ("freq_mhz", "mean", CLOCK_COLOUR, "clock", "MHz"),
        ("temp_c", "max", TEMP_COLOUR, "temperature", "°C"),
    ):
        series = _series(rows, value, how)
        if not series:
            continue
        twin = ax.twinx()
        if twins:  # a second extra axis: move its spine outwards so the scales do not overlap
            twin.spines["right"].set_position(("axes", 1.22))
        twins.append(twin)
        for (name, values), style in zip(series, ("-", "--")):
            x = (values.index.to_numpy(dtype=float) - origin) / divisor
            for xs, ys in _segments(x, values.to_numpy(dtype=float), gap):
                twin.plot(xs, ys, color=colour, linewidth=0.9, alpha=0.75, linestyle=style)
            what = f"{name} {label} ({'mean' if how == 'mean' else 'max'}, {unit})"
            handles.append(Line2D([], [], color=colour, linewidth=0.9, linestyle=style,
                                  label=what))  # fmt: skip
        twin.set_ylabel(f"{label} ({unit})", fontsize=7, color=colour)
        twin.tick_params(axis="y", labelsize=7, colors=colour)
        twin.grid(False)
    if twins:  # cells above the thermal lines
        ax.set_zorder(max(t.get_zorder() for t in twins) + 1)
        ax.patch.set_visible(False)
    events = rows.loc[is_event(rows), "t_unix"].drop_duplicates().sort_values()
    for t in events:
        ax.axvline((float(t) - origin) / divisor, color=EVENT_COLOUR, linestyle=":",
                   linewidth=0.6, alpha=0.5, zorder=0.8)  # below the cells' points; fmt: skip
    if not twins and not len(events):  # e.g. pmset: pressure levels only, all nominal
        ax.text(0.99, 0.02, "thermal: no throttling or pressure reported",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
                color="0.4")  # fmt: skip
    if len(events):
        handles.append(Line2D([], [], color=EVENT_COLOUR, linestyle=":", linewidth=0.8,
                              label=f"throttle/pressure ({len(events)})"))  # fmt: skip
    return handles


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
                        ax=ax, s=28)  # fmt: skip
        target = frame["target"].iloc[0]
        extra = draw_thermal(ax, _thermal_of(thermal, target), origin, divisor)
        ax.set_xlabel(f"time since first cell ({unit})")
        ax.set_ylabel("aggregate tok/s")
        ax.set_ylim(bottom=0)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles + extra, labels + [h.get_label() for h in extra], fontsize=6,
                  loc="best")  # fmt: skip

    _per_target(cells, path, "cells", draw)


def plot_capacity(ratios: pd.DataFrame, path: Path, assessed: dict | None = None) -> None:
    assessed = assessed or {}
    slo = assessed.get("slo") or {}
    colours = sns.color_palette("dark", 4)

    def draw(ax, frame, arms):
        record = (assessed.get("targets") or {}).get(str(frame["target"].iloc[0])) or {}
        rows = record.get("arms") or []
        if not rows:
            _no_data(ax, "capacity record")
            return
        x = [r["arm"] for r in rows]
        for name, label, colour, marker in (("agg_tps", "aggregate", colours[0], "o"),
                                            ("user_tps", "per user", colours[3], "s")):  # fmt: skip
            y = np.array([r[name] if r[name] is not None else np.nan for r in rows], dtype=float)
            lo = np.array([r[f"{name}_lo"] if r[f"{name}_lo"] is not None else np.nan
                           for r in rows], dtype=float)  # fmt: skip
            hi = np.array([r[f"{name}_hi"] if r[f"{name}_hi"] is not None else np.nan
                           for r in rows], dtype=float)  # fmt: skip
            ax.errorbar(x, y, yerr=[np.nan_to_num(y - lo), np.nan_to_num(hi - y)], color=colour,
                        marker=marker, capsize=3, label=label)  # fmt: skip
        if slo.get("user_tps_min") is not None:
            ax.axhline(slo["user_tps_min"], color=colours[3], linestyle="--", linewidth=1,
                       label=f"slo.user_tps_min {slo['user_tps_min']:g}")  # fmt: skip
        sat = (record.get("saturation") or {}).get("arm")
        if sat is not None:
            ax.axvspan(sat, max(x), color="0.9", zorder=0, label=f"saturated after {sat}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(a) for a in x])
        ax.set_xlabel("requests in flight")
        ax.set_ylabel("tokens / s")
        ax.set_ylim(bottom=0)
        twin = ax.twinx()
        pct = slo.get("ttft_percentile", "p95")
        ttft = [r["ttft"] if r["ttft"] is not None else np.nan for r in rows]
        twin.plot(x, ttft, color=colours[1], marker="^", linewidth=1, label=f"TTFT {pct}")
        if slo.get("ttft_s_max") is not None:
            twin.axhline(slo["ttft_s_max"], color=colours[1], linestyle="--", linewidth=1,
                         label=f"slo.ttft_s_max {slo['ttft_s_max']:g} s")  # fmt: skip
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
            _no_data(ax, "parallel arm shared by the targets")
            continue
        y = np.arange(len(rows))[::-1]
        value, lo, hi = (rows[c].to_numpy(float) for c in (metric, f"{metric}_lo", f"{metric}_hi"))
        ax.errorbar(value, y, xerr=[np.nan_to_num(value - lo), np.nan_to_num(hi - value)],
                    fmt="o", capsize=3, color="#1b4f9c")  # fmt: skip
        ax.axvline(1.0, color="0.5", linestyle="--", linewidth=1)
        ax.set_yticks(y, rows["target"].tolist())
        ax.set_xlabel(f"{label} at {arm}-way")
    _save(fig, path)
    return rows


PLOTTERS = {
    "throughput": (plot_throughput, "cells"),
    "ttft": (plot_ttft, "cells"),
    "decomposition": (plot_decomposition, "ratios"),
    "positions": (plot_positions, "cells"),
    "timeline": (plot_timeline, "cells"),
    "capacity": (plot_capacity, "ratios"),
    "across": (plot_across, "summary"),
}


def make_all(
    cells: pd.DataFrame,
    ratios: pd.DataFrame,
    outdir: str | Path,
    files: dict[str, str] | None = None,
    thermal: pd.DataFrame | None = None,
    capacity: dict | None = None,
    summary: pd.DataFrame | None = None,
) -> dict[str, dict]:
    """Write every figure as PNG into outdir and return fig_id -> provenance.

    `files` optionally overrides a figure's basename (default "<fig_id>.png"). The decomposition
    figure's sources include the serial cells (its ratios' denominators). `thermal` (samples from
    the same raw files) annotates the timeline; without samples it says "no thermal source".
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = files or {}
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
                           & ratios["arm"].astype(int).isin(arms)]  # fmt: skip
        else:
            plot(frame, outdir / basename)
        sources[fig_id] = {
            "title": TITLES[fig_id],
            "file": basename,
            "caption": CAPTIONS[fig_id],
            "cells": cell_labels(frame),
            "raw_sha256": raw_hashes(frame),
        }
        if fig_id in MULTI_TARGET:
            sources[fig_id]["shown"] = bool(frame["target"].nunique() >= 2)
    return sources
