"""Connect to a target: start the managed server, or reach the external one."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .backends import Backend, make_backend
from .entry import Interrupted
from .ollama_server import ManagedOllama
from .server import ManagedServer

# backend → the class that starts and stops a managed server of that kind
MANAGED = {"llamacpp": ManagedServer, "ollama": ManagedOllama}


@dataclass
class Connection:
    target: dict
    backend: Backend
    server: ManagedServer | None  # None for an external server

    def describe(self) -> dict:
        """Server facts for the fingerprint and raw files."""
        info = {"backend": self.target["backend"], "managed": self.target["managed"]}
        if self.server is not None:
            info |= self.server.describe()
        else:
            info["url"] = self.target["url"]
        return info | self.backend.describe()


def _sigterm_as_exit(signum, frame):  # so that `finally` stops the server on SIGTERM too
    raise Interrupted("terminated")


@contextmanager
def connect(target: dict, log_path: str | Path, timeout_s: float) -> Iterator[Connection]:
    previous = signal.signal(signal.SIGTERM, _sigterm_as_exit)
    try:
        if target["managed"]:
            with MANAGED[target["backend"]](target["server"], log_path) as server:
                yield Connection(target, make_backend(target, server.url, timeout_s), server)
        else:
            yield Connection(target, make_backend(target, target["url"], timeout_s), None)
    finally:
        signal.signal(signal.SIGTERM, previous)
