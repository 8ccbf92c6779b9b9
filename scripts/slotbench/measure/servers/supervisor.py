"""One managed server per target and run, kept across the run's fingerprint, plan and reps.

A run's jobs measure one server configuration, so they share one server process: the model
loads once per run instead of once per rep. Runs stay independent server lifetimes, so runs
pooled are pooled over independent servers. Every rep still warms the server up, records its
state and command line (and its PID and start time), and is still the unit of resume.

How the server lives and dies:

- A run is one experiment's (results/<experiment>/): two experiments' runs of the same target
  and run id are different runs, each with its own server, state file and log.
- The first measuring job of a run starts a supervisor
  (``python -m slotbench.measure.servers.supervisor``), which starts the server as its own child
  (the server dies with it: PR_SET_PDEATHSIG) and writes the run's state file once the server
  answers its health check.
- A job holds the run's lock while it measures, so no two jobs ever use the server at once. It
  reuses the server only if the supervisor and the server are alive, the server answers, and
  both belong to the Snakemake that runs this job (the Snakefile exports its PID as
  ``SLOTBENCH_OWNER``): a server is never carried from one Snakemake invocation to the next.
- The server is stopped when a job that uses it fails or is interrupted (the next job starts a
  fresh one), when a job of another run needs the same CPUs (one idle server at a time), when
  the workflow ends (the Snakefile's onsuccess/onerror), and in any case when the Snakemake that
  owns it is gone, even after ``kill -9``: the supervisor waits on its PID.

Why not Snakemake's ``service()`` outputs in a group: Snakemake runs every job of such a group
at the same time (the service's consumers are meant to be concurrent) and sums their
resources, so a run's reps would measure one server all at once; and a failure of one job in
the group kills the others. A run's reps must take the server one after the other, each
failing alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from slotbench.measure.rawfiles import write_text_atomic

OWNER_ENV = "SLOTBENCH_OWNER"
# a run's state file: STATE_DIR/<experiment>/<target>/<run>.json; its server's whole log:
# results/<experiment>/logs/server/<target>/<run>.log
STATE_DIR = Path(".snakemake") / "slotbench" / "servers"
STOP_WAIT_S = 20
# The Snakefile imports this module in every Snakemake invocation (a dry run too): the server
# classes and requests are imported where they are used, not here.


def managed_class(backend: str):
    """The class that starts and stops a managed server of that backend."""
    from slotbench.measure.servers.ollama import ManagedOllama
    from slotbench.measure.servers.llamacpp import ManagedLlamaServer

    return {"llamacpp": ManagedLlamaServer, "ollama": ManagedOllama}[backend]


def owner() -> int | None:
    """The PID of the Snakemake that runs this job, if it set one and is alive."""
    value = os.environ.get(OWNER_ENV, "")
    return int(value) if value.isdigit() and alive(int(value)) else None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _key(target: dict) -> str:
    what = {"backend": target["backend"], "server": target["server"]}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _state_path(target: str, run: str, results: str | Path) -> Path:
    """The state file of the run's server; ``results`` is the experiment's folder."""
    return STATE_DIR / Path(results).name / target / f"{run}.json"


def _states() -> list[Path]:
    """Every run's state file, of every experiment."""
    return sorted(STATE_DIR.rglob("*.json")) if STATE_DIR.is_dir() else []


def _read(path: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text())
    return None


def _write(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, default=str))


class RunServer:
    """What a job sees of its run's server: the same face as a ManagedServer it started."""

    def __init__(self, state: dict, reused: bool):
        self.state = state
        self.reused = reused
        self.log_path = Path(state["log"])
        self.url = state["url"]
        self.pid = state["pid"]
        model = state.get("model_path")
        self.model_path = Path(model) if model else None
        self.model_sha256 = state.get("model_sha256")
        self.reps_before = state.get("reps", 0)  # reps this server measured before this job
        self.measured_rep = False  # set when this job's rep has measured its last cell

    def alive(self) -> bool:
        return alive(self.pid)

    def server_pids(self) -> set[int]:
        """The supervisor (its descendants are the server's processes)."""
        return {self.state["supervisor"]}

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def describe(self) -> dict:
        return self.state["describe"] | {
            "lifetime": "run: one server for the run's fingerprint, plan and reps",
            "pid": self.pid,
            "started_unix": self.state["started_unix"],
            "jobs_before": self.state["served"],
            "reps_before": self.reps_before,
        }


@contextmanager
def run_server(target: dict, run: str, job_log: str | Path, owner_pid: int,
               results: str | Path) -> Iterator[RunServer]:
    """The run's server for one job of the experiment whose folder is ``results``: reused if
    this Snakemake's server for the run is alive and answers, else started. The job has it alone
    until the block ends; a block that raises (a failure, an interrupt) stops it."""
    path = _state_path(target["name"], run, results)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        state = _reusable(_read(path), _key(target), owner_pid)
        if state is None:
            stop(path)
            _stop_idle_neighbours(target, path, owner_pid)
            state = _start(target, run, path, owner_pid, Path(results) / "logs" / "server")
        server = RunServer(state, reused=state["served"] > 0)
        offset = _size(server.log_path)
        # marked as in use until released: a job killed outright (SIGKILL) cannot release it,
        # and the next job then starts a fresh server rather than take over an abandoned one
        _write(path, state | {"holder": os.getpid()})
        ok = False
        try:
            yield server
            ok = True
        finally:
            _copy_log(server, offset, Path(job_log))
            if ok and alive(state["supervisor"]):
                _write(path, state | {"served": state["served"] + 1, "holder": None,
                                      "reps": server.reps_before + server.measured_rep})
            else:
                stop(path)


def _reusable(state: dict | None, key: str, owner_pid: int) -> dict | None:
    if not state or state.get("error") or state.get("key") != key:
        return None
    if not _mine(state, owner_pid) or not alive(state.get("supervisor")) or state.get("holder"):
        return None
    if not alive(state.get("pid")):
        return None
    import requests

    try:
        ok = requests.get(state["url"] + state["health"], timeout=5).status_code == 200
    except requests.RequestException:
        ok = False
    return state if ok else None


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _copy_log(server: RunServer, offset: int, job_log: Path) -> None:
    """The job's own server log: which server it used, and that server's lines meanwhile."""
    with contextlib.suppress(OSError):
        with open(server.log_path, "rb") as f:
            f.seek(offset)
            lines = f.read()
        job_log.parent.mkdir(parents=True, exist_ok=True)
        how = "reused" if server.reused else "started"
        head = (f"# {how} the run's server: PID {server.pid}, started "
                f"""{time.strftime('%Y-%m-%d %H:%M:%S',
                                   time.localtime(server.state['started_unix']))}"""
                f", jobs before this one {server.state['served']}; its whole log is "
                f"{server.log_path}\n# its lines while this job ran:\n")
        job_log.write_bytes(head.encode() + lines)


def _start(target: dict, run: str, path: Path, owner_pid: int, log_dir: Path) -> dict:
    log = log_dir / target["name"] / f"{run}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # absolute paths: the supervisor's command line names the work directory it serves
    spec = {"backend": target["backend"], "settings": target["server"], "owner": owner_pid,
            "state": str(path.resolve()), "log": str(log.resolve()), "key": _key(target),
            "cpus": (target["server"] or {}).get("cpus"), "target": target["name"], "run": run}
    path.unlink(missing_ok=True)
    with open(log, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "slotbench.measure.servers.supervisor",
                                 json.dumps(spec)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        return _await_start(proc, path, log, float(target["server"]["startup_timeout_s"]))
    except BaseException:  # an error, or the job interrupted while the server starts
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_WAIT_S)
        path.unlink(missing_ok=True)
        raise


def _await_start(proc: subprocess.Popen, path: Path, log: Path, timeout_s: float) -> dict:
    from slotbench.measure.servers.base import ServerError

    deadline = time.monotonic() + timeout_s + 30
    while time.monotonic() < deadline:
        state = _read(path)
        if state and state.get("supervisor") == proc.pid:
            if state.get("error"):
                raise ServerError(state["error"])
            return state
        if proc.poll() is not None:
            raise ServerError(f"the server's supervisor exited with code {proc.returncode} "
                              f"before the server answered; see {log}")
        time.sleep(0.02)
    raise ServerError(f"the run's server did not start in time; see {log}")


def stop(path: Path, wait_s: float = STOP_WAIT_S) -> None:
    """Stop the server a state file names (its supervisor, then the server itself if it
    lingers) and remove the file; a file whose processes are gone, or which another machine
    wrote (a cluster node: its processes end with its job), is just removed."""
    state = _read(path) or {}
    if state.get("host") == socket.gethostname():
        sup, pid = state.get("supervisor"), state.get("pid")
        ours = {p for p in (sup, pid) if _is_ours(p, state)}
        if sup in ours:
            os.kill(sup, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while any(alive(p) for p in ours) and time.monotonic() < deadline:
            time.sleep(0.02)
        for p in ours:
            if alive(p):
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
    path.unlink(missing_ok=True)


def _is_ours(pid: int | None, state: dict) -> bool:
    """Whether ``pid`` is still the supervisor or server the state names, not a reused PID."""
    if not alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return sys.platform != "linux"
    if pid == state.get("supervisor"):
        return b"slotbench.measure.servers.supervisor" in cmdline
    return bool(state.get("binary")) and state["binary"].encode() in cmdline


def _mine(state: dict, owner_pid: int) -> bool:
    """Started for the Snakemake ``owner_pid`` on this machine."""
    return state.get("owner") == owner_pid and state.get("host") == socket.gethostname()


def _overlap(a: list | None, b: list | None) -> bool:
    return not a or not b or bool(set(a) & set(b))


def _stop_idle_neighbours(target: dict, own: Path, owner_pid: int) -> None:
    """Stop the idle servers of other runs (``own``: this run's state file) that share CPUs
    with this target's (one idle server at a time), whichever Snakemake or experiment started
    them, and any server whose Snakemake is gone."""
    mine = (target["server"] or {}).get("cpus")
    for path in _states():
        if path == own:
            continue
        state = _read(path) or {}
        running = _mine(state, owner_pid) or (  # another Snakemake's, still at work here
            state.get("host") == socket.gethostname() and alive(state.get("owner")))
        if running and not _overlap(mine, state.get("cpus")):
            continue
        with open(path.with_suffix(".lock"), "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # in use by a job measuring now
                continue
            stop(path)


def stop_owned(owner_pid: int) -> list[str]:
    """Stop every server this Snakemake started (the end of the workflow); say which."""
    stopped = []
    for path in _states():
        state = _read(path) or {}
        if _mine(state, owner_pid) or not state.get("owner") or not alive(state["owner"]):
            stop(path)
            if state.get("pid"):
                stopped.append(f"{state.get('target')}/{state.get('run')}")
    return stopped


# --- the supervisor process ------------------------------------------------------------------


def _stop_signal(signum, frame):
    raise SystemExit(0)


def _wait_for_owner(owner_pid: int, server) -> None:
    """Return when the owner or the server is gone."""
    try:
        fd = os.pidfd_open(owner_pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while alive(owner_pid) and server.alive():
            if fd is not None:
                if select.select([fd], [], [], 0.5)[0]:
                    return
            else:
                time.sleep(0.5)
    finally:
        if fd is not None:
            os.close(fd)


def supervise(spec: dict) -> int:
    path = Path(spec["state"])
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, _stop_signal)
    from slotbench.measure.servers.base import ServerError

    server = managed_class(spec["backend"])(spec["settings"], spec["log"])
    base = {"supervisor": os.getpid(), "host": socket.gethostname(), "owner": spec["owner"],
            "key": spec["key"],
            "cpus": spec["cpus"], "target": spec["target"], "run": spec["run"]}
    try:
        server.start()
    except ServerError as exc:  # the job that started us reads it, and removes the file
        _write(path, base | {"error": str(exc)})
        return 1
    try:
        model = getattr(server, "model_path", None)
        _write(path, base | {
            "pid": server.proc.pid, "binary": server.command[0], "url": server.url,
            "health": server.HEALTH_PATH,
            "log": spec["log"], "started_unix": time.time(), "served": 0,
            "describe": server.describe(), "model_path": str(model) if model else None,
            "model_sha256": getattr(server, "model_sha256", None),
        })
        _wait_for_owner(spec["owner"], server)
    finally:
        server.stop()
        state = _read(path)
        if state and state.get("supervisor") == os.getpid():
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(supervise(json.loads(sys.argv[1])))
