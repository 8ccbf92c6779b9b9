"""The vocabulary every stage shares: the serial arm, arm names and cell labels.

A cell is one (target, run, rep, arm); its label ``target/run/repN/armM`` is the one spelling
used in reports, errors and provenance, so any number can be traced back to raw cells.
"""

from __future__ import annotations

import pandas as pd

CELL_KEYS = ["target", "run", "rep", "arm"]
# The queueing control every within-rep ratio divides by (method rules 1 and 4).
SERIAL_ARM = 1


# An arm is a concurrency level (closed loop: N in flight) or an arrival rate (open loop: a rate
# arm). In every table a rate arm's number is its rate in thousandths of a request per second,
# negated, so it can never be taken for a concurrency: 0.5 requests/s is arm -500.
RATE_SCALE = 1000


def arm_id(spec) -> int:
    """The arm's number in the tables: N for a concurrency, -round(rate × 1000) for a rate."""
    if isinstance(spec, dict):
        return -int(round(float(spec["rate"]) * RATE_SCALE))
    return int(spec)


def is_rate_arm(arm) -> bool:
    return int(arm) < 0


def arm_rate(arm) -> float:
    """A rate arm's offered rate in requests/s."""
    return -int(arm) / RATE_SCALE


def arm_order(arm) -> tuple:
    """Sort key: the concurrency levels in order, then the rate arms by rate."""
    return (is_rate_arm(arm), abs(int(arm)))


def arm_name(arm) -> str:
    """serial-1 / parallel-N / rate-R/s: the arm names used in every table and figure."""
    arm = int(arm)
    if arm < 0:
        return f"rate-{arm_rate(arm):g}/s"
    return f"serial-{arm}" if arm == SERIAL_ARM else f"parallel-{arm}"


def cell_label(target: str, run: str, rep: int, arm: int) -> str:
    """The one spelling of a cell used in reports, errors and provenance lists."""
    return f"{target}/{run}/rep{int(rep)}/arm{int(arm)}"


def parse_label(label: str) -> tuple[str, str, int, int]:
    """target, run, rep, arm of a cell label (target/run/repN/armM); ValueError otherwise."""
    target, run, rep, arm = str(label).rsplit("/", 3)
    return target, run, int(rep.removeprefix("rep")), int(arm.removeprefix("arm"))


def cell_labels(df: pd.DataFrame) -> list[str]:
    """Labels of the cells in a cells-shaped frame, in a stable sorted order."""
    if df is None or df.empty:
        return []
    keys = df[CELL_KEYS].drop_duplicates().sort_values(CELL_KEYS)
    return [cell_label(*row) for row in keys.itertuples(index=False, name=None)]


def label_series(df: pd.DataFrame) -> pd.Series:
    """One cell label per row of a frame with the cell keys, aligned with its index."""
    return pd.Series(
        [cell_label(*k) for k in df[CELL_KEYS].itertuples(index=False, name=None)],
        index=df.index, dtype=object,
    )  # fmt: skip


def raw_hashes(df: pd.DataFrame) -> list[str]:
    """Sorted unique raw-file SHA-256s behind a cells-shaped frame."""
    if df is None or df.empty or "raw_sha256" not in df:
        return []
    return sorted(df["raw_sha256"].dropna().unique().tolist())


def label_key(label: str) -> tuple:
    """Sort key of a cell label: rep and arm as numbers (rep2 before rep10)."""
    try:
        return parse_label(label)
    except ValueError:
        return (str(label), "", -1, -1)


# Two windows that meet within this are back to back, not overlapping: two client threads read
# one request's last chunk and the next one's first token a millisecond apart.
OVERLAP_TOLERANCE_S = 0.005


def most_at_once(starts: list, ends: list, tolerance_s: float = OVERLAP_TOLERANCE_S) -> int:
    """Most windows [start, end) sharing one instant, ``tolerance_s`` trimmed off each end.

    A window is counted at its own start even when it is shorter than the tolerance.
    """
    best = 0
    for s in starts:
        n = sum(1 for s2, e2 in zip(starts, ends) if s2 <= s and (e2 - tolerance_s > s or s2 == s))
        best = max(best, n)
    return best


def mean_at_once(starts: list, ends: list) -> float:
    """The time-weighted number of windows [start, end] open while at least one is: their summed
    length over the length of their union (NaN when none has a length)."""
    spans = sorted((s, e) for s, e in zip(starts, ends) if e > s)
    total = union = 0.0
    reach = None
    for s, e in spans:
        total += e - s
        if reach is None or s >= reach:
            union += e - s
            reach = e
        elif e > reach:
            union += e - reach
            reach = e
    return total / union if union > 0 else float("nan")
