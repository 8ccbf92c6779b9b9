"""Details of the versions check: none. One version is a line under the per-arm table; mixed
versions are a warning before the headline, naming the runs and reps of each."""

from __future__ import annotations

TRAP = "versions"


def render(verdict: dict, ctx) -> list:
    return []
