"""The measuring lock: two experiments never measure on one server at the same time, even when
two Snakemakes run at once in one working directory.

Within one Snakemake, every measuring job (fingerprint, plan, rep) holds its endpoint's
resources (resources.endpoint_resources: each CPU a managed server may run on; an external
server's host and port, and on this machine every CPU too), and Snakemake never runs two jobs
that hold the same one. A second Snakemake, measuring another experiment, does not see them. So
a measuring job also takes, for each resource it holds, an exclusive lock (``fcntl.flock``) on
``results/.measuring/<resource>.lock``, in sorted order (two jobs never wait for each other in a
circle), held while it measures; the system releases it when the job ends, however it ends. The
holder writes who it is into the file (experiment, target, run, rep), and a job that has to wait
says once whom it waits for. Jobs of one Snakemake never wait here: their resources already
keep them apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

from slotbench.core.experiments import RESULTS
from slotbench.workflow.jobs import machine_cpus
from slotbench.workflow.resources import endpoint_resources

LOCK_DIR = Path(RESULTS) / ".measuring"


def keys(target: dict, cpus: list[int] | None = None) -> list[str]:
    """The locks a measuring job of ``target`` takes, in the order it takes them: one per
    endpoint resource it holds (``cpus``: this machine's, by default)."""
    return sorted(endpoint_resources(target, cpus if cpus is not None else machine_cpus()))


def describe(holder: str) -> str:
    """Who a lock file says holds it, in words."""
    try:
        who = json.loads(holder)
    except ValueError:
        who = None
    if not isinstance(who, dict):
        return "another measuring job"

    def said(field: str) -> str:  # what the holder wrote, or "?"
        return str(who[field]) if who.get(field) is not None else "?"

    job = f"rep {said('rep')}" if who.get("rep") is not None else said("job")
    return (f"experiment {said('experiment')}, target {said('target')}, run {said('run')}, "
            f"{job} (PID {said('pid')} on {said('host')})")


@contextmanager
def held(target: dict, job: dict, log: TextIO = sys.stderr, lock_dir: Path = LOCK_DIR,
         cpus: list[int] | None = None) -> Iterator[list[str]]:
    """Hold the measuring locks of ``target`` while the block runs; ``job`` says who measures
    (experiment, target, run, and rep or job). Waits, saying so once per holder on ``log``,
    while another job holds one. Yields the locks' names."""
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    me = json.dumps(dict(job) | {"pid": os.getpid(), "host": socket.gethostname()},
                    sort_keys=True)
    names = keys(target, cpus)
    opened, locked, said = [], [], set()
    try:
        for name in names:
            path = lock_dir / f"{name}.lock"
            fh = open(path, "a+", encoding="utf-8")
            opened.append(fh)
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip()
                if holder not in said:
                    said.add(holder)
                    print(f"slotbench: waiting to measure target {job.get('target')}: "
                          f"{describe(holder)} is measuring on the same server ({path})",
                          file=log, flush=True)
                fcntl.flock(fh, fcntl.LOCK_EX)
            locked.append(fh)
            fh.seek(0)
            fh.truncate()
            fh.write(me + "\n")
            fh.flush()
        yield names
    finally:
        for fh in locked:  # no longer anyone's: emptied while still held
            with contextlib.suppress(OSError):
                fh.truncate(0)
        for fh in reversed(opened):
            fh.close()
