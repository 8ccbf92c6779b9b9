"""A background sampler: reads a list of sources about once per interval, on a daemon thread,
for as long as a rep runs (the thermal sources of slotbench.measure.thermal, the host's load of
slotbench.measure.hostload). A failing source becomes a row with an error and sampling carries on: a
probe must never be the reason a rep fails.
"""

from __future__ import annotations

import threading
import time


class Sampler:
    """Samples every source about every ``interval_s`` on a daemon thread until stopped.

    Rows carry ``t_s`` (monotonic seconds since ``origin``, the rep's clock when the caller
    passes execute's origin) and ``t_unix``, plus any ``tags`` (e.g. target, run). A failing
    source becomes a row with ``detail`` "error: …" and sampling carries on: a thermal probe
    must never be the reason a rep fails.
    """

    def __init__(
        self,
        sources: list,
        interval_s: float,
        origin: float | None = None,
        tags: dict | None = None,
        kind: str = "thermal",
    ):
        if interval_s <= 0:
            raise ValueError(f"{kind} sampling interval must be positive, got {interval_s}")
        self.kind = kind
        self.sources = list(sources)
        self.interval_s = float(interval_s)
        self.origin = origin
        self.tags = dict(tags or {})
        self._rows: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("this Sampler was already started; make a new one")
        if self.origin is None:
            self.origin = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name=f"slotbench-{self.kind}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def rows(self) -> list[dict]:
        with self._lock:
            return list(self._rows)

    def sample_once(self) -> None:
        """One pass over the sources; every reading of the pass shares one timestamp."""
        if self.origin is None:
            self.origin = time.monotonic()
        t_s = time.monotonic() - self.origin
        t_unix = time.time()
        batch = []
        for source in self.sources:
            name = getattr(source, "name", type(source).__name__)
            try:
                found = source.sample()
            except Exception as exc:  # noqa: BLE001 - recorded, never raised from the thread
                found = [{"source": name, "detail": f"error: {type(exc).__name__}: {exc}"}]
            for row in found:
                batch.append({**self.tags, "t_s": t_s, "t_unix": t_unix, **row})
        with self._lock:
            self._rows.extend(batch)

    def _loop(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # noqa: BLE001 - a clock or tag bug must not kill the run
                with self._lock:
                    self._rows.append(
                        {
                            **self.tags,
                            "t_s": None,
                            "t_unix": time.time(),
                            "source": "sampler",
                            "detail": f"error: {exc!r}",
                        }
                    )
            due += self.interval_s
            now = time.monotonic()
            if due < now:  # fell behind (slow source): skip the missed slots, do not burst
                due = now
            if self._stop.wait(due - now):
                break
