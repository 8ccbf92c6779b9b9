"""Rule resolved_config: the config as the rules see it (defaults filled, validated)."""

from pathlib import Path

from slotbench.archive import dump_config
from slotbench.entry import progress_log


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        out = Path(sm.output.config)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(dump_config(dict(sm.params.config)), encoding="utf-8")
        tmp.replace(out)
        print(f"resolved_config: {out}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
