"""The timeline's thermal annotation: the machine's clock and temperature on extra axes against
the cells' time, and every sample that reported throttling or thermal pressure as a vertical
line (from the thermal samples of the same raw files as the cells)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from slotbench.measure.thermal import is_event

EVENT_COLOUR = "#c62828"
CLOCK_COLOUR = "0.35"
TEMP_COLOUR = "#b35806"
# Samples further apart than this (seconds) belong to different reps: the line breaks there.
THERMAL_GAP_S = 5.0


def samples_of(thermal: pd.DataFrame | None, target) -> pd.DataFrame:
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
    )
    if not usable:
        ax.text(0.99, 0.02, "no thermal source", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="0.4")
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
                                  label=what))
        twin.set_ylabel(f"{label} ({unit})", fontsize=7, color=colour)
        twin.tick_params(axis="y", labelsize=7, colors=colour)
        twin.grid(False)
    if twins:  # cells above the thermal lines
        ax.set_zorder(max(t.get_zorder() for t in twins) + 1)
        ax.patch.set_visible(False)
    events = rows.loc[is_event(rows), "t_unix"].drop_duplicates().sort_values()
    for t in events:
        ax.axvline((float(t) - origin) / divisor, color=EVENT_COLOUR, linestyle=":",
                   linewidth=0.6, alpha=0.5, zorder=0.8)  # below the cells' points
    if not twins and not len(events):  # e.g. pmset: pressure levels only, all nominal
        ax.text(0.99, 0.02, "thermal: no throttling or pressure reported",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
                color="0.4")
    if len(events):
        handles.append(Line2D([], [], color=EVENT_COLOUR, linestyle=":", linewidth=0.8,
                              label=f"throttle/pressure ({len(events)})"))
    return handles
