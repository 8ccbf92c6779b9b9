"""Wire protocols of the servers slotbench can measure, one module per backend."""

from __future__ import annotations

from importlib import import_module

from slotbench.measure.backends.base import Backend, BackendError, RequestRecord

# backend name → (module, class); imported on use so one backend's needs never block another
BACKENDS = {
    "llamacpp": ("llamacpp", "LlamaCppBackend"),
    "ollama": ("ollama", "OllamaBackend"),
    "openai": ("openai", "OpenAIBackend"),
}
# The request timeout (s) of the rules that only ask a server about itself (fingerprint: its
# description; plan: its token counts). Not part of the experiment, so a constant here rather
# than a config key: a param would change those rules' rerun trigger and measure runs again.
PROBE_TIMEOUT_S = 30


def make_backend(target: dict, base_url: str, timeout_s: float) -> Backend:
    module, cls = BACKENDS[target["backend"]]
    backend_cls = getattr(import_module(f"{__name__}.{module}"), cls)
    return backend_cls(base_url, target=target, timeout_s=timeout_s)


__all__ = ["Backend", "BackendError", "RequestRecord", "make_backend", "BACKENDS",
           "PROBE_TIMEOUT_S"]
