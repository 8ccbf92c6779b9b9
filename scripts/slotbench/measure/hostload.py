"""What the rest of the machine was doing during a rep (docs/method.md#host-contention): a
sampler source.

A benchmark shares its machine with everything else on it. Every sample says how much CPU the
machine spent in the sample's interval, split into the target server (the managed server's
process tree, or the process listening on a loopback target's port), the harness (this process,
its children and its ancestors: the rep job, Snakemake, a test runner) and everything else, by
process name; plus the steal time a hypervisor took and the load average. CPU is in cores (1.0
is one core busy for the whole interval).

It samples this machine, the client host. Where the server runs here too (a managed server, a
loopback URL: slotbench.core.hosts) its share is the server's CPU; where it runs on another
machine no process here is the server's, so a sample has no server CPU (None), and what it
says is the client host's load alone.

Linux reads /proc/stat and /proc/<pid>/stat. macOS asks ``ps`` (per-process CPU, a decaying
average, so coarser) and has no steal time. Elsewhere nothing is sampled and the host check says
"not assessable".
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from slotbench.core import hosts

HOST_COLUMNS = ["source", "cpus", "busy_cores", "steal_cores", "iowait_cores", "load1",
                "server_cores", "harness_cores", "other_cores", "top"]
TOP = 5  # competing processes named per sample


def _row(cpus, busy, steal, iowait, load1, server, harness, other, top, server_here) -> dict:
    """One sample; ``server_here`` False (a server on another machine): no server CPU, since
    none of this machine's processes is the server's."""
    values = [cpus, busy, steal, iowait, load1, server if server_here else None, harness, other,
              top]
    return {"source": "host", **dict(zip(HOST_COLUMNS[1:], values))}


def _pids(server_pids: Callable[[], set[int]] | None) -> set[int]:
    return set(server_pids()) if server_pids is not None else set()


def _top_text(by_name: dict[str, float]) -> str:
    ranked = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    return ";".join(f"{name}={cores:.2f}" for name, cores in ranked if cores >= 0.005)


class LinuxHostLoad:
    """CPU by whom, from /proc. The first sample sets the baseline and returns no row."""

    name = "host"

    def __init__(
        self,
        server_pids: Callable[[], set[int]] | None = set,
        root: str | Path = "/",
        own_pid: int | None = None,
    ):
        self.root = Path(root)
        self.server_pids = server_pids
        self.own_pid = own_pid if own_pid is not None else os.getpid()
        self.ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, list[int], dict[int, int]] | None = None
        # A rep pinned to some CPUs (server.cpus) shares only those: the machine is those CPUs,
        # and only processes that may run on them compete (another target's pinned rep next
        # door does not). Read from the real /proc only.
        allowed = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        everything = set(range(os.cpu_count() or 1))
        self.cpus = allowed if str(self.root) == "/" and allowed and allowed != everything else None

    def available(self) -> bool:
        return (self.root / "proc" / "stat").is_file()

    def _cpu_line(self) -> list[int]:
        lines = (self.root / "proc" / "stat").read_text().splitlines()
        if self.cpus is None:
            return [int(v) for v in lines[0].split()[1:]]
        per_cpu = [line.split() for line in lines if line.startswith("cpu")]
        mine = [[int(v) for v in f[1:]] for f in per_cpu if f[0][3:].isdigit()
                and int(f[0][3:]) in self.cpus]
        return [sum(column) for column in zip(*mine)]

    def _may_share(self, pid: int) -> bool:
        if self.cpus is None:
            return True
        try:
            return bool(os.sched_getaffinity(pid) & self.cpus)
        except OSError:  # it ended
            return False

    def _processes(self) -> dict[int, tuple[str, int, int]]:
        """pid -> (name, parent pid, utime + stime in ticks)."""
        found = {}
        for entry in (self.root / "proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "stat").read_text()
            except OSError:  # the process ended while we looked
                continue
            head, _, rest = text.rpartition(")")
            name = head.partition("(")[2]
            fields = rest.split()
            found[int(entry.name)] = (name, int(fields[1]), int(fields[11]) + int(fields[12]))
        return found

    def _load1(self) -> float | None:
        try:
            return float((self.root / "proc" / "loadavg").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def sample(self) -> list[dict]:
        now, cpu, procs = time.monotonic(), self._cpu_line(), self._processes()
        last, self._last = self._last, (now, cpu, {p: v[2] for p, v in procs.items()})
        if last is None:
            return []
        elapsed_ticks = (now - last[0]) * self.ticks
        if elapsed_ticks <= 0:
            return []
        delta = [a - b for a, b in zip(cpu, last[1])]
        # user nice system idle iowait irq softirq steal guest guest_nice (guest is in user)
        idle, iowait = delta[3], delta[4] if len(delta) > 4 else 0
        steal = delta[7] if len(delta) > 7 else 0
        busy = sum(delta[:8]) - idle - iowait - steal
        used = {p: procs[p][2] - last[2].get(p, procs[p][2]) for p in procs}
        server = descendants(procs, _pids(self.server_pids))
        harness = (descendants(procs, {self.own_pid}) | ancestors(procs, self.own_pid)) - server
        others: dict[str, float] = {}
        for pid, ticks in used.items():
            if pid not in server and pid not in harness and ticks > 0 and self._may_share(pid):
                others[procs[pid][0]] = others.get(procs[pid][0], 0.0) + ticks / elapsed_ticks
        server_cores = sum(used[p] for p in server if p in used) / elapsed_ticks
        harness_cores = sum(used[p] for p in harness if p in used) / elapsed_ticks
        cores = busy / elapsed_ticks
        return [
            _row(
                len(self.cpus) if self.cpus else os.cpu_count(),
                cores,
                steal / elapsed_ticks,
                iowait / elapsed_ticks,
                self._load1(),
                server_cores,
                harness_cores,
                max(0.0, cores - server_cores - harness_cores),
                _top_text(others),
                self.server_pids is not None,
            )
        ]


def descendants(procs: dict[int, tuple], roots: set[int]) -> set[int]:
    """The roots and every process below them."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [p for p in roots if p in procs]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def ancestors(procs: dict[int, tuple], pid: int) -> set[int]:
    """The process's parent, its parent's parent … up to (not including) init."""
    found = set()
    while pid in procs and procs[pid][1] > 1 and procs[pid][1] not in found:
        pid = procs[pid][1]
        found.add(pid)
    return found


PS_LINE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+(.+)$")


class PsHostLoad:
    """macOS (or any system with a BSD ps): per-process %CPU from ``ps``, load from getloadavg."""

    name = "host"
    command = ["ps", "-A", "-o", "pid=,ppid=,%cpu=,comm="]

    def __init__(
        self, server_pids: Callable[[], set[int]] | None = set, run=None,
        own_pid: int | None = None
    ):
        from slotbench.measure.thermal import run_command

        self.server_pids = server_pids
        self.run = run or run_command
        self.own_pid = own_pid if own_pid is not None else os.getpid()

    def sample(self) -> list[dict]:
        procs = {}
        for line in self.run(self.command).splitlines():
            match = PS_LINE.match(line)
            if match:
                pid, ppid, pct, comm = match.groups()
                procs[int(pid)] = (os.path.basename(comm.strip()), int(ppid), float(pct) / 100)
        server = descendants(procs, _pids(self.server_pids))
        harness = (descendants(procs, {self.own_pid}) | ancestors(procs, self.own_pid)) - server
        others: dict[str, float] = {}
        for pid, (name, _, cores) in procs.items():
            if pid not in server and pid not in harness:
                others[name] = others.get(name, 0.0) + cores
        server_cores = sum(procs[p][2] for p in server)
        harness_cores = sum(procs[p][2] for p in harness)
        other = sum(others.values())
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return [
            _row(
                os.cpu_count(),
                server_cores + harness_cores + other,
                None,
                None,
                load1,
                server_cores,
                harness_cores,
                other,
                _top_text(others),
                self.server_pids is not None,
            )
        ]


def listening_pids(port: int, root: str | Path = "/") -> set[int]:
    """Linux: the processes that hold a socket listening on ``port`` (a local external server)."""
    root = Path(root)
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (root / "proc" / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    found = set()
    for entry in (root / "proc").iterdir() if inodes else ():
        if not entry.name.isdigit():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if any(link.startswith("socket:[") and link[8:-1] in inodes for link in links):
            found.add(int(entry.name))
    return found


def server_pids_of(conn) -> Callable[[], set[int]] | None:
    """How to find the target server's processes: the managed server's PID, or the process
    listening on a loopback target's port; None for a server on another machine, whose CPU no
    sample of this machine can show (slotbench.core.hosts)."""
    server = getattr(conn, "server", None)
    if server is not None:
        return server.server_pids
    target = getattr(conn, "target", None) or {}
    if not hosts.shares_client_host(target):
        return None
    port = urlsplit(str(target.get("url", ""))).port
    found = listening_pids(port) if port and sys.platform.startswith("linux") else set()
    return lambda: found


def host_source(conn=None, platform: str | None = None):
    """The host-load source for this machine, or None where none can say anything."""
    platform = sys.platform if platform is None else platform
    pids = server_pids_of(conn) if conn is not None else set
    if platform.startswith("linux"):
        source = LinuxHostLoad(pids)
        return source if source.available() else None
    if platform == "darwin":
        return PsHostLoad(pids)
    return None
