"""The server's own evidence, scraped: Prometheus text from a server's /metrics or an exporter,
read with Prometheus's own parser into samples (slotbench.core.prometheus, which also says what
two scrapes mean), by a scraper on its own thread around and during each cell.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from slotbench.core.code import ROOT
from slotbench.core.prometheus import Sample

def parse(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition. ValueError when it is not one."""
    return [Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


@dataclass(frozen=True)
class Scrape:
    """One scrape of one source: when it was asked (seconds on the caller's clock), what it
    answered, or why it gave nothing (then ``samples`` is None: missing, not empty); and which
    cell it belongs to: ``phase`` before, during or after the cell at ``arm``/``position``."""

    t_s: float
    source: str
    samples: list[Sample] | None
    error: str | None = None
    phase: str | None = None
    arm: int | None = None
    position: int | None = None

    def record(self) -> dict:
        """As the raw file keeps it."""
        return {"t_s": self.t_s, "source": self.source, "phase": self.phase, "arm": self.arm,
                "position": self.position, "error": self.error,
                "samples": None if self.samples is None else [
                    [s.metric, dict(s.labels), s.value] for s in self.samples]}


def fetch(session, url: str, timeout_s: float) -> tuple[str | None, str | None]:
    """GET ``url``: (its text, None), or (None, why) on any failure; never raises."""
    import requests

    try:
        response = session.get(url, timeout=timeout_s)
        if response.status_code != 200:
            return None, f"HTTP {response.status_code}"
        return response.text, None
    except requests.Timeout:
        return None, f"no answer within {timeout_s:g} s"
    except requests.RequestException as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"


def parsed(text: str | None, error: str | None) -> tuple[list[Sample] | None, str | None]:
    """What fetch gave, parsed: (samples, None), or (None, why)."""
    if text is None:
        return None, error
    try:
        return parse(text), None
    except ValueError as exc:  # the parser's: not the Prometheus text format
        return None, f"not Prometheus text: {str(exc)[:200]}"


def scrape(session, url: str, timeout_s: float) -> tuple[list[Sample] | None, str | None]:
    """GET ``url`` and parse it; (None, why) on any failure: a scrape never raises."""
    return parsed(*fetch(session, url, timeout_s))


def source_name(source) -> str:
    """A source's name in the scrapes: its URL, or a local source's ``name``."""
    return source if isinstance(source, str) else source.name


def read_local(source) -> tuple[list[Sample] | None, str | None]:
    """A local source's samples (``source.read()``); (None, why) on any failure: never raises."""
    try:
        return list(source.read()), None
    except Exception as exc:  # noqa: BLE001 - a local source may fail any way; kept as missing
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"


class Scraper:
    """Scrapes ``sources`` on a thread of its own (off the client's event loop).

    ``scrape_now()`` takes one scrape of each source at once. Inside ``with scraper.cell(arm,
    position):`` it scrapes every source just before the cell, every ``interval_s`` while the
    cell runs and just after it, each scrape tagged with the cell and its phase; between cells
    (the warm-up included) the thread waits and scrapes nothing. Times are ``clock() -
    origin``; each source gets at most ``interval_s`` (at least 0.05 s) to answer, so a source
    that stalls delays nothing by more than that. A source is a URL (a str, scraped over HTTP)
    or a local source with a ``name`` and a ``read()`` giving samples (measure/energy.py)."""

    def __init__(self, sources: list, interval_s: float, clock=None, origin: float = 0.0,
                 parse_after: bool = False):
        import threading
        import time

        import requests

        self.sources, self.interval_s = list(sources), interval_s
        self.clock, self.origin = clock or time.monotonic, origin
        self.scrapes: list[Scrape] = []
        # parse_after: a cell's texts are kept as fetched and parsed when it ends (records()),
        # so that during the cell a scrape is one GET and nothing more
        self.parse_after, self._texts = parse_after, {}
        self._session = requests.Session()
        self._stop = threading.Event()
        self._active = threading.Event()
        self._lock = threading.Lock()
        self._cell: tuple[int | None, int | None] = (None, None)
        self._thread = threading.Thread(target=self._run, name="slotbench-telemetry",
                                        daemon=True)

    def scrape_now(self, phase: str | None = None) -> list[Scrape]:
        arm, position = self._cell
        taken = []
        for source in self.sources:
            t = self.clock() - self.origin
            text = None
            if not isinstance(source, str):
                samples, error = read_local(source)
            elif self.parse_after:
                text, error = fetch(self._session, source, max(self.interval_s, 0.05))
                samples = None
            else:
                samples, error = scrape(self._session, source, max(self.interval_s, 0.05))
            taken.append(Scrape(t, source_name(source), samples, error, phase, arm, position))
            if text is not None:
                self._texts[id(taken[-1])] = text
        with self._lock:
            self.scrapes.extend(taken)
        return taken

    def cell(self, arm: int, position: int):
        """Scrape just before, during and just after the cell at ``arm``/``position``."""
        from contextlib import contextmanager

        @contextmanager
        def scraping():
            with self._lock:
                self._cell = (arm, position)
            self.scrape_now("before")
            self._active.set()
            try:
                yield self
            finally:
                self._active.clear()
                with self._lock:  # a scrape in flight finishes before the last one is taken
                    pass
                self.scrape_now("after")
                self._cell = (None, None)

        return scraping()

    def records(self, scrapes: list[Scrape] | None = None) -> list[dict]:
        """The raw file's records of ``scrapes`` (default: all), texts kept by parse_after
        parsed now."""
        with self._lock:
            chosen = list(self.scrapes if scrapes is None else scrapes)
            texts = {id(s): self._texts.pop(id(s)) for s in chosen if id(s) in self._texts}
        out = []
        for s in sorted(chosen, key=lambda s: s.t_s):
            if id(s) in texts:
                samples, error = parsed(texts[id(s)], None)
                s = Scrape(s.t_s, s.source, samples, error, s.phase, s.arm, s.position)
            out.append(s.record())
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._active.wait(0.05):
                continue
            if self._stop.wait(self.interval_s):
                return
            if self._active.is_set():
                self.scrape_now("during")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._session.close()


def root_metrics_url(base_url: str) -> str:
    """``/metrics`` at the root of the server that ``base_url`` names (llama-server's, vLLM's and
    SGLang's place for it, whatever path the API has, e.g. /v1)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def telemetry_sources(base_url: str, settings: dict, local=(), unavailable: dict | None = None,
                      probe_timeout_s: float = 2.0) -> list[dict]:
    """What a rep scrapes: the server's endpoint (``metrics_url``, else its root /metrics, tried
    once now and scraped only when it answers), every exporter (always scraped: one that does not
    answer is a missing series, never a failed rep), and ``local`` energy sources (objects with
    ``name``; ``unavailable`` names those that cannot be read here, with why). Each: name, role
    (server, exporter, local), given (named in the config), scraped, note (why it is not)."""
    import requests

    given = settings.get("metrics_url")
    server = {"name": given or root_metrics_url(base_url), "role": "server",
              "given": bool(given), "scraped": True, "note": None}
    if not given:
        with requests.Session() as session:
            samples, error = scrape(session, server["name"], probe_timeout_s)
        if samples is None:
            server |= {"scraped": False,
                       "note": f"the server has no Prometheus endpoint at {server['name']} "
                               f"({error}); name it with the target's metrics_url if it has one "
                               "elsewhere"}
    exporters = [{"name": url, "role": "exporter", "given": True, "scraped": True, "note": None}
                 for url in settings.get("exporters") or []]
    energy = [{"name": s.name, "role": "local", "given": False, "scraped": True, "note": None}
              for s in local]
    energy += [{"name": name, "role": "local", "given": False, "scraped": False, "note": why}
               for name, why in (unavailable or {}).items()]
    return [server, *exporters, *energy]


# how much lower than the rep's the scraper process's priority is (os.nice): on a machine whose
# cores the server and the client keep busy, it waits for them, never they for it
NICE = 10


class ScraperProcess:
    """A Scraper in a child process of its own (``python -m slotbench.measure.telemetry``), so
    that fetching and parsing the scrapes never holds the client's GIL: parsing a large
    exposition (a DCGM exporter's 200 samples: about 17 ms) in the client's process stalled
    every stream at once (benchmarks/RESULTS.md, the telemetry scraper's cost). The child runs
    at a lower priority (NICE), off the client's CPUs when it has some (``client_cpus``) and
    others are left, and parses a cell's texts only when the cell has ended. The same
    interface as Scraper where a rep uses it: ``origin``, ``cell(arm, position)`` (returns once
    the scrape just before the cell is taken), ``records()``. ``local`` names this machine's
    energy sources (measure/energy.py) the child reads beside the URLs. A child that cannot
    start or dies leaves missing scrapes with the reason, never a failed rep."""

    def __init__(self, sources: list[str], interval_s: float, local: list[str] = (),
                 origin: float = 0.0, client_cpus: list[int] | None = None):
        import os
        import subprocess
        import sys

        self.sources, self.local, self.origin = list(sources), list(local), origin
        self.interval_s = interval_s
        self.scrapes: list[dict] = []
        self.child = None
        if not self.sources and not self.local:
            return
        env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT),
                                                           os.environ.get("PYTHONPATH", "")])}
        self.child = subprocess.Popen(
            [sys.executable, "-m", "slotbench.measure.telemetry", str(ROOT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        self._say({"sources": self.sources, "interval_s": interval_s, "local": self.local,
                   "client_cpus": list(client_cpus or [])})

    def _say(self, command: dict) -> dict | None:
        """Send one command and read its answer; None when the child is gone."""
        import json

        if self.child is None:
            return None
        try:
            self.child.stdin.write(json.dumps(command) + "\n")
            line = self.child.stdout.readline()
        except (OSError, ValueError):
            line = ""
        if not line:
            self.child = None
            return None
        return json.loads(line)

    def cell(self, arm: int, position: int):
        from contextlib import contextmanager

        @contextmanager
        def scraping():
            started = self._say({"cmd": "cell", "arm": arm, "position": position,
                                 "origin": self.origin})
            try:
                yield self
            finally:
                ended = self._say({"cmd": "end"}) if started is not None else None
                if ended is None:  # the child died: every source is missing, with why
                    import time

                    now = time.monotonic() - self.origin
                    self.scrapes += [
                        Scrape(now, name, None, "the scraper process ended", phase, arm,
                               position).record()
                        for name in self.sources + self.local for phase in ("before", "after")]
                else:
                    self.scrapes += ended["scrapes"]

        return scraping()

    def records(self) -> list[dict]:
        return sorted(self.scrapes, key=lambda s: s["t_s"])

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.child is not None:
            try:
                self.child.stdin.close()
                self.child.wait(5)
            except (OSError, ValueError, __import__("subprocess").TimeoutExpired):
                self.child.kill()
            self.child = None


def _serve() -> None:
    """The child of ScraperProcess: scrape each cell on command until stdin closes."""
    import json
    import os
    import signal
    import sys
    from contextlib import ExitStack
    from itertools import chain

    from slotbench.measure.energy import local_sources

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the rep decides; stdin closing ends us
    os.nice(NICE)  # background work: the client and the server come first
    spec = json.loads(sys.stdin.readline())
    others = set(os.sched_getaffinity(0)) - set(spec["client_cpus"])
    if spec["client_cpus"] and others:  # the client's CPUs are the client's
        os.sched_setaffinity(0, others)
    local = [s for s in local_sources()[0] if s.name in spec["local"]]
    with Scraper(spec["sources"] + local, spec["interval_s"], parse_after=True) as scraper:
        answer = {}
        for line in chain([""], iter(sys.stdin.readline, "")):  # "": the start
            command = json.loads(line) if line else {"cmd": "start"}
            if command["cmd"] == "cell":
                scraper.origin, taken = command["origin"], len(scraper.scrapes)
                cell = ExitStack()
                cell.enter_context(scraper.cell(command["arm"], command["position"]))
                answer = {}
            elif command["cmd"] == "end":
                cell.close()  # the scrape just after the cell
                answer = {"scrapes": scraper.records(scraper.scrapes[taken:])}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    _serve()
