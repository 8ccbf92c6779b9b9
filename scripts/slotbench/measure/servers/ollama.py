"""A managed Ollama: the pipeline starts ``ollama serve`` on a free loopback port, always stops it.

The server's settings are Ollama's environment variables (OLLAMA_NUM_PARALLEL and friends), set
from the target's ``server`` block; they are not visible over HTTP, so the env we set is what the
fingerprint records. The server uses your default model store (``OLLAMA_MODELS`` if you set it,
else ``~/.ollama/models``), so the target's model must already be pulled there with
``ollama pull MODEL``; nothing is downloaded here. Start, health check, log and stop (by PID,
SIGTERM then SIGKILL, dying with its parent on Linux) work as for the embedded llama-server.
"""

from __future__ import annotations

import contextlib
import os
import shutil

from slotbench.measure.servers.base import ManagedServer, ServerError, free_port

NOT_INSTALLED = (
    "ollama is not installed (no `ollama` on PATH): install it from ollama.com, or point the "
    "target at a running server with managed: false and url"
)


def managed_env(settings: dict, host: str) -> dict:
    """The OLLAMA_* variables a managed server runs with: the target's settings over any inherited.

    Inherited OLLAMA_* variables (other than OLLAMA_MODELS, a local path) are kept and recorded,
    because they change what is measured (e.g. OLLAMA_MAX_QUEUE, OLLAMA_SCHED_SPREAD).
    """
    env = {k: v for k, v in sorted(os.environ.items())
           if k.startswith("OLLAMA_") and k != "OLLAMA_MODELS"}
    env |= {
        "OLLAMA_HOST": host,
        "OLLAMA_NUM_PARALLEL": str(settings["parallel"]),
        "OLLAMA_CONTEXT_LENGTH": str(settings["ctx_size"]),
    }
    if settings.get("flash_attention") is not None:
        env["OLLAMA_FLASH_ATTENTION"] = "1" if settings["flash_attention"] else "0"
    if settings.get("kv_cache_type"):
        env["OLLAMA_KV_CACHE_TYPE"] = str(settings["kv_cache_type"])
    if settings.get("keep_alive") is not None:
        env["OLLAMA_KEEP_ALIVE"] = str(settings["keep_alive"])
    return env


class ManagedOllama(ManagedServer):
    """Context manager like ManagedServer: start ``ollama serve``, yield, always stop."""

    NAME = "ollama serve"
    HEALTH_PATH = "/api/version"

    def __init__(self, settings: dict, log_path):
        super().__init__(settings, log_path)
        self.env: dict = {}

    def _prepare(self) -> tuple[list[str], dict | None, str]:
        binary = shutil.which("ollama")
        if binary is None:
            raise ServerError(NOT_INSTALLED)
        self.port = free_port()
        self.env = managed_env(self.settings, f"127.0.0.1:{self.port}")
        settings = " ".join(f"{k}={v}" for k, v in self.env.items())
        return [binary, "serve"], os.environ | self.env, f"$ {settings} {binary} serve"

    def server_config_line(self) -> str | None:
        """Ollama logs its effective settings once at start ("server config", routes.go)."""
        with contextlib.suppress(OSError):
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                lines = f.read().decode(errors="replace").splitlines()
            return next((line for line in lines if "server config" in line), None)
        return None

    def describe(self) -> dict:
        return {"ollama_env": dict(self.env), "server_config_line": self.server_config_line()}
