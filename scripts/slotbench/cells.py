"""The vocabulary every stage shares: the serial arm, arm names and cell labels.

A cell is one (target, run, rep, arm); its label ``target/run/repN/armM`` is the one spelling
used in reports, errors and provenance, so any number can be traced back to raw cells.
"""

from __future__ import annotations

import pandas as pd

CELL_KEYS = ["target", "run", "rep", "arm"]
# The queueing control every within-rep ratio divides by (method rules 1 and 4).
SERIAL_ARM = 1


def arm_name(arm) -> str:
    """serial-1 / parallel-N: the arm names used in every table and figure."""
    arm = int(arm)
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
