"""What every backend returns for one streamed request, and how it fails."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


class BackendError(RuntimeError):
    """A request failed at the server or on the wire; the message says what the server said."""


@dataclass
class RequestRecord:
    """One streamed generation. Times are monotonic seconds (time.monotonic())."""

    t_sent: float
    t_first: float | None = None
    t_done: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    gen_s: float | None = None
    done_reason: str | None = None
    server: dict = field(default_factory=dict)
    chunks: int = 0
    # "server" when gen_s/output_tokens come from the server's own timings, "client" when they
    # were derived from token arrival times on this side (e.g. an OpenAI server without timings)
    timing_source: str = "server"

    def to_raw(self, origin: float) -> dict:
        """Times relative to ``origin`` (the rep's start), as stored in raw files."""
        out = asdict(self)
        for key in ("t_sent", "t_first", "t_done"):
            value = out.pop(key)
            out[f"{key}_s"] = None if value is None else value - origin
        return out


class Backend:
    """Interface: subclasses speak one server's protocol."""

    name = "base"

    def __init__(self, base_url: str, target: dict | None = None, timeout_s: float = 300):
        self.base_url = base_url.rstrip("/")
        self.target = target or {}
        self.model = self.target.get("model")
        self.timeout_s = timeout_s

    def generate(self, prompt: str, num_predict: int, temperature: float, seed: int,
                 allow_cache: bool = False) -> RequestRecord:  # fmt: skip
        """One streamed generation. ``allow_cache`` lets the server reuse a cached prompt prefix
        (only the control arm and a nonce-less plan ask for it; measured requests never do)."""
        raise NotImplementedError

    def tokenizer(self):
        """A callable text → token count, or None when the server cannot tokenize.

        Without one the plan cannot equalise prompt lengths up front; the checks still verify
        equality from the server-reported prompt token counts.
        """
        return None

    def load(self) -> None:
        """Bring the model into memory with the measured requests' load-time options.

        Called before the warm-up generations; a no-op where the server has nothing to load.
        """

    def describe(self) -> dict:
        """Server facts for the fingerprint and for every raw rep file (version, slots, …)."""
        raise NotImplementedError

    def model_facts(self, described: dict) -> dict:
        """Model facts (quantisation, digest, size …) from what describe() returned."""
        return {}

    @staticmethod
    def now() -> float:
        return time.monotonic()
