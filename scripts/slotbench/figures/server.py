"""The server's own view of one rep: the batch it decoded per step and its queue over each cell's
time, one panel per arm, from the scrapes of server_metrics.parquet (the same raw files as the
cells).

The rep drawn is each target's *typical rep*: of the reps whose cells all have server scrapes with
a batch series, the one whose parallel arms' aggregate tok/s lie closest to the arms' medians
(the sum of |log(rep / median)| over the parallel arms; the earliest on a tie). Between two
consecutive scrapes of a cell, the batch is

- llama.cpp: the busy-slot total (``llamacpp:n_busy_slots_per_decode`` ×
  ``llamacpp:n_decode_total``, a lifetime ratio worked back) differenced between the two scrapes, over the decode steps
  between them (:func:`interval_batch`); no step between them: no point;
- vLLM, SGLang, TGI: the running-requests gauge at the later scrape.

The queue is the gauge (``llamacpp:requests_deferred``, ``vllm:num_requests_waiting`` …) summed
over its label sets. A target without such scrapes (a rep measured before telemetry, a server
without /metrics) is one panel that says "not assessable" and why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slotbench.core.cells import arm_name, cell_label
from slotbench.core import prometheus as tm
from slotbench.tables import telemetry as tables

FIGURE_ID = "server_batch"
BATCH_COLOUR = "#1b4f9c"
QUEUE_COLOUR = "#c62828"


def interval_batch(rows: pd.DataFrame) -> pd.DataFrame:
    """llama.cpp's batch per decode step between consecutive scrapes of one source: columns
    t_s (the later scrape), decodes (steps between the two) and batch; NaN where no step ran or a
    series is missing at either scrape. ``rows``: SERVER_METRICS_SCHEMA rows of that source."""
    ok = rows[rows["error"].isna() & rows["metric"].notna()]
    wide = ok.pivot_table(index="t_s", columns="metric", values="value", aggfunc="sum")
    for metric in (tm.LLAMACPP_DECODES, tm.LLAMACPP_BUSY_PER_DECODE):
        if metric not in wide:
            wide[metric] = np.nan
    wide = wide.sort_index()
    decodes = wide[tm.LLAMACPP_DECODES].to_numpy(float)
    busy = wide[tm.LLAMACPP_BUSY_PER_DECODE].to_numpy(float) * decodes
    d_steps, d_busy = np.diff(decodes), np.diff(busy)
    with np.errstate(divide="ignore", invalid="ignore"):
        batch = np.where(d_steps > 0, d_busy / d_steps, np.nan)
    return pd.DataFrame({"t_s": wide.index.to_numpy(float)[1:], "decodes": d_steps,
                         "batch": batch})


def _gauge(rows: pd.DataFrame, metrics: list[str]) -> tuple[str | None, pd.Series]:
    """The first of ``metrics`` the rows have, summed over label sets at each scrape."""
    for metric in metrics:
        sel = rows[rows["metric"].isin([metric, metric + "_total"]) & rows["error"].isna()]
        if not sel.empty:
            return metric, sel.groupby("t_s")["value"].sum().sort_index()
    return None, pd.Series(dtype=float)


def cell_series(rows: pd.DataFrame) -> dict:
    """One cell's batch and queue over its scrapes (``rows``: the cell's server scrapes, every
    phase): {"batch": Series by t_s, "batch_metric", "queue": Series, "queue_metric"}."""
    metrics = set(rows["metric"].dropna())
    if {tm.LLAMACPP_DECODES, tm.LLAMACPP_BUSY_PER_DECODE} <= metrics:
        per = interval_batch(rows)
        batch, batch_metric = per.set_index("t_s")["batch"], tm.LLAMACPP_BUSY_PER_DECODE
    else:
        batch_metric, batch = _gauge(rows, tables.BATCH)
    queue_metric, queue = _gauge(rows, tables.QUEUE)
    return {"batch": batch, "batch_metric": batch_metric, "queue": queue,
            "queue_metric": queue_metric}


def server_rows(samples: pd.DataFrame | None) -> pd.DataFrame:
    """The server's scrapes (role "server"; every source where no role is recorded)."""
    if samples is None or samples.empty or "metric" not in samples:
        return pd.DataFrame(columns=[f.name for f in tables.SERVER_METRICS_SCHEMA])
    if "role" in samples and samples["role"].notna().any():
        samples = samples[samples["role"] == "server"]
    return samples


def cell_rows(samples: pd.DataFrame, cell) -> pd.DataFrame:
    sel = ((samples["target"].astype(str) == str(cell.target))
           & (samples["run"].astype(str) == str(cell.run)) & (samples["rep"] == cell.rep)
           & (samples["arm"] == cell.arm) & (samples["position"] == cell.position))
    return samples[sel]


def _has_batch(rows: pd.DataFrame) -> bool:
    series = cell_series(rows)
    return bool(series["batch"].notna().any())


def typical_rep(cells: pd.DataFrame, samples: pd.DataFrame) -> tuple | None:
    """(run, rep) of one target's cells whose every cell has a server batch series and whose
    parallel arms' aggregate tok/s are closest to the arms' medians; None where no rep has."""
    candidates = []
    medians = cells[cells["arm"] > 1].groupby("arm")["agg_tps"].median()
    for (run, rep), rep_cells in cells.groupby(["run", "rep"], sort=True):
        if not all(_has_batch(cell_rows(samples, c)) for c in rep_cells.itertuples()):
            continue
        parallel = rep_cells[rep_cells["arm"] > 1]
        ratio = parallel["agg_tps"].to_numpy(float) / medians.reindex(
            parallel["arm"]).to_numpy(float)
        distance = float(np.nansum(np.abs(np.log(ratio)))) if len(ratio) else 0.0
        candidates.append((distance, str(run), int(rep)))
    if not candidates:
        return None
    _, run, rep = min(candidates)
    return run, rep


def not_assessable(ax, why: str) -> None:
    ax.text(0.5, 0.5, f"not assessable:\n{why}", ha="center", va="center", fontsize=8,
            transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def why_none(cells: pd.DataFrame, samples: pd.DataFrame) -> str:
    """Why a target has no rep to draw, from its cells' telemetry notes where they say."""
    if samples.empty:
        notes = cells.get("telemetry_note", pd.Series(dtype=object)).dropna()
        return (notes.mode().iloc[0] if len(notes) else tables.NO_TELEMETRY)[:90]
    return "no rep whose every cell has a batch series from the server's /metrics"


def draw_cell(ax, cell, rows: pd.DataFrame) -> dict:
    """One panel: batch per step (steps between scrapes) and queue against seconds since the
    cell's start; the requests in flight as a dashed line."""
    series = cell_series(rows)
    t0 = float(cell.t_start_s)
    batch = series["batch"].dropna()
    if batch.empty:
        not_assessable(ax, "no batch series in this cell's scrapes")
        return series
    ax.step(batch.index.to_numpy(float) - t0, batch.to_numpy(float), where="pre",
            color=BATCH_COLOUR, marker=".", markersize=3, linewidth=1.2, label="batch per step")
    ax.axhline(int(cell.arm), color="0.4", linestyle="--", linewidth=0.8,
               label=f"{int(cell.arm)} in flight")
    ax.axvline(float(cell.wall_s), color="0.6", linestyle=":", linewidth=0.8)
    ax.set_ylim(0, max(int(cell.arm), float(batch.max())) * 1.15 + 0.1)
    ax.set_xlabel("seconds since the cell's start")
    ax.set_ylabel("batch per decode step", color=BATCH_COLOUR)
    queue = series["queue"].dropna()
    handles, labels = ax.get_legend_handles_labels()
    if not queue.empty:
        twin = ax.twinx()
        twin.step(queue.index.to_numpy(float) - t0, queue.to_numpy(float), where="post",
                  color=QUEUE_COLOUR, linewidth=1.0, alpha=0.8, label="queue")
        twin.set_ylim(0, max(1.0, float(queue.max())) * 1.15)
        twin.set_ylabel("queued requests", color=QUEUE_COLOUR, fontsize=7)
        twin.grid(False)
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, fontsize=6, loc="lower right")
    return series
