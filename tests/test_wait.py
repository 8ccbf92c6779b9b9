"""The one wait helper (tests/doubles/wait.py): returns what it waited for, fails naming it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from doubles.wait import wait_for
from e2e_helpers import processes_mentioning, wait_for_no_processes


def test_wait_for_returns_the_first_true_value():
    calls = iter([None, [], {"id": 7}])
    assert wait_for(lambda: next(calls), 1, "a row", interval=0.001) == {"id": 7}


def test_wait_for_fails_naming_what_it_waited_for_after_its_timeout():
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.2 s waiting for the pacer's row"):
        wait_for(lambda: False, 0.2, "the pacer's row", interval=0.01)
    assert 0.2 <= time.monotonic() - t0 < 1


def test_an_assertion_in_the_predicate_fails_at_once():
    def alive():
        raise AssertionError("the process exited")

    t0 = time.monotonic()
    with pytest.raises(AssertionError, match="the process exited"):
        wait_for(alive, 30, "anything")
    assert time.monotonic() - t0 < 1


def test_no_processes_left_is_waited_for_and_leftovers_are_named(tmp_path):
    marker = str(tmp_path / "marker")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        # the child names the marker once it has exec'd; until then there is nothing to wait for
        wait_for(lambda: processes_mentioning(marker), 10, "the child to start")
        (left,) = wait_for_no_processes(marker, timeout=0.3)
        assert left[0] == proc.pid and marker in left[1]
    finally:
        proc.kill()
        proc.wait()
    assert wait_for_no_processes(marker, timeout=5) == []
