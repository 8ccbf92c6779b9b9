"""What a measuring job asks of the executor that runs it: the endpoint it holds, its cores,
memory, GPUs and a runtime estimate, all from the config. Site settings (partition, account,
queue) stay in the profiles (profiles/slurm/, profiles/kubernetes/)."""

from __future__ import annotations

import math
import re

from slotbench.core import hosts, urls
from slotbench.measure.plan import cell_requests
from slotbench.workflow.config import ConfigError, invalid

# A conservative generation rate for the runtime estimate: a 2-core machine runs the embedded
# model at 15-40 tok/s per stream, so 5 tok/s leaves room for a busy or slower node.
SLOW_TPS = 5.0
STARTUP_S = 120  # a server start, its warm-up and the job's own start
MEMORY_MB = {"llamacpp": 2048, "ollama": 4096}  # a managed server of the embedded size
CLIENT_MB = 1024


def endpoint_resources(target: dict, machine_cpus: list[int]) -> dict[str, int]:
    """The resources a measuring job of ``target`` holds, one unit each, so that two jobs that
    would share what they measure never run at once, on one machine or across nodes (Snakemake
    counts global resources over every job it has running, wherever it runs).

    A managed server holds each CPU it may run on (``server.cpus``, else every CPU of this
    machine): targets on disjoint CPUs are measured side by side, overlapping ones in turn. An
    external server holds its endpoint: the host and port of its URL; on this machine (a
    loopback address) it shares the CPUs with any managed server, so it holds them all too.
    A URL the config's check would refuse raises ConfigError: one line, not a traceback.
    """
    if target.get("managed"):
        cpus = target.get("server", {}).get("cpus") or machine_cpus
        return {f"cpu{c}": 1 for c in cpus}
    try:
        _, host, port = urls.endpoint(target.get("url", ""))
    except ValueError as exc:
        raise ConfigError(invalid([f"config key `url` of target {target.get('name')!r}: "
                                   f"{target.get('url')!r} {exc}"])) from None
    held = {"endpoint_" + re.sub(r"\W", "_", f"{host}_{port}"): 1}
    if hosts.is_loopback(host):
        held |= {f"cpu{c}": 1 for c in machine_cpus}
    return held


def rep_runtime_min(cfg: dict) -> int:
    """Minutes a rep may take at SLOW_TPS per stream: every arm's rounds of num_predict tokens,
    the warm-up, cool-downs and a server start (an upper estimate, for a scheduler's limit)."""
    seconds = STARTUP_S
    for arm in cfg["arms"]:
        n = cell_requests(cfg["requests_per_cell"], arm)
        if isinstance(arm, dict):  # a rate arm: its arrivals' span, then its last request
            seconds += n / arm["rate"] + cfg["num_predict"] / SLOW_TPS + cfg["cooldown_s"]
            continue
        rounds = math.ceil(n / arm)
        seconds += rounds * cfg["num_predict"] / SLOW_TPS + cfg["cooldown_s"]
    seconds += cfg["warmup_predict"] / SLOW_TPS
    return max(1, math.ceil(seconds / 60))


def job_resources(cfg: dict, target: dict, machine_cpus: list[int], runtime_min: int) -> dict:
    """Everything a measuring job (fingerprint, plan, rep) of ``target`` asks for."""
    server = target.get("server", {}) if target.get("managed") else {}
    cores = len(server.get("cpus") or []) or server.get("threads") or 1
    out = {"cpus_per_task": cores, "runtime": runtime_min,
           "mem_mb": CLIENT_MB + (MEMORY_MB.get(target["backend"], 0) if server else 0)}
    if server.get("gpus"):
        out["gpu"] = server["gpus"]
    return out | endpoint_resources(target, machine_cpus)
