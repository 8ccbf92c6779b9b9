"""The compare figure: each side's median speedup and per-user tok/s by arm, with the cells as
points (slotbench.analysis.compare computes what it shows)."""

from __future__ import annotations

from pathlib import Path

from slotbench.analysis.compare import METRICS, Side
from slotbench.core import stats
from slotbench.figures.plots import save


def plot(result: dict, sides: tuple[Side, Side], path: Path) -> None:
    import matplotlib.pyplot as plt  # Agg: figures.plots chose it

    targets = list(result["targets"]) or [""]
    arms = sorted({int(a) for side in sides for a in side.ratios["arm"].unique()})
    fig, axes = plt.subplots(len(targets), 2, figsize=(9, 3.2 * len(targets)), squeeze=False)
    for row, target in zip(axes, targets):
        for ax, metric in zip(row, ("speedup", "user_tps")):
            for side, label, colour in ((sides[0], "A", "#1b4f9c"), (sides[1], "B", "#c0392b")):
                r = side.ratios[side.ratios["target"].astype(str) == target]
                if r.empty or metric not in r:
                    continue
                med = r.groupby("arm")[metric].agg(stats.median)
                ax.plot(med.index, med.values, marker="o", color=colour, label=label)
                ax.scatter(r["arm"], r[metric], s=8, color=colour, alpha=0.4)
            ax.set_xscale("log", base=2)
            # the arms as plain numbers: log-scale tick labels are mathtext ("2^1")
            ax.set_xticks(arms, [str(a) for a in arms])
            ax.set_title(f"{target}: {METRICS[metric][0]}")
            ax.set_xlabel("requests in flight")
            ax.legend(fontsize=8)
    save(fig, path)
