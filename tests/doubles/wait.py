"""Waiting with a deadline: the one helper tests use to wait for a port, a file, a process or
any other condition that will hold in a moment."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something true, and return
    that. After ``timeout`` seconds fail (AssertionError) with a message naming ``what`` it
    waited for. An assertion inside ``predicate`` (say, that the process being watched is still
    alive) fails at once, with its own message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
