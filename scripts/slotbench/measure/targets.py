"""Connect to a target: start the managed server, or reach the external one."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from slotbench.core.entry import Interrupted
from slotbench.measure.backends import Backend, make_backend
from slotbench.measure.servers.base import ManagedServer
from slotbench.measure.servers.supervisor import RunServer, managed_class, owner, run_server


@dataclass
class Connection:
    target: dict
    backend: Backend
    server: ManagedServer | RunServer | None  # None for an external server

    def describe(self) -> dict:
        """Server facts for the fingerprint and raw files."""
        info = {"backend": self.target["backend"], "managed": self.target["managed"]}
        # the cores a managed server had (it inherits this process's): the split. An external
        # server's cores are its own; this process's are the client host's.
        if self.target["managed"] and hasattr(os, "sched_getaffinity"):
            info["cpus"] = sorted(os.sched_getaffinity(0))
        if self.server is not None:
            info |= self.server.describe()
        else:
            info["url"] = self.target["url"]
        return info | self.backend.describe()

    def reps_before(self) -> int:
        """Reps the run's server measured before this job (0: a server of its own, or external)."""
        return self.server.reps_before if isinstance(self.server, RunServer) else 0

    def rep_measured(self) -> None:
        """Tell the run's server a rep measured on it (the next rep's warm-up is lighter)."""
        if isinstance(self.server, RunServer):
            self.server.measured_rep = True


class ConnectError(RuntimeError):
    """The target cannot be reached as configured."""


def _sigterm_as_exit(signum, frame):  # so that `finally` stops the server on SIGTERM too
    raise Interrupted("terminated")


@contextmanager
def connect(target: dict, log_path: str | Path, timeout_s: float, run: str | None = None,
            results: str | Path | None = None) -> Iterator[Connection]:
    """The target's backend, and its managed server if it has one: the run's server
    (slotbench.measure.servers.supervisor) when a job of Snakemake names its ``run`` and its
    experiment's folder ``results``, else one of its own."""
    previous = signal.signal(signal.SIGTERM, _sigterm_as_exit)
    cpus = (target.get("server") or {}).get("cpus") if target["managed"] else None
    if cpus:  # this process and the server it starts run on the target's CPUs alone
        try:
            os.sched_setaffinity(0, cpus)
        except (OSError, AttributeError) as exc:
            raise ConnectError(f"target {target['name']}: cannot run on CPUs {cpus} "
                               f"(server.cpus): {exc}") from exc
    try:
        holder = owner() if run is not None and results is not None else None
        if target["managed"] and holder is not None:
            with run_server(target, run, log_path, holder, results) as server:
                yield Connection(target, make_backend(target, server.url, timeout_s), server)
        elif target["managed"]:
            with managed_class(target["backend"])(target["server"], log_path) as server:
                yield Connection(target, make_backend(target, server.url, timeout_s), server)
        else:
            yield Connection(target, make_backend(target, target["url"], timeout_s), None)
    finally:
        signal.signal(signal.SIGTERM, previous)
