"""The paired design's figure: each pair's ratio B / A beside its median and interval, and the
drift line of every side (slotbench.analysis.paired computes what it shows)."""

from __future__ import annotations

import numpy as np

from slotbench.core.cells import SERIAL_ARM, arm_name
from slotbench.figures.plots import save


def plot(result: dict, path) -> None:
    """Left: the per-pair ratios B / A of the widest arm's speedup and of the serial arm's
    aggregate tok/s, with their median and interval; right: the drift line of every target."""
    import matplotlib.pyplot as plt  # Agg: figures.plots chose it

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    ticks, y = [], 0
    for target, comp in result["comparisons"].items():
        widest = max((r["arm"] for r in comp["rows"]), default=SERIAL_ARM)
        for row in comp["rows"]:
            if (row["arm"], row["metric"]) not in ((widest, "speedup"), (SERIAL_ARM, "agg_tps")):
                continue
            xs = [p["ratio"] for p in row["pair_ratios"]]
            left.scatter(xs, [y] * len(xs), s=14, color="#1b4f9c", alpha=0.6, zorder=3)
            if np.isfinite(row["ratio"]):
                left.errorbar([row["ratio"]], [y], xerr=[[row["ratio"] - row["ratio_lo"]],
                                                         [row["ratio_hi"] - row["ratio"]]],
                              fmt="D", color="#c0392b", capsize=4, zorder=4)
            ticks.append((y, f"{target}\n{arm_name(row['arm'])} {row['label']}"))
            y += 1
    left.axvline(1.0, color="grey", lw=1, ls="--")
    left.set_yticks([t for t, _ in ticks], [lab for _, lab in ticks], fontsize=7)
    left.set_xlabel(f"B / {result['baseline']} per pair (median, {result['ci']:.0%} interval)")
    left.set_title("paired ratios")
    t0 = min((p["t_unix"] for d in result["drift"].values() for p in d["points"]), default=0.0)
    for target, line in result["drift"].items():
        pts = line["points"]
        if not pts:
            continue
        right.plot([(p["t_unix"] - t0) / 60 for p in pts], [p["agg_tps"] for p in pts],
                   marker="o", ms=3, label=target)
    right.set_xlabel("minutes into the measurement")
    right.set_ylabel(f"{arm_name(SERIAL_ARM)} aggregate tok/s")
    right.set_title("drift: the serial arm of every side")
    right.legend(fontsize=7)
    save(fig, path)
