"""Rule consolidate: raw rep files → results/requests.parquet and results/cells.parquet.

Every raw file is first checked against the SHA-256 recorded when it was written.
"""

import json
from pathlib import Path

from slotbench.consolidate import (
    CELLS_SCHEMA,
    HOST_SCHEMA,
    RawFileError,
    REQUESTS_SCHEMA,
    THERMAL_SCHEMA,
    consolidate_all,
    split_control,
    verify_raw_files,
    write_table,
)
from slotbench.entry import fail, progress_log
from slotbench.rawfiles import RawFileChanged, write_ledger


def refuse(message: str, withdraw: list[str], log) -> None:
    """Fail consolidation, and withdraw the report built from raw files that are now refused:
    a report that cites them must not stay published as if nothing had happened."""
    gone = [p for p in withdraw if Path(p).exists()]
    for path in gone:
        Path(path).unlink()
    if gone:
        message += (f" The report built from these raw files ({', '.join(gone)}) was withdrawn "
                    "until they are settled.")  # fmt: skip
    fail(f"consolidate: {message}", log)


def main(sm) -> None:
    raw = list(sm.input.raw)
    with progress_log(sm.log[0]) as log:
        try:
            recorded = verify_raw_files(raw, list(sm.input.sha256))
        except RawFileChanged as exc:
            refuse(str(exc), list(sm.params.withdraw), log)
        print(
            f"consolidate: {len(raw)} raw files match the SHA-256 recorded when they were "
            "written",
            file=log,
        )
        try:
            tables = consolidate_all(raw, recorded)  # each raw file read once
        except RawFileError as exc:
            refuse(str(exc), list(sm.params.withdraw), log)
        requests, cells, thermal, host = (tables[k] for k in ("requests", "cells", "thermal",
                                                              "host"))  # fmt: skip
        write_table(requests, REQUESTS_SCHEMA, sm.output.requests, "requests")
        cells, control = split_control(cells)
        write_table(cells, CELLS_SCHEMA, sm.output.cells, "cells")
        write_table(control, CELLS_SCHEMA, sm.output.control, "control cells")
        write_table(thermal, THERMAL_SCHEMA, sm.output.thermal, "thermal")
        write_table(host, HOST_SCHEMA, sm.output.host, "host")
        write_ledger(sm.output.inventory, raw, sm.params.token)
        with open(sm.output.servers, "w", encoding="utf-8") as fh:
            json.dump(tables["servers"], fh, indent=1, sort_keys=True)
        print(
            f"consolidate: {len(raw)} raw files, {len(cells)} cells ({len(control)} control), "
            f"{len(requests)} requests, {len(thermal)} thermal readings, {len(host)} host samples",
            file=log,
        )


main(snakemake)  # noqa: F821 - provided by Snakemake
