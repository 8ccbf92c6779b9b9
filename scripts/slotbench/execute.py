"""Run one rep: warm up, then every arm in the rep's planned order, and record every request.

An arm of concurrency N sends the cell's requests with at most N in flight: a worker pool of N
threads takes the next request as soon as one finishes, so every arm does the same work.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from .backends import BackendError
from .rawfiles import RAW_SCHEMA
from .sampler import Sampler
from .targets import Connection


class RepError(RuntimeError):
    """A request failed, so the rep it belongs to is not recorded."""


def _send_all(conn: Connection, requests: list[dict], concurrency: int, num_predict: int,
              temperature: float) -> list:
    """Send ``requests`` with ``concurrency`` in flight; on the first failure, stop sending.

    Returns a list aligned with ``requests``: RequestRecord, or (index, exception) for the
    first failure.
    """
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [
            pool.submit(conn.backend.generate, r["prompt"], num_predict, temperature, r["seed"],
                        **({"allow_cache": True} if r.get("allow_cache") else {}))
            for r in requests
        ]  # fmt: skip
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:  # an interrupt: end the streams in flight, keep nothing
            _stop(futures, conn)
            raise
        failed = [i for i, f in enumerate(futures) if f in done and f.exception() is not None]
        if failed:
            _stop(futures, conn)
            return [(failed[0], futures[failed[0]].exception())]
        return [f.result() for f in futures]


def _stop(futures: list, conn: Connection) -> None:
    """The rep stops: requests not yet sent are not sent, and those in flight are ended."""
    for f in futures:
        f.cancel()
    conn.backend.abort()


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
    return RepError(msg)


def _warm_up(conn: Connection, warm: list[dict], settings: dict, ctx: dict, label: str,
             log) -> None:
    """Load the model, then short generations on every slot; nothing here is measured."""
    t0 = time.monotonic()
    try:
        conn.backend.load()
    except Exception as exc:  # noqa: BLE001 - any failure here fails the rep, named
        raise _failure(ctx, None, None, None, exc, conn) from exc
    results = _send_all(conn, warm, len(warm), settings["warmup_predict"], settings["temperature"])
    if isinstance(results[0], tuple):
        i, exc = results[0]
        raise _failure(ctx, None, None, warm[i]["request"], exc, conn)
    print(f"[{label}] warm-up: {len(warm)} requests in {time.monotonic() - t0:.1f} s", file=log)


def _measure_cell(conn: Connection, cell: dict, settings: dict, origin: float, ctx: dict,
                  label: str, log) -> dict:
    """One cell: its requests with ``arm`` in flight, and the client's own CPU time meanwhile."""
    arm, position = cell["arm"], cell["position"]
    cpu0 = time.process_time()
    results = _send_all(conn, cell["requests"], arm, settings["num_predict"],
                        settings["temperature"])
    client_cpu_s = time.process_time() - cpu0
    if isinstance(results[0], tuple):
        i, exc = results[0]
        raise _failure(ctx, arm, position, cell["requests"][i]["request"], exc, conn)
    requests = [
        {"request": r["request"], "nonce": r["nonce"], "seed": r["seed"], **rec.to_raw(origin)}
        for r, rec in zip(cell["requests"], results, strict=True)
    ]
    t_start = min(r["t_sent_s"] for r in requests)
    t_end = max(r["t_done_s"] for r in requests)
    tokens = sum(r["output_tokens"] for r in requests)
    kind = "control arm (shared prompt)" if cell.get("control") else f"arm {arm}"
    print(
        f"[{label}] position {position}: {kind}: {tokens} tokens in {t_end - t_start:.2f} s"
        f" = {tokens / (t_end - t_start):.1f} tok/s",
        file=log,
    )
    return {"arm": arm, "position": position, "control": bool(cell.get("control")),
            "t_start_s": t_start, "t_end_s": t_end, "client_cpu_s": client_cpu_s,
            "requests": requests}  # fmt: skip


def run_rep(conn: Connection, plan: dict, rep_entry: dict, settings: dict, code: dict,
            log=sys.stderr, thermal_sources=(), thermal_interval_s: float = 1.0,
            host=None) -> dict:
    """Measure one rep and return its raw record (the caller writes it atomically).

    Background samplers record the machine's thermal state and, with a ``host`` source, what the
    rest of the machine was doing (slotbench.hostload), from before the warm-up to the end of
    the last cell; an optional cooldown lets the machine settle before the rep starts.
    """
    ctx = {"target": plan["target"], "run": plan["run"], "rep": rep_entry["rep"]}
    label = f"{ctx['target']} {ctx['run']} rep {ctx['rep']}"
    cooldown_s = float(settings.get("cooldown_s", 0) or 0)
    if cooldown_s > 0:
        print(f"[{label}] cooling down for {cooldown_s:g} s", file=log)
        time.sleep(cooldown_s)
    started_unix = time.time()
    sampler = Sampler(list(thermal_sources), interval_s=thermal_interval_s, tags=ctx)
    host_sampler = Sampler([host] if host else [], interval_s=thermal_interval_s, tags=ctx,
                           kind="host")  # fmt: skip
    with sampler, host_sampler:
        _warm_up(conn, rep_entry["warmup"], settings, ctx, label, log)
        origin = time.monotonic()
        origin_unix = time.time()
        cells = [_measure_cell(conn, cell, settings, origin, ctx, label, log)
                 for cell in rep_entry["cells"]]  # fmt: skip
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
        "settings": settings,
        "code": code,
        "server": conn.describe(),
        "thermal": {"sources": [s.name for s in thermal_sources], "rows": sampler.rows()},
        "host": {"sources": [host.name] if host else [], "rows": host_sampler.rows()},
        "cells": cells,
    }


__all__ = ["run_rep", "RepError", "BackendError"]
