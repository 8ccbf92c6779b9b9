"""Rule consolidate: every block's tables → results/<experiment>/requests.parquet,
results/<experiment>/cells.parquet and the other tables the later stages read (see rule
consolidate_block for the raw files)."""

import json

from slotbench.core.entry import fail_and_withdraw, progress_log
from slotbench.measure.rawfiles import merge_ledgers
from slotbench.tables.consolidate import (
    CELLS_SCHEMA,
    HOST_SCHEMA,
    RawFileError,
    REQUESTS_SCHEMA,
    THERMAL_SCHEMA,
    merge_blocks,
    telemetry,
    split_control,
    write_table,
)


def main(sm) -> None:
    prefixes = [path.removesuffix(".json") for path in sm.input.blocks]
    with progress_log(sm.log[0]) as log:
        try:
            tables = merge_blocks(prefixes)
        except RawFileError as exc:
            fail_and_withdraw(f"consolidate: {exc}", list(sm.params.withdraw), log)
        requests, cells, thermal, host = (tables[k] for k in ("requests", "cells", "thermal",
                                                              "host"))
        write_table(requests, REQUESTS_SCHEMA, sm.output.requests, "requests")
        cells, control = split_control(cells)
        write_table(cells, CELLS_SCHEMA, sm.output.cells, "cells")
        write_table(control, CELLS_SCHEMA, sm.output.control, "control cells")
        write_table(thermal, THERMAL_SCHEMA, sm.output.thermal, "thermal")
        write_table(host, HOST_SCHEMA, sm.output.host, "host")
        scraped = tables["server_metrics"]
        write_table(scraped, telemetry.SERVER_METRICS_SCHEMA, sm.output.server_metrics,
                    "server_metrics")
        n_raw = merge_ledgers(sm.output.inventory, list(sm.input.inventories), sm.params.token)
        with open(sm.output.servers, "w", encoding="utf-8") as fh:
            json.dump(tables["servers"], fh, indent=1, sort_keys=True)
        print(
            f"consolidate: {len(prefixes)} blocks of {n_raw} raw files, {len(cells)} cells "
            f"({len(control)} control), {len(requests)} requests, {len(thermal)} thermal "
            f"readings, {len(host)} host samples, {len(scraped)} telemetry samples",
            file=log,
        )


main(snakemake)  # noqa: F821 - provided by Snakemake
