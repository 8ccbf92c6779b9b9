"""The server's own evidence as tables: every scraped sample of a rep as one row
(``SERVER_METRICS_SCHEMA``), and, for a cell's time window, what those samples say about it
(``TELEMETRY_COLUMNS``): the batch the server decoded, its queue, KV-cache use, preemptions,
tokens it counted, and the energy drawn.

The window of a cell [t0, t1] (seconds on the rep's clock) is read from each source's
*bracketing* scrapes: the last successful scrape at or before t0 and the first successful one
at or after t1. A bracketing scrape may lie up to one scrape interval outside its edge (so one
failed scrape just before or after a cell is made up by its neighbour, never by a scrape a cell
away); where none does, a scrape up to half an interval *inside* the edge counts, as it was all
but on time. A source without both bracketing scrapes gives nothing for the window: its columns
are None and ``telemetry_note`` says why (nothing is computed from half a window).

- Counters (tokens, preemptions) are the difference between the bracketing scrapes: None where
  a series is missing at either end or went back (a restart), never zero. The bracket may be a
  little wider than the window; a cell's tokens are all counted inside it.
- Gauges (batch, queue, KV use) are time-averaged over [t0, t1], linearly between the scrapes
  (trapezoid over ``t_s``, the ends interpolated). Request counts are summed over a metric's
  label sets (vLLM's engines, SGLang's ranks); KV use, a fraction, is their mean.
- Energy is what was drawn over [t0, t1] exactly: an energy counter interpolated linearly at
  t0 and t1 (energy accrues while idle too, unlike tokens), or a power gauge integrated over
  [t0, t1] the same way; summed over GPUs (or CPU packages). The first of these a rep exposes
  is used, in this order: dcgm-exporter's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ),
  DCGM_FI_DEV_POWER_USAGE (W), then the local NVML and RAPL counters of measure/energy.py (J).
  A RAPL counter that went back by less than its range wrapped once and is unwrapped; any other
  counter that went back is a reset, and the energy None.

llama.cpp's batch comes from its lifetime busy-slots ratio (``telemetry.batch_per_decode``);
vLLM, SGLang and TGI expose the running batch as a gauge. TGI's token counts are the sums of its
``tgi_request_input_length`` and ``tgi_request_generated_tokens`` histograms, which grow when a
request finishes. A metric that no source of the rep exposes is None ("not assessable"), never
0, and is no reason for a note.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa

from slotbench.core import prometheus as tm

SERVER_METRICS_SCHEMA = pa.schema(
    [
        pa.field("target", pa.string()), pa.field("run", pa.string()), pa.field("rep", pa.int64()),
        pa.field("arm", pa.int64()), pa.field("position", pa.int64()),
        pa.field("phase", pa.string()),  # before, during or after a cell
        pa.field("t_s", pa.float64()),  # when the scrape was asked, on the rep's clock
        pa.field("source", pa.string()), pa.field("role", pa.string()),
        pa.field("metric", pa.string()),  # null: a scrape that gave no sample (see error)
        pa.field("labels", pa.string()),  # JSON, keys sorted; "{}" when none
        pa.field("value", pa.float64()),
        pa.field("error", pa.string()),  # why the scrape gave nothing; null when it answered
    ]
)

TELEMETRY_COLUMNS = [
    "server_batch", "server_batch_metric", "server_queue", "server_queue_metric",
    "server_kv_usage", "server_preemptions", "server_prompt_tokens", "server_output_tokens",
    "energy_j", "energy_source", "telemetry_note",
]
# their cells.parquet fields, and where the server held the model just before and just after
# the cell (Ollama's /api/ps, JSON; null elsewhere); null: not assessable, see telemetry_note
CELL_FIELDS = [
    pa.field("server_batch", pa.float64()), pa.field("server_batch_metric", pa.string()),
    pa.field("server_queue", pa.float64()), pa.field("server_queue_metric", pa.string()),
    pa.field("server_kv_usage", pa.float64()), pa.field("server_preemptions", pa.float64()),
    pa.field("server_prompt_tokens", pa.float64()),
    pa.field("server_output_tokens", pa.float64()),
    pa.field("energy_j", pa.float64()), pa.field("energy_source", pa.string()),
    pa.field("telemetry_note", pa.string()), pa.field("placement", pa.string()),
]

NO_TELEMETRY = "no telemetry recorded (a rep measured before telemetry)"

# per column, the metric of each server, in the order tried
BATCH = ["vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"]
QUEUE = [tm.LLAMACPP_DEFERRED, "vllm:num_requests_waiting", "sglang:num_queue_reqs",
         "tgi_queue_size"]
KV_USAGE = ["vllm:kv_cache_usage_perc", "sglang:token_usage"]
PREEMPTIONS = ["vllm:num_preemptions_total"]
PROMPT_TOKENS = [tm.LLAMACPP_PROMPT, "vllm:prompt_tokens_total", "sglang:prompt_tokens_total",
                 "tgi_request_input_length_sum"]
OUTPUT_TOKENS = [tm.LLAMACPP_PREDICTED, "vllm:generation_tokens_total",
                 "sglang:generation_tokens_total", "tgi_request_generated_tokens_sum"]
DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since the driver loaded
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
# (metric, kind, joules per unit)
ENERGY = [(DCGM_ENERGY, "counter", 1e-3), (DCGM_POWER, "power", 1.0),
          (tm.NVML_ENERGY, "counter", 1.0), (tm.RAPL_ENERGY, "counter", 1.0)]


def sample_rows(raw: dict) -> list[dict]:
    """One row per sample of every scrape of a rep; a scrape that gave none (missing, or an
    empty answer) is one row with no metric and its error. [] for a rep without telemetry."""
    telemetry = raw.get("telemetry")
    if not telemetry:
        return []
    roles = {s["name"]: s.get("role") for s in telemetry.get("sources", [])}
    rows = []
    for scrape in telemetry.get("scrapes", []):
        head = {"target": raw["target"], "run": raw["run"], "rep": raw["rep"],
                "arm": scrape.get("arm"), "position": scrape.get("position"),
                "phase": scrape.get("phase"), "t_s": scrape["t_s"], "source": scrape["source"],
                "role": roles.get(scrape["source"])}
        samples = scrape.get("samples")
        if not samples:
            error = (scrape.get("error") or "missing") if samples is None else None
            rows.append({**head, "metric": None, "labels": None, "value": None, "error": error})
            continue
        for metric, labels, value in samples:
            rows.append({**head, "metric": metric,
                         "labels": json.dumps(dict(labels or {}), sort_keys=True),
                         "value": None if value is None else float(value), "error": None})
    return rows


def window(samples: pd.DataFrame, t0: float, t1: float,
           interval_s: float | None = None) -> dict:
    """``TELEMETRY_COLUMNS`` for the window [t0, t1] of one rep, from that rep's rows of
    ``SERVER_METRICS_SCHEMA`` (every source). ``interval_s``: the scrape interval, by default
    the median spacing of the rep's "during" scrapes."""
    out = dict.fromkeys(TELEMETRY_COLUMNS)
    if samples is None or samples.empty:
        out["telemetry_note"] = NO_TELEMETRY
        return out
    interval = interval_s or _interval(samples)
    answered = samples["error"].isna()
    exposed = samples[answered].groupby("source", sort=False)["metric"].unique()
    exposed = {source: {m for m in metrics if isinstance(m, str)}
               for source, metrics in exposed.items()}
    t = samples["t_s"]
    near = samples[(t >= t0 - 2 * interval) & (t <= t1 + 2 * interval)]
    notes, views = [], {}
    for source in samples["source"].unique():
        if source not in exposed:
            errors = samples.loc[samples["source"] == source, "error"]
            notes.append(f"no scrape answered: {_commonest(errors)} from {source}")
            views[source] = None
            continue
        view, note = _source_view(near[near["source"] == source], source, t0, t1, interval)
        views[source] = view
        if note:
            notes.append(note)

    def find(candidates):
        """The first candidate metric a source of the rep exposes, with that source's view."""
        for metric in candidates:
            for source, metrics in exposed.items():
                if metric in metrics or metric + "_total" in metrics:
                    return metric, source, views[source]
        return None, None, None

    # the batch: llama.cpp's lifetime ratio, or a running-requests gauge
    m, _, view = find([tm.LLAMACPP_BUSY_PER_DECODE])
    if m and find([tm.LLAMACPP_DECODES])[0]:
        out["server_batch_metric"] = m
        if view is not None:
            out["server_batch"] = tm.batch_per_decode(view.samples_at(view.tb),
                                                      view.samples_at(view.ta))
    else:
        m, _, view = find(BATCH)
        out["server_batch_metric"] = m
        out["server_batch"] = view.gauge(m, "sum") if view is not None else None
    m, _, view = find(QUEUE)
    out["server_queue_metric"] = m
    out["server_queue"] = view.gauge(m, "sum") if view is not None else None
    m, _, view = find(KV_USAGE)
    out["server_kv_usage"] = view.gauge(m, "mean") if view is not None else None
    for column, candidates in (("server_preemptions", PREEMPTIONS),
                               ("server_prompt_tokens", PROMPT_TOKENS),
                               ("server_output_tokens", OUTPUT_TOKENS)):
        m, _, view = find(candidates)
        out[column] = view.delta(m) if view is not None else None
    for metric, kind, joules in ENERGY:
        m, source, view = find([metric])
        if m is None:
            continue
        out["energy_source"] = f"{metric} from {source}"
        if view is not None:
            found = view.energy(m) if kind == "counter" else view.power_integral(m)
            out["energy_j"] = None if found is None else found * joules
        break
    out["telemetry_note"] = "; ".join(notes) or None
    return out


def _interval(samples: pd.DataFrame) -> float:
    """The median spacing of a rep's "during" scrapes (of each source); without any, of all its
    scrapes (a rep of cells shorter than the interval); 0 for a single scrape."""
    for rows in (samples[samples["phase"] == "during"], samples):
        gaps = [np.diff(np.unique(t)) for _, t in rows.groupby("source")["t_s"]]
        gaps = np.concatenate(gaps) if gaps else np.array([])
        if len(gaps):
            return float(np.median(gaps))
    return 0.0


def _commonest(errors: pd.Series) -> str:
    counts = Counter(errors.dropna())
    return counts.most_common(1)[0][0] if counts else "no answer"


def _source_view(rows: pd.DataFrame, source: str, t0: float, t1: float, interval: float):
    """The view of one source over the window, from its rows near the window (None when its
    scrapes do not bracket it), and a note when something it would have said is missing."""
    scrapes = rows.drop_duplicates("t_s").sort_values("t_s")
    ok_t = scrapes.loc[scrapes["error"].isna(), "t_s"].to_numpy()
    failed = scrapes[scrapes["error"].notna()]
    half = interval / 2
    tb = _pick(ok_t[(ok_t <= t0) & (ok_t >= t0 - interval)], last=True)
    if tb is None:
        tb = _pick(ok_t[(ok_t > t0) & (ok_t <= t0 + half)], last=False)
    ta = _pick(ok_t[(ok_t >= t1) & (ok_t <= t1 + interval)], last=False)
    if ta is None:
        ta = _pick(ok_t[(ok_t < t1) & (ok_t >= t1 - half)], last=True)
    near = failed[(failed["t_s"] >= t0 - interval) & (failed["t_s"] <= t1 + interval)]
    why = _commonest(near["error"])
    if tb is None or ta is None or ta <= tb:
        edge = "start" if tb is None else "end" if ta is None else "start and end"
        return None, f"no scrape of {source} answered at the window's {edge}: {why}"
    view = _View(rows[(rows["t_s"] >= tb) & (rows["t_s"] <= ta) & rows["error"].isna()],
                 tb, ta, t0, t1)
    inside = scrapes[(scrapes["t_s"] > tb) & (scrapes["t_s"] < ta)]
    missed = int(inside["error"].notna().sum())
    note = (f"{missed} of {len(inside)} scrapes of {source} in the window missing: "
            f"{_commonest(inside['error'])}") if missed else None
    return view, note


def _pick(times: np.ndarray, last: bool) -> float | None:
    if len(times) == 0:
        return None
    return float(times.max() if last else times.min())


class _View:
    """One source's successful scrapes from the bracketing one before the window to the one
    after it."""

    def __init__(self, rows: pd.DataFrame, tb: float, ta: float, t0: float, t1: float):
        self.rows, self.tb, self.ta, self.t0, self.t1 = rows, tb, ta, t0, t1

    def _of(self, metric: str) -> pd.DataFrame:
        """Time by label set, for ``metric`` (or the parser's ``<metric>_total`` spelling)."""
        sel = self.rows[self.rows["metric"].isin([metric, metric + "_total"])]
        return sel.groupby(["t_s", "labels"])["value"].last().unstack("labels").sort_index()

    def samples_at(self, t: float) -> list[tm.Sample]:
        at = self.rows[self.rows["t_s"] == t]
        return [tm.Sample(m, (), v) for m, v in zip(at["metric"], at["value"], strict=True)]

    def gauge(self, metric: str, how: str) -> float | None:
        table = self._of(metric)
        if table.empty:
            return None
        per_scrape = table.sum(axis=1) if how == "sum" else table.mean(axis=1)
        return _average(per_scrape.index.to_numpy(), per_scrape.to_numpy(), self.t0, self.t1)

    def delta(self, metric: str) -> float | None:
        table = self._of(metric)
        if self.tb not in table.index or self.ta not in table.index:
            return None
        v0, v1 = table.loc[self.tb], table.loc[self.ta]
        if v0.isna().any() or v1.isna().any() or (v1 < v0).any():
            return None
        return float((v1 - v0).sum())

    def energy(self, metric: str) -> float | None:
        """A counter's increase over [t0, t1], each label set interpolated at the edges and
        unwrapped when RAPL's range says it wrapped; None on a reset or a gap at an edge."""
        table = self._of(metric)
        if self.tb not in table.index or self.ta not in table.index:
            return None
        ranges = self._of(tm.RAPL_MAX).median() if metric == tm.RAPL_ENERGY else {}
        total = 0.0
        for labels in table.columns:
            if metric == tm.RAPL_ENERGY and not json.loads(labels).get(
                    "zone", "").startswith("package"):
                continue  # psys overlaps the packages
            series = table[labels].dropna()
            values = _unwrapped(series.to_numpy(), ranges.get(labels))
            if values is None:
                return None
            t = series.index.to_numpy()
            total += float(np.interp(self.t1, t, values) - np.interp(self.t0, t, values))
        return total

    def power_integral(self, metric: str) -> float | None:
        """A power gauge (summed over its label sets) integrated over [t0, t1]."""
        mean = self.gauge(metric, "sum")
        return None if mean is None else mean * (self.t1 - self.t0)


def _unwrapped(values: np.ndarray, max_range: float | None) -> np.ndarray | None:
    """A counter's values with each wrap undone: a step back by less than ``max_range`` is one
    wrap (RAPL's counters restart from zero at their range). None on any other step back."""
    steps = np.diff(values)
    back = steps < 0
    if not back.any():
        return values
    if max_range is None or np.isnan(max_range) or (-steps[back] >= max_range).any():
        return None
    return values + np.concatenate([[0.0], np.cumsum(np.where(back, max_range, 0.0))])


def _average(t: np.ndarray, v: np.ndarray, t0: float, t1: float) -> float | None:
    """The time-average over [t0, t1] of the line through the points (t, v), held flat
    beyond the first and last."""
    if len(t) == 0:
        return None
    if t1 <= t0:
        return float(np.interp(t0, t, v))
    grid = np.concatenate([[t0], t[(t > t0) & (t < t1)], [t1]])
    return float(np.trapezoid(np.interp(grid, t, v), grid) / (t1 - t0))


def cell_evidence(raw: dict, samples: pd.DataFrame, t0: float, t1: float) -> dict:
    """``TELEMETRY_COLUMNS`` of one cell of ``raw`` spanning [t0, t1] on the rep's clock, from
    ``samples`` (the rep's rows, sample_rows): a rep measured before telemetry says so, and a
    source the rep did not scrape (a server without /metrics, an unreadable energy counter)
    adds why to the note."""
    telemetry = raw.get("telemetry")
    if not telemetry:
        return dict.fromkeys(TELEMETRY_COLUMNS) | {"telemetry_note": NO_TELEMETRY}
    out = window(samples, t0, t1, telemetry.get("interval_s"))
    unscraped = [s["note"] for s in telemetry.get("sources", [])
                 if not s.get("scraped") and s.get("note") and s.get("role") == "server"]
    if unscraped:
        note = out["telemetry_note"]
        out["telemetry_note"] = "; ".join(
            unscraped + ([note] if note and note != NO_TELEMETRY else []))
    return out


def rep_evidence(raw: dict):
    """A rep's server_metrics rows, and a function of a cell (arm, position, start on the
    rep's clock, wall seconds) giving its CELL_FIELDS: cell_evidence over the cell, and where
    the server held the model around it (the raw cell's placement, as JSON)."""
    rows = sample_rows(raw)
    frame = pd.DataFrame(rows, columns=SERVER_METRICS_SCHEMA.names)
    placed = {(c["arm"], c["position"]): c.get("placement") for c in raw["cells"]}

    def evidence(arm: int, position: int, t_start_s: float, wall_s: float) -> dict:
        placement = placed.get((arm, position))
        return cell_evidence(raw, frame, t_start_s, t_start_s + wall_s) | {
            "placement": None if placement is None else json.dumps(placement, sort_keys=True)}

    return rows, evidence
