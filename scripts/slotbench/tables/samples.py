"""The background samplers' rows: the machine's thermal state and what the rest of the host was
doing, sampled through every rep (slotbench.measure.sampler), as consolidation tables them."""

from __future__ import annotations

import pyarrow as pa

# A sampler's row: which rep, when (seconds into the rep and wall clock), from which source.
SAMPLE_KEY = [
    pa.field("target", pa.string()), pa.field("run", pa.string()), pa.field("rep", pa.int64()),
    pa.field("t_s", pa.float64()), pa.field("t_unix", pa.float64()),
    pa.field("source", pa.string()),
]

THERMAL_SCHEMA = pa.schema([
    *SAMPLE_KEY, pa.field("sensor", pa.string()), pa.field("temp_c", pa.float64()),
    pa.field("freq_mhz", pa.float64()), pa.field("throttled", pa.bool_()),
    pa.field("pressure", pa.string()), pa.field("detail", pa.string()),
])

HOST_SCHEMA = pa.schema(
    [
        *SAMPLE_KEY, pa.field("cpus", pa.int64()),
        pa.field("busy_cores", pa.float64()), pa.field("steal_cores", pa.float64()),
        pa.field("iowait_cores", pa.float64()), pa.field("load1", pa.float64()),
        pa.field("server_cores", pa.float64()), pa.field("harness_cores", pa.float64()),
        pa.field("other_cores", pa.float64()), pa.field("top", pa.string()),
        pa.field("detail", pa.string()),
    ]
)


def samples_of(raw: dict, kind: str) -> list[dict]:
    """A raw file's ``kind`` (thermal or host) samples as rows, timed on the rep's clock."""
    return [{**row, "target": raw["target"], "run": raw["run"], "rep": raw["rep"],
             "t_s": row["t_unix"] - raw["origin_unix"]}
            for row in (raw.get(kind) or {}).get("rows", [])]


SAMPLE_ORDER = ["target", "run", "rep", "t_s"]
