"""Client processes: an arm's streams sharded over several load generators.

One event loop ingests a few tens of thousands of tokens a second on one core
(benchmarks/RESULTS.md); an accelerator serving 256 users streams more. So a cell's streams are
split over ``client.processes`` processes (the rep plan says how: plan.split_streams), each
running slotbench.measure.loadgen on its own loop and core. They share a start barrier, a moment on
the system-wide monotonic clock that every process reads alike (CLOCK_MONOTONIC on Linux, and on
macOS), and their records merge into the cell, each request naming the process that sent it.

With one process the load generator runs in the rep's own process, on a thread of its own (the
rep's samplers and its main thread are not the client); with more, each is a child process
(``python -m slotbench.measure.clients``) that reads one JSON command a line on stdin and answers
one JSON line on stdout. A child ends when its stdin closes, so a rep that dies leaves none behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from slotbench.core.code import ROOT
from slotbench.measure.backends import Backend, BackendError, make_backend
from slotbench.measure.loadgen import CellFailed, run_cell

# How long after the command the client processes start a cell together: time for each to read
# it and encode its request bodies before the barrier.
BARRIER_S = 0.05
class ClientError(RuntimeError):
    """A client process failed (not a request: the process itself)."""


class Clients:
    """The client processes of one rep: ``cell(...)`` runs one cell's shares and merges them."""

    def __init__(self, backend: Backend, target: dict, base_url: str, timeout_s: float,
                 processes: int, cpus: list[int] | None = None):
        self.backend = backend
        self.processes = max(1, int(processes))
        self.children: list[subprocess.Popen] = []
        self.cpus = cpus
        if self.processes > 1:
            spec = json.dumps({"target": target, "base_url": base_url, "timeout_s": timeout_s})
            package = str(ROOT)
            env = os.environ | {"PYTHONPATH": os.pathsep.join(
                [package, os.environ.get("PYTHONPATH", "")])}
            for j in range(self.processes):
                # the package's path on the command line: a process left behind is traceable
                child = subprocess.Popen(
                    [sys.executable, "-m", "slotbench.measure.clients", package],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1,
                    preexec_fn=_child_setup(cpus, j),
                )
                child.stdin.write(spec + "\n")
                self.children.append(child)
            for j, child in enumerate(self.children):
                self._answer(j, child)  # {"ready": true} once its backend is made

    def cell(self, shares: list[dict], num_predict: int, temperature: float,
             measure: bool = True, watch=None) -> tuple[list[dict], list[dict]]:
        """Run a cell: ``shares`` (plan.split_streams) each give a process its streams and its
        requests. Returns the requests' raw records (absolute monotonic times) in request
        order, each with ``client_process``, and each process's stats. Raises CellFailed with
        the failing request's id (its ``request`` number in the cell). ``watch``: a progress
        line's (loadgen.run_cell), followed in this process only."""
        if self.processes == 1 or len(shares) == 1 and not self.children:
            return self._in_process(shares, num_predict, temperature, measure, watch)
        start_at = time.monotonic() + BARRIER_S
        for share in shares:
            command = {"cmd": "cell", "share": share, "num_predict": num_predict,
                       "temperature": temperature, "start_at": start_at, "measure": measure}
            self.children[share["process"]].stdin.write(json.dumps(command) + "\n")
        answers, failure = {}, None
        for share in shares:  # the first failure stops the others
            answer = self._answer(share["process"], self.children[share["process"]])
            answers[share["process"]] = answer
            if answer.get("failed") and failure is None:
                failure = answer["failed"]
                self.abort()
        if failure is not None:
            raise CellFailed(failure["index"],
                             BackendError(failure["message"], body=failure.get("body")))
        return _merge(shares, {p: (a["records"], a["stats"]) for p, a in answers.items()})

    def _in_process(self, shares, num_predict, temperature, measure, watch=None):
        runner = self.backend.runner()
        out = {}
        for share in shares:  # one process: one share (split_streams gives one)
            requests = share["requests"]
            try:
                recs, stats = runner.run(run_cell(
                    self.backend, runner.client, requests, share["streams"], num_predict,
                    temperature, measure=measure, arrivals=share.get("arrivals"),
                    max_in_flight=share.get("max_in_flight"), watch=watch))
            except CellFailed as exc:
                raise CellFailed(requests[exc.index]["request"], exc.error) from None
            out[share["process"]] = ([r.to_raw(0.0) for r in recs], stats)
        return _merge(shares, out)

    def _answer(self, j: int, child: subprocess.Popen) -> dict:
        line = child.stdout.readline()
        if not line:
            code = child.wait()
            raise ClientError(f"client process {j} (pid {child.pid}) ended with exit code {code} "
                              "before it answered")
        return json.loads(line)

    def abort(self) -> None:
        """End every stream in flight in every client process."""
        self.backend.abort()
        for child in self.children:
            try:
                child.stdin.write('{"cmd": "abort"}\n')
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        for child in self.children:
            try:
                child.stdin.close()
            except (OSError, ValueError):
                pass
        for child in self.children:
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children = []

    def __enter__(self) -> "Clients":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            self.abort()
        self.close()


def _merge(shares: list[dict], done: dict) -> tuple[list[dict], list[dict]]:
    records, stats = {}, []
    for share in shares:
        recs, st = done[share["process"]]
        stats.append({"process": share["process"], **st})
        for r, rec in zip(share["requests"], recs, strict=True):
            records[r["request"]] = rec | {"client_process": share["process"]}
    return [records[k] for k in sorted(records)], stats


def _child_setup(cpus: list[int] | None, j: int):
    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the rep decides; stdin closing ends us
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


def _serve() -> None:
    """A child: make the backend, then run cells until stdin closes."""
    spec = json.loads(sys.stdin.readline())
    backend = make_backend(spec["target"], spec["base_url"], spec["timeout_s"])
    runner = backend.runner()
    out_lock = threading.Lock()

    def say(obj) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    def run(command: dict) -> None:
        share = command["share"]
        try:
            recs, stats = runner.run(run_cell(
                backend, runner.client, share["requests"], share["streams"],
                command["num_predict"], command["temperature"], command["start_at"],
                command.get("measure", True), share.get("arrivals"),
                share.get("max_in_flight")))
        except CellFailed as exc:
            say({"failed": {"index": share["requests"][exc.index]["request"],
                            "message": str(exc.error),
                            "body": getattr(exc.error, "body", None)}})
            return
        except Exception as exc:  # noqa: BLE001 - the parent names it
            say({"failed": {"index": share["requests"][0]["request"],
                            "message": f"client process failed: {exc!r}"}})
            return
        say({"records": [r.to_raw(0.0) for r in recs], "stats": stats})

    say({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "cell":
            threading.Thread(target=run, args=(command,), daemon=True).start()
        elif command["cmd"] == "abort":
            backend.abort()
    backend.abort()


if __name__ == "__main__":
    _serve()
