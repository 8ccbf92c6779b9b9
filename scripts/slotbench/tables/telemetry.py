"""Placeholder of the telemetry table (replaced by the derivation): the schema and an empty
window, so the pipeline runs while the derivation is written."""

from __future__ import annotations

import json

import pyarrow as pa

SERVER_METRICS_SCHEMA = pa.schema([
    pa.field("target", pa.string()), pa.field("run", pa.string()), pa.field("rep", pa.int64()),
    pa.field("arm", pa.int64()), pa.field("position", pa.int64()),
    pa.field("phase", pa.string()), pa.field("t_s", pa.float64()),
    pa.field("source", pa.string()), pa.field("role", pa.string()),
    pa.field("metric", pa.string()), pa.field("labels", pa.string()),
    pa.field("value", pa.float64()), pa.field("error", pa.string()),
])
TELEMETRY_COLUMNS = ["server_batch", "server_batch_metric", "server_queue",
                     "server_queue_metric", "server_kv_usage", "server_preemptions",
                     "server_prompt_tokens", "server_output_tokens", "energy_j",
                     "energy_source", "telemetry_note"]


def sample_rows(raw: dict) -> list[dict]:
    tel = raw.get("telemetry") or {}
    roles = {s["name"]: s["role"] for s in tel.get("sources", [])}
    rows = []
    for sc in tel.get("scrapes", []):
        base = {"target": raw["target"], "run": raw["run"], "rep": raw["rep"],
                "arm": sc.get("arm"), "position": sc.get("position"), "phase": sc.get("phase"),
                "t_s": sc["t_s"], "source": sc["source"], "role": roles.get(sc["source"]),
                "error": sc.get("error")}
        if sc.get("samples") is None:
            rows.append(base | {"metric": None, "labels": None, "value": None})
        else:
            rows += [base | {"metric": m, "labels": json.dumps(lab, sort_keys=True), "value": v}
                     for m, lab, v in sc["samples"]]
    return rows


def window(samples, t0: float, t1: float) -> dict:
    return dict.fromkeys(TELEMETRY_COLUMNS)


def cell_evidence(raw: dict, samples, t0: float, t1: float) -> dict:
    if "telemetry" not in raw:
        return dict.fromkeys(TELEMETRY_COLUMNS) | {
            "telemetry_note": "the rep was measured before slotbench scraped the server's "
                              "telemetry"}
    return window(samples, t0, t1)
