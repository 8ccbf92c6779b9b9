"""Shared helpers for naming cells, so every table and figure can point back to raw cells."""

from __future__ import annotations

import pandas as pd

CELL_KEYS = ["target", "run", "rep", "arm"]


def cell_label(target: str, run: str, rep: int, arm: int) -> str:
    """The one spelling of a cell used in reports, errors and provenance lists."""
    return f"{target}/{run}/rep{int(rep)}/arm{int(arm)}"


def cell_labels(df: pd.DataFrame) -> list[str]:
    """Labels of the cells in a cells-shaped frame, in a stable sorted order."""
    if df.empty:
        return []
    keys = df[CELL_KEYS].drop_duplicates().sort_values(CELL_KEYS)
    return [cell_label(*row) for row in keys.itertuples(index=False, name=None)]


def raw_hashes(df: pd.DataFrame) -> list[str]:
    """Sorted unique raw-file SHA-256s behind a cells-shaped frame."""
    if df.empty or "raw_sha256" not in df:
        return []
    return sorted(df["raw_sha256"].dropna().unique().tolist())


def position_medians(cells: pd.DataFrame) -> pd.DataFrame:
    """Median agg_tps of each arm at each position it occupied (runs pooled, per target).

    This is the raw material of the rotation-bias check and of the per-position figure, so it
    lives here rather than in either of them.
    """
    rows = []
    for (target, arm, position), grp in cells.groupby(["target", "arm", "position"], sort=True):
        rows.append(
            {
                "target": target,
                "arm": int(arm),
                "position": int(position),
                "median_agg_tps": float(grp["agg_tps"].median()),
                "n_cells": int(len(grp)),
                "cells": ";".join(cell_labels(grp)),
            }
        )
    cols = ["target", "arm", "position", "median_agg_tps", "n_cells", "cells"]
    return pd.DataFrame(rows, columns=cols)
