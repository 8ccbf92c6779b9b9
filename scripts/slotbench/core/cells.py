"""The vocabulary every stage shares: the serial arm, arm names and cell labels.

A cell is one (target, run, rep, arm); its label ``target/run/repN/armM`` is the one spelling
used in reports, errors and provenance, so any number can be traced back to raw cells.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

CELL_KEYS = ["target", "run", "rep", "arm"]
REP_KEYS = CELL_KEYS[:3]  # one rep of one run of one target
# The queueing control every within-rep ratio divides by (docs/method.md#arms and
# docs/method.md#within-rep-ratios).
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


_REP_LABEL = re.compile(r"^([A-Za-z0-9_-]+)/([A-Za-z0-9_-]+)/rep(\d+)/(.+)$")


def rep_of(label: str) -> tuple[str, str, int] | None:
    """target, run, rep of any label that names a rep (target/run/repN/…), e.g. a control
    cell's, whatever follows the rep; None when the label names none."""
    match = _REP_LABEL.match(str(label))
    return None if match is None else (match.group(1), match.group(2), int(match.group(3)))


def label_fields(label: str) -> dict:
    """target, run, rep and arm of a cell's label, or of any label that names a rep (arm None,
    a control cell's say); all None when the label names neither."""
    try:
        target, run, rep, arm = parse_label(label)
    except ValueError:
        found = rep_of(label)
        if found is None:
            return {"target": None, "run": None, "rep": None, "arm": None}
        (target, run, rep), arm = found, None
    return {"target": target, "run": run, "rep": rep, "arm": arm}


def is_measured_label(label: str) -> bool:
    """Whether a label is a measured cell's (target/run/repN/armM), which requests.parquet keys."""
    try:
        parse_label(label)
    except ValueError:
        return False
    return True


def cell_labels(df: pd.DataFrame) -> list[str]:
    """Labels of the cells in a cells-shaped frame, in a stable sorted order."""
    if df is None or df.empty:
        return []
    keys = df[CELL_KEYS].drop_duplicates().sort_values(CELL_KEYS)
    return [cell_label(*row) for row in keys.itertuples(index=False, name=None)]


def label_series(df: pd.DataFrame) -> pd.Series:
    """One cell label per row of a frame with the cell keys, aligned with its index (each
    distinct cell's label made once, then spread over its rows)."""
    import numpy as np
    import pandas as pd  # here, not at the top: a rep job imports this module, never pandas

    keys = df[CELL_KEYS]
    codes, cells = pd.MultiIndex.from_frame(keys).factorize() if len(df) else ([], [])
    if len(df) and (codes < 0).any():  # a missing key: fail as cell_label does on the row
        return pd.Series([cell_label(*k) for k in keys.itertuples(index=False, name=None)],
                         index=df.index, dtype=object)
    labels = np.array([cell_label(*k) for k in cells] or [""], dtype=object)
    return pd.Series(labels[np.asarray(codes, dtype=np.intp)], index=df.index, dtype=object)


def raw_hashes(df: pd.DataFrame) -> list[str]:
    """Sorted unique raw-file SHA-256s behind a cells-shaped frame."""
    if df is None or df.empty or "raw_sha256" not in df:
        return []
    return sorted(df["raw_sha256"].dropna().unique().tolist())


@lru_cache(maxsize=1 << 20)  # labels are sorted again and again in a big run's report
def label_key(label: str) -> tuple:
    """Sort key of a cell label: rep and arm as numbers (rep2 before rep10)."""
    try:
        return parse_label(label)
    except ValueError:
        return (str(label), "", -1, -1)


# Two windows that meet within this are back to back, not overlapping: two client threads read
# one request's last chunk and the next one's first token a millisecond apart.
OVERLAP_TOLERANCE_S = 0.005


def most_at_once(starts, ends, tolerance_s: float = OVERLAP_TOLERANCE_S) -> int:
    """Most windows [start, end) sharing one instant, ``tolerance_s`` trimmed off each end.

    A window is counted at its own start even when it is shorter than the tolerance: at each
    start s, the windows j with s_j <= s and (e_j - tolerance > s or s_j == s). Counted with
    sorted searches: #{s_j <= s} - #{s_j < s and e_j <= s}, the latter #{e_j <= s} less the
    windows with e_j <= s <= s_j (only a window shorter than the tolerance can be one).
    """
    import numpy as np  # here, not at the top: the Snakefile and rep jobs import this module

    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float) - tolerance_s
    if not len(s):
        return 0
    if np.isnan(s).any() or np.isnan(e).any():
        return _most_at_once_pairwise(s, e)
    short = e <= s
    by_start, by_end = np.sort(s), np.sort(e)
    started = np.searchsorted(by_start, s, side="right")  # s_j <= s
    ended = np.searchsorted(by_end, s, side="right")  # e_j <= s
    # windows with e_j <= s <= s_j: among the short ones, e_j <= s less those with s_j < s
    straddle = (np.searchsorted(np.sort(e[short]), s, side="right")
                - np.searchsorted(np.sort(s[short]), s, side="left"))
    return int((started - (ended - straddle)).max())


def _most_at_once_pairwise(s, e, block: int = 1024) -> int:
    """most_at_once by comparing every start with every window (a missing time never counts)."""
    best = 0
    for i in range(0, len(s), block):
        at = s[i : i + block, None]
        best = max(best, int(((s <= at) & ((e > at) | (s == at))).sum(axis=1).max()))
    return best


def most_at_once_by_cell(labels, starts, ends, tolerance_s: float = OVERLAP_TOLERANCE_S) -> dict:
    """Cell label -> :func:`most_at_once` of that cell's windows, labels in sorted order; a row
    missing its start or end is skipped (a cell with none left counts 0)."""
    import numpy as np

    labels = np.asarray(labels, dtype=object)
    order = np.argsort(labels, kind="stable")
    labels = labels[order]
    starts, ends = (np.asarray(v, dtype=float)[order] for v in (starts, ends))
    bounds = [0, *(np.flatnonzero(labels[1:] != labels[:-1]) + 1), len(labels)]
    out = {}
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a == b:
            continue
        ok = ~(np.isnan(starts[a:b]) | np.isnan(ends[a:b]))
        out[labels[a]] = most_at_once(starts[a:b][ok], ends[a:b][ok], tolerance_s)
    return out


def mean_at_once(starts: list, ends: list, tolerance_s: float = 0.0) -> float:
    """The time-weighted number of windows [start, end] open while at least one is: their summed
    length over the length of their union (NaN when none has a length). With ``tolerance_s``
    trimmed off each end, as :func:`most_at_once` trims it, the mean never exceeds that most."""
    spans = sorted((s, e - tolerance_s) for s, e in zip(starts, ends) if e - tolerance_s > s)
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
