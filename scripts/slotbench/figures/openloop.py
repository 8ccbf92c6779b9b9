"""Figures of the open loop (rate arms): latency against load, the rate achieved against the rate
offered, and both loops on one effective-concurrency axis.

Drawn from results/<experiment>/analysis/openloop.json (slotbench.analysis.openloop) alone, with
the overload check's verdict when the checks' verdicts are given: an overloaded arm (its queue grew
all cell long) is a marked point never joined to a curve, since its percentiles say how long the
cell ran rather than what the server does at that rate. Without the verdict no arm is marked. With
no rate arm in any target every figure is a placeholder saying so and is marked not shown, so the
figures rule writes the same files whatever the config. make_open returns, per figure, the cells
and raw-file SHA-256s behind it, as figures.make_all does.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede seaborn's import of pyplot

import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402

from slotbench.analysis.openloop import has_rate_arms, overloaded  # noqa: E402
from slotbench.core.cells import label_key  # noqa: E402
from slotbench.figures.captions import OPEN_CAPTIONS, OPEN_TITLES  # noqa: E402
from slotbench.figures.plots import facets, no_data, save  # noqa: E402

FIGURE_IDS = ("latency_load", "achieved_offered", "concurrency_axis")
# The report section that shows them (slotbench.report.openloop), not the Figures section.
SECTION = "openloop"

CLOSED_COLOUR, OPEN_COLOUR, USER_COLOUR = "#1b4f9c", "#b35806", "#2e7d32"
OVERLOAD_COLOUR = "#c62828"


def _num(value) -> float:
    return float("nan") if value is None else float(value)


def _series(rows: list[dict], name: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """Values and their error bars (distances to the interval's ends) for errorbar()."""
    y = np.array([_num(r.get(name)) for r in rows], dtype=float)
    lo = np.array([_num(r.get(f"{name}_lo")) for r in rows], dtype=float)
    hi = np.array([_num(r.get(f"{name}_hi")) for r in rows], dtype=float)
    return y, [np.nan_to_num(y - lo).clip(0), np.nan_to_num(hi - y).clip(0)]


def _placeholder(path: Path) -> None:
    fig, (ax,) = facets(1)
    no_data(ax, "rate arms")
    save(fig, path)


def _log_if_wide(ax, values, ticks: bool = False) -> None:
    """A log x axis (base 2) when the values span a factor of 8 or more; ``ticks``: a tick at
    each value (the measured rates), labelled with it."""
    vals = sorted({v for v in values if v == v and v > 0})
    if vals and max(vals) / min(vals) >= 8:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    if vals and ticks:
        ax.set_xticks(vals, [f"{v:g}" for v in vals])


def _headroom(ax, rows, name: str) -> None:
    """y from 0 to a little above the highest interval, so no point sits on the frame."""
    tops = [_num(r.get(f"{name}_hi") if r.get(f"{name}_hi") is not None else r.get(name))
            for r in rows]
    tops = [t for t in tops if t == t]
    ax.set_ylim(0, max(tops) * 1.15 if tops and max(tops) > 0 else None)


def _curve(ax, rows, x_name, y_name, colour, marker, label, x_err=False, **style) -> None:
    """Points with intervals joined by a line (nothing drawn without a point)."""
    if not rows:
        return
    y, yerr = _series(rows, y_name)
    x, xerr = _series(rows, x_name)
    ax.errorbar(x, y, yerr=yerr, xerr=xerr if x_err else None, color=colour, marker=marker,
                capsize=3, label=label, **style)


def _marked(ax, rows, x_name, y_name, label, marker="X") -> None:
    """Overloaded arms: red crosses, never joined to a curve."""
    if not rows:
        return
    x, _ = _series(rows, x_name)
    y, _ = _series(rows, y_name)
    ax.scatter(x, y, marker=marker, s=60, color=OVERLOAD_COLOUR, zorder=5, label=label)


def _split(rows: list[dict], marked: set[int]) -> tuple[list[dict], list[dict]]:
    return [r for r in rows if r["arm"] not in marked], [r for r in rows if r["arm"] in marked]


def _legend(ax, twin) -> None:
    handles, labels = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(handles + more[0], labels + more[1], fontsize=7, loc="best")


def draw_latency_load(ax, record: dict, slo: dict, marked: set[int]) -> None:
    kept, over = _split(record["arms"], marked)
    _curve(ax, kept, "offered_rate", "ttft_p50", OPEN_COLOUR, "o", "TTFT p50")
    _curve(ax, kept, "offered_rate", "ttft_p95", OPEN_COLOUR, "^", "TTFT p95", linestyle="--")
    _marked(ax, over, "offered_rate", "ttft_p95", "overloaded (TTFT p95)")
    if slo.get("ttft_s_max") is not None:
        ax.axhline(slo["ttft_s_max"], color=OPEN_COLOUR, linestyle=":", linewidth=1,
                   label=f"slo.ttft_s_max {slo['ttft_s_max']:g} s")
    ax.set_ylabel("TTFT from planned arrival (s)")
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    _curve(twin, kept, "offered_rate", "user_tps", USER_COLOUR, "s", "per-user tok/s")
    _marked(twin, over, "offered_rate", "user_tps", "overloaded (per-user)", "P")
    if slo.get("user_tps_min") is not None:
        twin.axhline(slo["user_tps_min"], color=USER_COLOUR, linestyle=":", linewidth=1,
                     label=f"slo.user_tps_min {slo['user_tps_min']:g}")
    twin.set_ylabel("per-user tok/s")
    _headroom(twin, record["arms"], "user_tps")
    twin.grid(False)
    _log_if_wide(ax, [r["offered_rate"] for r in record["arms"]], ticks=True)
    ax.set_xlabel("offered rate (requests/s)")
    _legend(ax, twin)


def draw_achieved_offered(ax, record: dict, slo: dict, marked: set[int]) -> None:
    kept, over = _split(record["arms"], marked)
    _curve(ax, kept, "offered_rate", "achieved_rate", OPEN_COLOUR, "o", "achieved")
    _marked(ax, over, "offered_rate", "achieved_rate", "overloaded")
    rates = [_num(r.get(k)) for r in record["arms"] for k in ("offered_rate", "achieved_rate")]
    top = max([v for v in rates if v == v] or [1.0]) * 1.08
    ax.plot([0, top], [0, top], color="0.4", linestyle="--", linewidth=1, label="y = x")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("achieved rate (requests/s)")
    ax.legend(fontsize=7, loc="upper left")


def draw_concurrency_axis(ax, record: dict, slo: dict, marked: set[int]) -> None:
    closed = [r for r in record["axis"] if not r["open"]]
    opened, over = _split([r for r in record["axis"] if r["open"]], marked)
    _curve(ax, closed, "in_flight", "agg_tps", CLOSED_COLOUR, "o", "aggregate, closed", x_err=True)
    _curve(ax, opened, "in_flight", "agg_tps", OPEN_COLOUR, "^", "aggregate, open", x_err=True)
    _marked(ax, over, "in_flight", "agg_tps", "overloaded (aggregate)")
    for r in record["axis"]:
        if r["in_flight"] is not None and r["agg_tps"] is not None:
            ax.annotate(r["name"], (r["in_flight"], r["agg_tps"]), fontsize=6,
                        textcoords="offset points", xytext=(4, 4))
    ax.set_ylabel("aggregate tok/s")
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    _curve(twin, closed, "in_flight", "ttft_p95", CLOSED_COLOUR, "s", "TTFT p95, closed",
           linestyle=":")
    _curve(twin, opened, "in_flight", "ttft_p95", OPEN_COLOUR, "v", "TTFT p95, open",
           linestyle=":")
    _marked(twin, over, "in_flight", "ttft_p95", "overloaded (TTFT p95)", "P")
    twin.set_ylabel("TTFT p95 (s)")
    twin.set_ylim(bottom=0)
    twin.grid(False)
    _log_if_wide(ax, [_num(r["in_flight"]) for r in record["axis"]])
    ax.set_xlabel("effective concurrency (requests in flight, time-weighted)")
    _legend(ax, twin)


DRAW = {
    "latency_load": (draw_latency_load, "arms"),
    "achieved_offered": (draw_achieved_offered, "arms"),
    "concurrency_axis": (draw_concurrency_axis, "axis"),
}


def _sources(targets: dict, key: str) -> tuple[list[str], list[str]]:
    rows = [r for record in targets.values() for r in record[key]]
    return (sorted({c for r in rows for c in r.get("cells") or []}, key=label_key),
            sorted({h for r in rows for h in r.get("raw_sha256") or []}))


def make_open(openloop: dict, outdir: str | Path, files: dict[str, str] | None = None,
              verdicts: list[dict] | None = None) -> dict[str, dict]:
    """Write the open loop's figures as PNG into outdir; fig_id -> provenance (title, file,
    caption, cells, raw_sha256, shown: false when no target has rate arms, and the report
    section that shows them)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = files or {}
    shown = has_rate_arms(openloop)
    targets = {t: r for t, r in sorted((openloop.get("targets") or {}).items()) if r.get("arms")}
    marked = overloaded(verdicts)
    slo = openloop.get("slo") or {}
    sns.set_theme(style="whitegrid", context="paper")
    sources = {}
    for fig_id, (draw, key) in DRAW.items():
        path = outdir / files.get(fig_id, f"{fig_id}.png")
        if not shown:
            _placeholder(path)
        else:
            fig, axes = facets(len(targets))
            for ax, (target, record) in zip(axes, targets.items()):
                draw(ax, record, slo, marked.get(target, set()))
                ax.set_title(target)
            save(fig, path)
        cells, hashes = _sources(targets, key)
        sources[fig_id] = {"title": OPEN_TITLES[fig_id], "file": path.name,
                           "caption": OPEN_CAPTIONS[fig_id], "cells": cells, "raw_sha256": hashes,
                           "shown": shown, "section": SECTION}
    return sources
