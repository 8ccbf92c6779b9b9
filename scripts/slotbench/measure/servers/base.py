"""A managed server's life: started on a free loopback port, health-checked, its log appended
to the rule's log file, and always stopped by its own PID, even when a rep fails. On Linux it is
also told to die with its parent, so a killed job leaves no orphan. llama-server (llamacpp) and
``ollama serve`` (ollama) say what to start.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests


class ServerError(RuntimeError):
    """The managed server could not be started or stopped; the message says what to do."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ManagedServer:
    """Context manager: start, health-check, yield the base URL, always stop. A subclass says
    what to start (_prepare) and how to describe it (describe)."""

    def __init__(self, settings: dict, log_path: str | Path):
        self.settings = settings
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.command: list[str] = []
        self.model_path: Path | None = None
        self.model_sha256: str | None = None
        self._log_offset = 0  # where this start's lines begin in an appended log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ManagedServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


    NAME = "server"  # what the errors call it
    HEALTH_PATH = "/health"  # answers 200 once the server serves

    def _prepare(self) -> tuple[list[str], dict | None, str]:
        """Command, environment (None = inherit) and the banner line for the log."""
        raise NotImplementedError

    def describe(self) -> dict:
        """What was started, for the fingerprint (without the machine's paths)."""
        raise NotImplementedError

    def start(self) -> None:
        self.command, env, banner = self._prepare()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = open(self.log_path, "ab")
        self._log.write((banner + "\n").encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_die_with_parent,
        )
        try:
            self._wait_healthy(self.settings["startup_timeout_s"])
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"{self.NAME} exited with code {self.proc.returncode} while starting; "
                    f"see its log {self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + self.HEALTH_PATH, timeout=2).status_code == 200:
                    return
            time.sleep(0.05)  # the model loads in ~1.5 s: a coarse poll costs up to its period
        raise ServerError(
            f"{self.NAME} did not answer {self.HEALTH_PATH} within {timeout_s:.0f} s; "
            f"see its log {self.log_path}"
        )


    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def server_pids(self) -> set[int]:
        """The server's process (its descendants are the server's too)."""
        return {self.proc.pid} if self.proc is not None else set()

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL if it lingers; safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()
