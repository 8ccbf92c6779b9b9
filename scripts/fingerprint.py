"""Rule fingerprint: record the machine, software, server and model behind one run."""

from pathlib import Path

from slotbench.core.entry import fail, progress_log
from slotbench.core.experiments import split
from slotbench.measure.backends import PROBE_TIMEOUT_S, BackendError
from slotbench.measure.fingerprint import fingerprint
from slotbench.measure.rawfiles import write_json_atomic
from slotbench.measure.servers.base import ServerError
from slotbench.measure.targets import connect
from slotbench.workflow import measuring


def main(sm) -> None:
    target, run = sm.wildcards.target, sm.wildcards.run
    recorded = {"target": sm.params.target, "measurement": dict(sm.params.measurement),
                "seed": sm.params.seed}
    results = split(sm.output[0])[0]  # the experiment's folder
    job = {"experiment": Path(results).name, "target": target, "run": run, "job": "fingerprint"}
    with progress_log(sm.log.progress) as log:
        try:
            with (measuring.held(sm.params.target, job, log),
                  connect(sm.params.target, sm.log.server, PROBE_TIMEOUT_S, run=run,
                          results=results) as conn):
                data = fingerprint(conn, target, run, recorded)
        except (ServerError, BackendError) as exc:
            fail(f"target {target}, run {run}, fingerprint: {exc}", log, cause=exc)
        write_json_atomic(sm.output[0], data)
        print(f"[{target} {run}] fingerprint: client host {data['client_host']['cpu_model']} "
              f"(the server on {data['server_host']['machine']}), "
              f"{data['server'].get('package_version', data['server'].get('backend'))}, "
              f"model {data['model'].get('quantisation')}", file=log)
        if data["model"].get("mismatch"):  # the report shows it too, before the headline
            print(f"[{target} {run}] warning: {data['model']['mismatch']}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
