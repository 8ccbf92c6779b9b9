"""A scripted Prometheus endpoint (``GET /metrics``, text format 0.0.4: ``# HELP``, ``# TYPE``,
one ``name{labels} value`` line per sample, ``Content-Type: text/plain; version=0.0.4``) whose
every value is a function of the time since it started, so a test knows the truth at any
moment. ``dead = True`` makes it refuse with HTTP 503; ``stall_s`` makes every answer late.

A series' name may carry its labels (``labelled("vllm:num_requests_running", model_name="m")``);
the samples of one family share its ``# HELP`` and ``# TYPE`` lines, as the format requires.
``vllm()``, ``sglang()``, ``tgi()`` and ``dcgm()`` give the series those servers and NVIDIA's
dcgm-exporter send, with their names, types and labels, and values the caller chooses."""

from __future__ import annotations

import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from .served import Served

Series = dict[str, tuple[str, Callable[[float], float]]]


def labelled(name: str, **labels: str) -> str:
    """``name{a="1",b="2"}``, label values escaped as the text format wants."""
    if not labels:
        return name
    def esc(v):
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return name + "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


def family(name: str, kind: str) -> str:
    """The family a sample belongs to: a counter's without ``_total``, a histogram's or
    summary's without ``_bucket``, ``_sum`` or ``_count``."""
    base = name.split("{", 1)[0]
    if kind == "counter":
        return base.removesuffix("_total")
    if kind in ("histogram", "summary"):
        for suffix in ("_bucket", "_sum", "_count"):
            if base.endswith(suffix):
                return base.removesuffix(suffix)
    return base


def _fn(x) -> Callable[[float], float]:
    return x if callable(x) else (lambda t: x)


def vllm(running=3, waiting=2, kv_usage=0.4, preemptions=0,
         generated=lambda t: 200 * t, prompt=lambda t: 50 * t,
         model="google/gemma-3-270m") -> Series:
    """vLLM (V1 engine) /metrics: gauges of requests running and waiting and the KV cache's
    used fraction, counters of preemptions and tokens; labels engine and model_name. Each
    argument is a value or a function of t."""
    def at(name):
        return labelled(name, engine="0", model_name=model)
    return {at("vllm:num_requests_running"): ("gauge", _fn(running)),
            at("vllm:num_requests_waiting"): ("gauge", _fn(waiting)),
            at("vllm:kv_cache_usage_perc"): ("gauge", _fn(kv_usage)),
            at("vllm:num_preemptions_total"): ("counter", _fn(preemptions)),
            at("vllm:prompt_tokens_total"): ("counter", _fn(prompt)),
            at("vllm:generation_tokens_total"): ("counter", _fn(generated))}


def sglang(running=3, waiting=2, token_usage=0.4, generated=lambda t: 200 * t,
           prompt=lambda t: 50 * t, model="google/gemma-3-270m") -> Series:
    """SGLang (--enable-metrics): gauges of running and queued requests and the token pool's
    used fraction, token counters; labels model_name, engine_type and tp_rank."""
    def at(name):
        return labelled(name, engine_type="unified", model_name=model, tp_rank="0")
    return {at("sglang:num_running_reqs"): ("gauge", _fn(running)),
            at("sglang:num_queue_reqs"): ("gauge", _fn(waiting)),
            at("sglang:token_usage"): ("gauge", _fn(token_usage)),
            at("sglang:prompt_tokens_total"): ("counter", _fn(prompt)),
            at("sglang:generation_tokens_total"): ("counter", _fn(generated))}


def tgi(batch=3, queue=2, requests=lambda t: 2 * t, generated=lambda t: 200 * t,
        prompt=lambda t: 50 * t) -> Series:
    """Text Generation Inference's router: gauges of the current batch and queue, and
    histograms of each finished request's input length and generated tokens (their _sum
    the token totals); no labels."""
    series = {"tgi_batch_current_size": ("gauge", _fn(batch)),
              "tgi_queue_size": ("gauge", _fn(queue))}
    for name, total in (("tgi_request_input_length", prompt),
                        ("tgi_request_generated_tokens", generated)):
        series |= {labelled(name + "_bucket", le="+Inf"): ("histogram", _fn(requests)),
                   name + "_sum": ("histogram", _fn(total)),
                   name + "_count": ("histogram", _fn(requests))}
    return series


def dcgm(gpus=1, watts=150.0, energy_mj=lambda t: 150_000 * t, power=True,
         energy=True) -> Series:
    """dcgm-exporter's power gauge (W) and total-energy counter (mJ since the driver loaded)
    for each of ``gpus`` GPUs, labelled as it labels them; ``watts`` and ``energy_mj`` are per
    GPU."""
    series = {}
    for kind, name, value, wanted in (("gauge", "DCGM_FI_DEV_POWER_USAGE", watts, power),
                                      ("counter", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                                       energy_mj, energy)):
        for gpu in range(gpus if wanted else 0):
            uuid = f"GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc4{gpu}"
            key = labelled(name, gpu=str(gpu), UUID=uuid, pci_bus_id=f"00000000:0{gpu}:00.0",
                           device=f"nvidia{gpu}", modelName="NVIDIA L40S", Hostname="gpu-node")
            series[key] = (kind, _fn(value))
    return series


class Exporter(Served):
    """``Exporter({"vllm:num_requests_running": ("gauge", lambda t: 3)})``."""

    def __init__(self, series: dict[str, tuple[str, Callable[[float], float]]]):
        self.series = series
        self.started = time.monotonic()
        self.dead = False
        self.stall_s = 0.0
        self.hits = 0

    def exposition(self, t: float | None = None) -> str:
        """The answer at ``t`` seconds after the start (by default now)."""
        t = time.monotonic() - self.started if t is None else t
        families: dict[str, list[str]] = {}
        for name, (kind, value) in self.series.items():
            families.setdefault(f"{family(name, kind)} {kind}", []).append(
                f"{name} {float(value(t))!r}")
        lines = []
        for head, samples in families.items():
            name = head.split(" ", 1)[0]
            lines += [f"# HELP {name} scripted", f"# TYPE {head}", *samples]
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
