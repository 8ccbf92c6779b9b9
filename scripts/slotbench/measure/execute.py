"""Run one rep: warm up, then every arm in the rep's planned order, and record every request.

An arm of concurrency N sends the cell's requests with at most N in flight: N streams (on one
event loop, or shared out over client processes as the rep plan says: slotbench.measure.clients),
each sending its next request as soon as its previous one is done, so every arm does the same work.
"""

from __future__ import annotations

import sys
import time

from slotbench.core import defaults
from slotbench.core.cells import arm_name
from slotbench.measure.backends import BackendError
from slotbench.measure.clients import Clients
from slotbench.measure.loadgen import CellFailed
from slotbench.measure.plan import split_streams
from slotbench.measure.progress import Progress
from slotbench.measure.rawfiles import RAW_SCHEMA
from slotbench.measure.sampler import Sampler
from slotbench.measure.targets import Connection
from slotbench.measure.telemetry import ScraperProcess, telemetry_sources

# what a workload's rep plan says each request asks for, kept beside what it got
PLANNED = ("input_tokens", "output_tokens", "pinned", "trace_input_tokens", "trace_row",
           "prefix_group", "prefix_tokens", "planned_cached_tokens", "session", "turn")
TIMES = ("t_sent_s", "t_first_s", "t_last_s", "t_done_s", "t_planned_s", "t_ready_s")


class RepError(RuntimeError):
    """A request failed, so the rep it belongs to is not recorded. ``body``: the failed
    request's whole answer from the server, when its message shows only a line of it."""

    def __init__(self, message: str, body: str | None = None):
        super().__init__(message)
        self.body = body


def _shares(requests: list[dict], shares: list[dict] | None, streams: int,
            cell: dict | None = None) -> list[dict]:
    """The plan's split of a cell over client processes, with each process's request dicts and,
    for a rate arm, each request's planned arrival and the process's share of the cap."""
    by_id = {r["request"]: r for r in requests}
    if not shares or sorted(i for s in shares for i in s["requests"]) != sorted(by_id):
        shares = split_streams(streams, list(by_id), len(shares or [1]))
    out = [s | {"requests": [by_id[i] for i in s["requests"]]} for s in shares]
    if cell is not None and cell.get("arrivals") is not None:
        at = dict(zip((r["request"] for r in requests), cell["arrivals"], strict=True))
        cap = (cell.get("open") or {}).get("max_in_flight")
        for share in out:
            share["arrivals"] = [at[r["request"]] for r in share["requests"]]
            share["max_in_flight"] = None if not cap else -(-cap // len(out))
    return out


def _send_all(clients: Clients, requests: list[dict], shares: list[dict] | None, streams: int,
              num_predict: int, temperature: float, measure: bool = True,
              cell: dict | None = None, watch=None):
    """Send ``requests`` with ``streams`` in flight (or, for a rate arm's ``cell``, each at its
    planned arrival); on the first failure, stop sending.

    Returns (raw records in request order with absolute times, client process stats), or
    raises CellFailed naming the request.
    """
    try:
        return clients.cell(_shares(requests, shares, streams, cell), num_predict, temperature,
                            measure, watch)
    except CellFailed:
        raise
    except BaseException:  # an interrupt: end the streams in flight, keep nothing
        clients.abort()
        raise


def _failure(ctx: dict, arm, position, request, exc: BaseException, conn: Connection) -> RepError:
    where = f"target {ctx['target']}, run {ctx['run']}, rep {ctx['rep']}"
    if arm is None:
        where += ", warm-up"
    else:
        where += f", arm {arm} (position {position})"
    where += f", request {request}" if request is not None else " (model load)"
    msg = f"{where}: {exc}"
    if conn.server is not None and not conn.server.alive():
        msg += "\nThe managed server is no longer running; last lines of its log:\n"
        msg += conn.server.log_tail()
    msg += (
        "\nThis rep was not recorded; reps already written stay valid. "
        "Fix the cause and rerun snakemake: it resumes with this rep."
    )
    return RepError(msg, body=getattr(exc, "body", None))


def warm_up_requests(rep_entry: dict, reps_before: int) -> tuple[list[dict], list[dict] | None]:
    """The rep's warm-up requests and their split over client processes.

    On a server that has not measured a rep yet: the plan's, one request per stream of the
    widest arm, so the model is loaded, every slot has generated and every connection is open.
    On the run's server after it measured a rep (it is loaded and every slot has generated):
    one request per client process, each of which is new and opens its connection with it."""
    warm, shares = rep_entry["warmup"], rep_entry.get("warmup_shares")
    if not reps_before or not warm:
        return warm, shares
    shares = shares or split_streams(len(warm), [w["request"] for w in warm], 1)
    light = [s | {"streams": 1, "requests": s["requests"][:1]} for s in shares]
    kept = {i for s in light for i in s["requests"]}
    return [w for w in warm if w["request"] in kept], light


def _warm_up(conn: Connection, clients: Clients, rep_entry: dict, settings: dict, ctx: dict,
             label: str, log) -> dict:
    """Load the model, then short generations (warm_up_requests), from every client process;
    nothing here is measured. Returns what the raw file records of it."""
    t0 = time.monotonic()
    reps_before = conn.reps_before()
    warm, shares = warm_up_requests(rep_entry, reps_before)
    try:
        conn.backend.load()
    except Exception as exc:  # noqa: BLE001 - any failure here fails the rep, named
        raise _failure(ctx, None, None, None, exc, conn) from exc
    try:
        _send_all(clients, warm, shares, len(warm), settings["warmup_predict"],
                  settings["temperature"], measure=False)
    except CellFailed as failed:
        raise _failure(ctx, None, None, failed.index, failed.error, conn) from None
    took = time.monotonic() - t0
    print(f"[{label}] warm-up: {len(warm)} requests in {took:.1f} s"
          + (f" (the run's server measured {reps_before} reps before)" if reps_before else ""),
          file=log)
    return {"requests": len(warm), "server_reps_before": reps_before, "seconds": took}


def _measure_cell(conn: Connection, clients: Clients, cell: dict, settings: dict,
                  origin: float, ctx: dict, label: str, log, progress: Progress,
                  scraper: ScraperProcess) -> dict:
    """One cell: its requests with ``arm`` in flight, what each client process spent, and the
    server's telemetry just before, during and just after it (kept by ``scraper``)."""
    arm, position = cell["arm"], cell["position"]
    kind = ("control arm (shared prompt)" if cell.get("control")
            else f"arm {arm_name(arm) if arm < 0 else arm}")
    placement = {"before": conn.backend.placement()}
    progress.start_cell(f"position {position}: {kind}", len(cell["requests"]))
    try:
        with scraper.cell(arm, position):
            results, stats = _send_all(clients, cell["requests"], cell.get("shares"),
                                       len(cell["requests"]) if arm < 0 else arm,
                                       settings["num_predict"], settings["temperature"],
                                       cell=cell, watch=progress.watch)
    except CellFailed as failed:
        raise _failure(ctx, arm, position, failed.index, failed.error, conn) from None
    finally:
        progress.end_cell()
    placement["after"] = conn.backend.placement()
    requests = []
    for r, rec in zip(cell["requests"], results, strict=True):
        rec = rec | {k: None if rec[k] is None else rec[k] - origin for k in TIMES if k in rec}
        planned = {k: r[k] for k in PLANNED if k in r}  # a workload's request shape
        requests.append({"request": r["request"], "nonce": r["nonce"], "seed": r["seed"],
                         **({"planned": planned} if planned else {}), **rec})
    for st in stats:
        st["started"] -= origin
    client_cpu_s = sum(st["cpu_s"] for st in stats)
    t_start = min(r["t_sent_s"] for r in requests)
    t_end = max(r["t_done_s"] for r in requests)
    tokens = sum(r["output_tokens"] for r in requests)
    print(
        f"[{label}] position {position}: {kind}: {tokens} tokens in {t_end - t_start:.2f} s"
        f" = {tokens / (t_end - t_start):.1f} tok/s",
        file=log,
    )
    return {"arm": arm, "position": position, "control": bool(cell.get("control")),
            "t_start_s": t_start, "t_end_s": t_end, "client_cpu_s": client_cpu_s,
            "client": {"processes": stats}, "requests": requests,
            **({"open": cell["open"]} if cell.get("open") else {}),
            **({"placement": placement} if placement["before"] is not None else {})}


def run_rep(conn: Connection, plan: dict, rep_entry: dict, settings: dict, code: dict,
            log=sys.stderr, thermal_sources=(), host=None, client: dict | None = None,
            telemetry: dict | None = None, local_energy=((), {})) -> dict:
    """Measure one rep and return its raw record (the caller writes it atomically).

    Background samplers record the machine's thermal state and, with a ``host`` source, what the
    rest of the machine was doing (slotbench.measure.hostload), every ``thermal_interval_s`` of the
    measurement ``settings`` from before the warm-up to the end of the last cell; their
    ``cooldown_s`` lets the machine settle before the rep starts. ``client``
    (resolved ``client`` settings: processes, cpus) says how many client processes send the
    requests; the rep plan's shares split each cell over them. On a terminal, a progress line
    shows each cell as it runs (slotbench.measure.progress); never in ``log``. ``telemetry``
    (workflow.config.telemetry_settings) says which Prometheus endpoints are scraped around and
    during each cell, and how often; ``local_energy`` (readable sources, {name: why not}) adds
    this machine's energy counters (slotbench.measure.energy.local_sources). The warm-up is
    never scraped.
    """
    ctx = {"target": plan["target"], "run": plan["run"], "rep": rep_entry["rep"]}
    label = f"{ctx['target']} {ctx['run']} rep {ctx['rep']}"
    cooldown_s = float(settings["cooldown_s"])
    if cooldown_s > 0:
        print(f"[{label}] cooling down for {cooldown_s:g} s", file=log)
        time.sleep(cooldown_s)
    started_unix = time.time()
    interval_s = float(settings["thermal_interval_s"])
    sampler = Sampler(list(thermal_sources), interval_s=interval_s, tags=ctx)
    host_sampler = Sampler([host] if host else [], interval_s=interval_s, tags=ctx,
                           kind="host")
    client = client or {}
    processes = max([len(c.get("shares") or [1]) for c in rep_entry["cells"]]
                    + [len(rep_entry.get("warmup_shares") or [1])])
    try:
        clients = Clients(conn.backend, conn.target, conn.backend.base_url,
                          conn.backend.timeout_s, processes, client.get("cpus"))
    except Exception as exc:  # noqa: BLE001 - a client process that cannot start fails the rep
        raise _failure(ctx, None, None, None, exc, conn) from exc
    readable, unreadable = local_energy
    sources = telemetry_sources(conn.backend.base_url, telemetry or {}, readable, unreadable)
    interval = float(defaults.value(telemetry, "telemetry.interval_s"))
    # in a process of its own: fetching and parsing never hold the client's GIL
    scraper = ScraperProcess([s["name"] for s in sources if s["scraped"] and s["role"] != "local"],
                             interval, local=[s.name for s in readable],
                             client_cpus=(client or {}).get("cpus"))
    with sampler, host_sampler, clients, scraper, Progress(label) as progress:
        warmup = _warm_up(conn, clients, rep_entry, settings, ctx, label, log)
        origin = time.monotonic()
        origin_unix = time.time()
        scraper.origin = origin
        cells = [_measure_cell(conn, clients, cell, settings, origin, ctx, label, log, progress,
                               scraper)
                 for cell in rep_entry["cells"]]
        loop = cells[0]["client"]["processes"][0].get("loop") if cells else None
    conn.rep_measured()
    return {
        "schema": RAW_SCHEMA,
        "target": ctx["target"],
        "run": ctx["run"],
        "rep": ctx["rep"],
        "order": rep_entry["order"],
        "started_unix": started_unix,
        "origin_unix": origin_unix,
        "finished_unix": time.time(),
        "cooldown_s": cooldown_s,
        "warmup": warmup,
        "settings": settings,
        "code": code,
        "server": conn.describe(),
        "thermal": {"sources": [s.name for s in thermal_sources], "rows": sampler.rows()},
        "telemetry": {"interval_s": interval, "sources": sources,
                      "scrapes": scraper.records()},
        "host": {"sources": [host.name] if host else [], "rows": host_sampler.rows()},
        "client": {"processes": processes, "cpus": client.get("cpus"), "loop": loop,
                   "gc": "frozen and disabled during each cell"},
        "cells": cells,
    }


__all__ = ["run_rep", "RepError", "BackendError"]
