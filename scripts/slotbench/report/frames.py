"""Small data helpers shared by the report's sections: truthiness of recorded flags, a
target's rows, and the measured (non-control) requests."""

from __future__ import annotations

import pandas as pd

from slotbench.report.format import _missing


def _truthy(x) -> bool:
    if isinstance(x, str):
        return x.strip().lower() in ("true", "1", "yes")
    return not _missing(x) and bool(x)


def _rows_of(frame: pd.DataFrame | None, target) -> pd.DataFrame:
    if frame is None or frame.empty or "target" not in frame:
        return pd.DataFrame()
    return frame[frame["target"].astype(str) == str(target)]


def _measured_requests(requests: pd.DataFrame | None, target) -> pd.DataFrame:
    """The target's requests of the measured arms (the control arm repeats prompts on purpose)."""
    rows = _rows_of(requests, target)
    if rows.empty:
        return rows
    if "control" in rows:
        rows = rows[~rows["control"].map(_truthy)]
    return rows
