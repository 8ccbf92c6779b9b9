"""A scripted Prometheus endpoint (``GET /metrics``, text format 0.0.4: ``# HELP``, ``# TYPE``,
one ``name{labels} value`` line per sample, ``Content-Type: text/plain; version=0.0.4``) whose
every value is a function of the time since it started, so a test knows the truth at any
moment. ``dead = True`` makes it refuse with HTTP 503; ``stall_s`` makes every answer late."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from typing import Callable

from .served import Served


class Exporter(Served):
    """``Exporter({"vllm:num_requests_running": ("gauge", lambda t: 3)})``."""

    def __init__(self, series: dict[str, tuple[str, Callable[[float], float]]]):
        self.series = series
        self.started = time.monotonic()
        self.dead = False
        self.stall_s = 0.0
        self.hits = 0

    def exposition(self) -> str:
        t = time.monotonic() - self.started
        lines = []
        for name, (kind, value) in self.series.items():
            family = name.removesuffix("_total") if kind == "counter" else name
            lines += [f"# HELP {family} scripted", f"# TYPE {family} {kind}",
                      f"{name} {float(value(t))!r}"]
        return "\n".join(lines) + "\n"

    def handler(self) -> type:
        return _Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's name
        d = self.double
        d.hits += 1
        time.sleep(d.stall_s)
        if self.path != "/metrics" or d.dead:
            status, body = (404 if self.path != "/metrics" else 503), b"unavailable\n"
        else:
            status, body = 200, d.exposition().encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass
