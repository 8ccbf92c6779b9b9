"""Rule consolidate: raw rep files → results/requests.parquet and results/cells.parquet."""

import json

from slotbench.consolidate import (
    CELLS_SCHEMA,
    REQUESTS_SCHEMA,
    consolidate,
    server_states,
    write_table,
)
from slotbench.entry import progress_log


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        requests, cells = consolidate(list(sm.input.raw))
        write_table(requests, REQUESTS_SCHEMA, sm.output.requests, "requests")
        write_table(cells, CELLS_SCHEMA, sm.output.cells, "cells")
        with open(sm.output.servers, "w", encoding="utf-8") as fh:
            json.dump(server_states(list(sm.input.raw)), fh, indent=1, sort_keys=True)
        print(f"consolidate: {len(sm.input.raw)} raw files, {len(cells)} cells, "
              f"{len(requests)} requests", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
