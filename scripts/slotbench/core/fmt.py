"""Number formatting shared by the checks' sentences and the report: signed numbers, ratios,
percentages, intervals, bytes and counted nouns ("3 cells"). Pure text, no statistics."""

from __future__ import annotations

import math


WAYS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 16: "sixteen"}
MINUS = "\u2212"
DASH = "\u2014"


def way(arm) -> str:
    arm = int(arm)
    return f"{WAYS.get(arm, str(arm))}-way"


# --------------------------------------------------------------------------------------------
# Number formatting
# --------------------------------------------------------------------------------------------


def missing(x) -> bool:
    if x is None:
        return True
    if isinstance(x, float):
        return math.isnan(x)
    if isinstance(x, (str, int)):  # bool is an int
        return False
    # pandas' and numpy's own missing values; imported here, not above, so that the rep job,
    # which formats only plain numbers, starts without pandas (a third of a second a rep)
    import pandas as pd

    return pd.isna(x)


def signed(text: str) -> str:
    return text.replace("-", MINUS)


def fmt_num(x, digits: int = 1) -> str:
    return "n/a" if missing(x) else signed(f"{float(x):.{digits}f}")


def fmt_times(x, digits: int = 2) -> str:
    return "n/a" if missing(x) else f"{float(x):.{digits}f}×"


def fmt_pct(x, digits: int = 0) -> str:
    return "n/a" if missing(x) else signed(f"{float(x) * 100:.{digits}f}%")


def fmt_signed_pct(x) -> str:
    """A fraction as a signed percent: 0.12 -> +12%, -0.05 -> −5%."""
    return signed(f"{x:+.0%}")


def fmt_change(ratio, digits: int = 0) -> str:
    """A ratio as a signed percent change: 0.35 -> −65%, 1.09 -> +9%."""
    return "n/a" if missing(ratio) else signed(f"{(float(ratio) - 1) * 100:+.{digits}f}%")


def with_ci(row, col: str, fmt) -> str:
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if missing(lo) or missing(hi):
        return fmt(row.get(col))
    return f"{fmt(row.get(col))} [{fmt(lo)}, {fmt(hi)}]"


def split_list(value) -> list[str]:
    if missing(value) or value == "":
        return []
    return [v for v in str(value).split(";") if v]


def union(values) -> list[str]:
    return sorted({item for v in values for item in split_list(v)})


def fmt_bytes(x) -> str:
    if missing(x):
        return "n/a"
    x = float(x)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= size:
            return f"{x / size:.1f} {unit}"
    return f"{x:.0f} B"


def count(n: int, noun: str) -> str:
    """"1 cell", "3 cells"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fmt_duration(seconds) -> str:
    """A length of time in the unit that reads best: 45 s, 14.0 min, 26.3 h."""
    if missing(seconds):
        return "n/a"
    s = float(seconds)
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


def fmt_ms(seconds) -> str:
    """Seconds as milliseconds with one decimal: 0.0058 -> "5.8 ms"."""
    return "n/a" if missing(seconds) else f"{float(seconds) * 1000:.1f} ms"


def code_text(commit, dirty) -> str:
    """A pipeline code version: its commit and whether the work tree was dirty."""
    state = {True: "dirty", False: "clean"}.get(dirty, "dirty state unknown")
    return f"commit {commit if commit is not None else 'unknown'} ({state})"


def reps_text(pairs: list[tuple[str, int]]) -> str:
    """run1 reps 1–3, 5; run2 rep 2: which runs and reps, with consecutive reps as ranges."""
    by_run: dict[str, list[int]] = {}
    for run, rep in pairs:
        by_run.setdefault(str(run), []).append(int(rep))
    parts = []
    for run in sorted(by_run, key=lambda r: (len(r), r)):
        reps = sorted(set(by_run[run]))
        spans, start, prev = [], reps[0], reps[0]
        for cur in reps[1:] + [None]:
            if cur is not None and cur == prev + 1:
                prev = cur
                continue
            spans.append(str(start) if start == prev else f"{start}\u2013{prev}")
            start = prev = cur
        parts.append(f"{run} rep{'s' if len(reps) > 1 else ''} {', '.join(spans)}")
    return "; ".join(parts)


def fmt_int(x) -> str:
    return "n/a" if missing(x) else str(int(x))
