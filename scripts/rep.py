"""Rule rep: measure one rep against its target, write the raw file atomically and record its
SHA-256 (computed from the bytes written) next to it."""

from pathlib import Path

from slotbench.core.entry import fail, progress_log
from slotbench.core.experiments import split
from slotbench.measure.backends import BackendError
from slotbench.measure.energy import local_sources
from slotbench.measure.execute import RepError, run_rep
from slotbench.measure.fingerprint import pipeline_version
from slotbench.measure.hostload import host_source
from slotbench.measure.plan import context_problem, make_rep_plan
from slotbench.measure.rawfiles import check_free_space, read_json, restore_unsaved, save_raw
from slotbench.measure.servers.base import ServerError
from slotbench.measure.targets import connect
from slotbench.measure.thermal import available_sources
from slotbench.measure.workload import load_trace, trace_changed
from slotbench.workflow import config as sbconfig
from slotbench.workflow import measuring


def main(sm) -> None:
    target, run, rep = sm.wildcards.target, sm.wildcards.run, int(sm.wildcards.rep)
    settings = dict(sm.params.settings)
    # where telemetry is scraped: from the config, not params, so it re-measures nothing
    telemetry = sbconfig.telemetry_settings(sbconfig.resolve(dict(sm.config)), target)
    plan = read_json(sm.input.plan)
    raw_dir = Path(sm.output.raw).parent
    kept = len(list(raw_dir.glob("rep*.json"))) if raw_dir.is_dir() else 0
    interrupted = (f"rep {rep} of {target}/{run} was discarded (no raw file written) and its "
                   f"server stopped; the {kept} reps already measured are kept")
    log_dir = Path(sm.log.progress).parent
    results = split(sm.output.raw)[0]  # the experiment's folder
    job = {"experiment": Path(results).name, "target": target, "run": run, "rep": rep}
    with progress_log(sm.log.progress, on_interrupt=interrupted) as log:
        # a rep measured by an earlier run whose raw file could not be written (disk full)
        expect = {"target": target, "run": run, "rep": rep,
                  "experiment": dict(sm.params.experiment)}
        try:
            restored = restore_unsaved(sm.output.raw, log_dir, expect)
        except OSError as exc:
            fail(f"target {target}, run {run}, rep {rep}: the rep measured earlier and kept "
                 f"elsewhere still cannot be written to {sm.output.raw} ({exc.strerror or exc}); "
                 "free some space and rerun", log)
        if restored:
            digest, kept_at = restored
            print(f"[{target} {run} rep {rep}] put the rep kept in {kept_at} in place as "
                  f"{sm.output.raw} (SHA-256 {digest}); nothing was measured again", file=log)
            return
        space = check_free_space(raw_dir)
        if space is not None:
            fail(f"target {target}, run {run}, rep {rep}: {space}", log)
        try:
            # another experiment's job measuring on this server (another Snakemake) goes first
            with (measuring.held(sm.params.target, job, log),
                  connect(sm.params.target, sm.log.server, settings["request_timeout_s"],
                          run=run, results=results) as conn):
                client = dict(sm.params.client)
                trace = load_trace(plan["workload"]) if plan.get("workload") else None
                changed = trace_changed(plan)
                if changed:
                    fail(f"target {target}, run {run}, rep {rep}: {changed}", log)
                problem = context_problem(plan, settings["num_predict"],
                                          conn.backend.slot_context(), trace)
                if problem:
                    fail(f"target {target}, run {run}, rep {rep}: {problem}", log)
                # a workload's output lengths: pinned where the backend can, else ceilings
                pin = bool(plan.get("workload")) and conn.backend.pin_outputs()
                entry = make_rep_plan(plan, rep, conn.backend.tokenizer(),
                                      client_processes=client["processes"], pin=pin,
                                      trace=trace)
                raw = run_rep(conn, plan, entry, settings, pipeline_version(), log=log,
                              thermal_sources=available_sources(),
                              host=host_source(conn), client=client,
                              telemetry=telemetry, local_energy=local_sources())
        except (RepError, ServerError, BackendError, RuntimeError, ValueError) as exc:
            fail(str(exc) if isinstance(exc, RepError) else
                 f"target {target}, run {run}, rep {rep}: {exc}", log, cause=exc)
        raw["experiment"] = dict(sm.params.experiment)
        digest, problem = save_raw(sm.output.raw, raw, log_dir)
        if problem:
            fail(f"target {target}, run {run}, rep {rep}: {problem}", log)
        print(f"[{target} {run} rep {rep}] raw file {sm.output.raw}, SHA-256 {digest}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
