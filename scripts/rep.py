"""Rule rep: measure one rep against its target, write the raw file atomically and record its
SHA-256 (computed from the bytes written) next to it."""

from pathlib import Path

from slotbench.backends import BackendError
from slotbench.entry import fail, progress_log
from slotbench.execute import RepError, run_rep
from slotbench.fingerprint import pipeline_version
from slotbench.hostload import host_source
from slotbench.plan import make_rep_plan
from slotbench.rawfiles import read_json, write_json_atomic, write_sha256_atomic
from slotbench.server import ServerError
from slotbench.targets import connect
from slotbench.thermal import available_sources


def main(sm) -> None:
    target, run, rep = sm.wildcards.target, sm.wildcards.run, int(sm.wildcards.rep)
    settings = dict(sm.params.settings)
    plan = read_json(sm.input.plan)
    with progress_log(sm.log.progress) as log:
        try:
            with connect(sm.params.target, sm.log.server, settings["request_timeout_s"]) as conn:
                entry = make_rep_plan(plan, rep, conn.backend.tokenizer())
                raw = run_rep(conn, plan, entry, settings, pipeline_version(), log=log,
                              thermal_sources=available_sources(),
                              thermal_interval_s=settings["thermal_interval_s"],
                              host=host_source(conn))
        except (RepError, ServerError, BackendError, RuntimeError) as exc:
            fail(str(exc) if isinstance(exc, RepError) else
                 f"target {target}, run {run}, rep {rep}: {exc}", log)
        raw["experiment"] = dict(sm.params.experiment)
        digest = write_json_atomic(sm.output.raw, raw)
        write_sha256_atomic(sm.output.sha256, digest, Path(sm.output.raw).name)
        print(f"[{target} {run} rep {rep}] raw file {sm.output.raw}, SHA-256 {digest}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
