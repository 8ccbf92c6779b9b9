"""Rule stopped: the look that stopped a sequential experiment (reps: auto), its decision and
the reps a run it measured, as one small file every block's consolidation reads."""

from slotbench.core.entry import progress_log
from slotbench.measure.rawfiles import read_json, write_json_atomic


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        look = read_json(sm.input[0])
        stop = {k: look[k] for k in ("look", "decision", "reps_per_run", "reasons")}
        write_json_atomic(sm.output[0], stop)
        print(f"stopped: look {stop['look']}, {stop['decision']}, {stop['reps_per_run']} reps a "
              "run", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
