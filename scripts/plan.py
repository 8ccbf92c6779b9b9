"""Rule plan: a run's prompt calibration (the prompt's length in tokens, by the server's own
tokenizer). Each rep derives its own order, nonces and prompts from it (slotbench.measure.plan)."""

from pathlib import Path

from slotbench.core.entry import fail, progress_log
from slotbench.core.experiments import split
from slotbench.measure.backends import PROBE_TIMEOUT_S, BackendError
from slotbench.measure.plan import run_plan
from slotbench.measure.rawfiles import write_json_atomic
from slotbench.measure.servers.base import ServerError
from slotbench.measure.targets import connect
from slotbench.measure.traces import TraceError
from slotbench.measure.workload import WorkloadError, describe, load_trace
from slotbench.measure.workload import context_problem as workload_context_problem
from slotbench.workflow import measuring


def main(sm) -> None:
    target, run = sm.wildcards.target, sm.wildcards.run
    p = sm.params
    results = split(sm.output[0])[0]  # the experiment's folder
    job = {"experiment": Path(results).name, "target": target, "run": run, "job": "plan"}
    with progress_log(sm.log.progress) as log:
        try:  # a trace that cannot be read stops the plan before its server is asked anything
            trace = load_trace(p.workload) if getattr(p, "workload", None) else None
        except (WorkloadError, TraceError) as exc:
            fail(f"target {target}, run {run}, plan: {exc}", log)
        try:
            with (measuring.held(p.target, job, log),
                  connect(p.target, sm.log.server, PROBE_TIMEOUT_S, run=run,
                          results=results) as conn):
                plan = run_plan(
                    target, run, list(p.arms), p.requests_per_cell, p.seed,
                    p.prompt["template"], p.prompt["nonce_digits"],
                    count_tokens=conn.backend.tokenizer(), nonces=p.prompt["nonces"],
                    control_arm=p.control_arm, paired=getattr(p, "paired", False),
                    workload=getattr(p, "workload", None), trace=trace,
                )
                workload = getattr(p, "workload", None)
                if workload:  # the largest request must fit a slot: refused before any is sent
                    problem = workload_context_problem(workload, conn.backend.slot_context(),
                                                       trace)
                    if problem:
                        fail(f"target {target}, run {run}, plan: {problem}", log)
        except (ServerError, BackendError, WorkloadError, TraceError) as exc:
            fail(f"target {target}, run {run}, plan: {exc}", log, cause=exc)
        write_json_atomic(sm.output[0], plan)
        length = plan["prompt_tokens"]
        if plan.get("workload"):
            print(f"[{target} {run}] plan: workload {describe(plan['workload'])}; prompts built "
                  + ("to their exact lengths with the server's tokenizer"
                     if plan["vocabulary"] is not None else "to estimated lengths (the server "
                     "has no tokenizer endpoint)")
                  + "; each rep draws its requests from (seed, target, run, rep)", file=log)
        else:
            print(f"[{target} {run}] plan: every prompt is "
                  f"{'not counted' if length is None else f'{length} tokens'}; each rep derives "
                  "its own order, nonces and prompts from (seed, target, run, rep)", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
