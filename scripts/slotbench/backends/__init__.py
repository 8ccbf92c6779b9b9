"""Wire protocols of the servers slotbench can measure, one module per backend."""

from __future__ import annotations

from importlib import import_module

from .base import Backend, BackendError, RequestRecord

# backend name → (module, class); imported on use so one backend's needs never block another
BACKENDS = {
    "llamacpp": ("llamacpp", "LlamaCppBackend"),
    "ollama": ("ollama", "OllamaBackend"),
    "openai": ("openai", "OpenAIBackend"),
}


def make_backend(target: dict, base_url: str, timeout_s: float) -> Backend:
    module, cls = BACKENDS[target["backend"]]
    backend_cls = getattr(import_module(f"{__name__}.{module}"), cls)
    return backend_cls(base_url, target=target, timeout_s=timeout_s)


__all__ = ["Backend", "BackendError", "RequestRecord", "make_backend", "BACKENDS"]
