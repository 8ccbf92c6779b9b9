"""Wire protocols of the servers slotbench can measure, one module per backend."""

from __future__ import annotations

from .base import Backend, BackendError, RequestRecord
from .llamacpp import LlamaCppBackend

BACKENDS = {"llamacpp": LlamaCppBackend}


def make_backend(target: dict, base_url: str, timeout_s: float) -> Backend:
    return BACKENDS[target["backend"]](base_url, model=target.get("model"), timeout_s=timeout_s)


__all__ = ["Backend", "BackendError", "RequestRecord", "make_backend", "BACKENDS"]
