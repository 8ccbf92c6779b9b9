"""Number and arm formatting: arm names, signed numbers, ratios, percentages, CIs, bytes."""

from __future__ import annotations

import math

import pandas as pd


SERIAL_ARM = 1
WAYS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 16: "sixteen"}
MINUS = "\u2212"
DASH = "\u2014"


def arm_name(arm) -> str:
    """serial-1 / parallel-N: the arm names used in every table and figure."""
    arm = int(arm)
    return f"serial-{arm}" if arm == SERIAL_ARM else f"parallel-{arm}"


def way(arm) -> str:
    arm = int(arm)
    return f"{WAYS.get(arm, str(arm))}-way"


# --------------------------------------------------------------------------------------------
# Number formatting
# --------------------------------------------------------------------------------------------


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or pd.isna(x)


def _signed(text: str) -> str:
    return text.replace("-", MINUS)


def fmt_num(x, digits: int = 1) -> str:
    return "n/a" if _missing(x) else _signed(f"{float(x):.{digits}f}")


def fmt_times(x, digits: int = 2) -> str:
    return "n/a" if _missing(x) else f"{float(x):.{digits}f}×"


def fmt_pct(x, digits: int = 0) -> str:
    return "n/a" if _missing(x) else _signed(f"{float(x) * 100:.{digits}f}%")


def fmt_change(ratio, digits: int = 0) -> str:
    """A ratio as a signed percent change: 0.35 -> −65%, 1.09 -> +9%."""
    return "n/a" if _missing(ratio) else _signed(f"{(float(ratio) - 1) * 100:+.{digits}f}%")


def with_ci(row, col: str, fmt) -> str:
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if _missing(lo) or _missing(hi):
        return fmt(row.get(col))
    return f"{fmt(row.get(col))} [{fmt(lo)}, {fmt(hi)}]"


def _split(value) -> list[str]:
    if _missing(value) or value == "":
        return []
    return [v for v in str(value).split(";") if v]


def _union(values) -> list[str]:
    return sorted({item for v in values for item in _split(v)})


def fmt_bytes(x) -> str:
    if _missing(x):
        return "n/a"
    x = float(x)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= size:
            return f"{x / size:.1f} {unit}"
    return f"{x:.0f} B"
