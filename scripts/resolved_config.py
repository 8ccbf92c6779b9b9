"""Rule resolved_config: the config as the rules see it (defaults filled, validated)."""

from pathlib import Path

from slotbench.core.entry import progress_log
from slotbench.measure.rawfiles import write_text_atomic
from slotbench.workflow.archive import dump_config


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        out = Path(sm.output.config)
        write_text_atomic(out, dump_config(dict(sm.params.config), out))
        print(f"resolved_config: {out}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
