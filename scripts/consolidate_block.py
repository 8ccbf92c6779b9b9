"""Rule consolidate_block: the raw files of one block of reps → that block's tables.

Every raw file is first checked against the SHA-256 recorded when it was written.
"""

from slotbench.core.entry import fail_and_withdraw, progress_log
from slotbench.measure.rawfiles import RawFileChanged, write_ledger
from slotbench.tables.consolidate import (
    RawFileError,
    consolidate_all,
    verify_raw_files,
    write_block,
)


def main(sm) -> None:
    raw = list(sm.input.raw)
    prefix = sm.output.meta.removesuffix(".json")
    with progress_log(sm.log[0]) as log:
        try:
            recorded = verify_raw_files(raw, list(sm.input.sha256))
            tables = consolidate_all(raw, recorded)  # each raw file read once
        except (RawFileChanged, RawFileError) as exc:
            fail_and_withdraw(f"consolidate: {exc}", list(sm.params.withdraw), log)
        write_block(tables, prefix)
        write_ledger(sm.output.inventory, raw, sm.params.token)
        where = f"{sm.wildcards.target}/{sm.wildcards.run} block {sm.wildcards.block}"
        counts = f"{len(tables['cells'])} cells, {len(tables['requests'])} requests"
        print(f"consolidate: {len(raw)} raw files of {where} verified: {counts}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
