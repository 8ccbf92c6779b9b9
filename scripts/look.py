"""Rule look (a checkpoint): after a rotation block of a sequential experiment (reps: auto), the
sequential intervals of the reps so far and whether to measure another block (logic in
slotbench.checks.stopping). The raw files are consolidated here as consolidation does, so the
look decides from exactly the cells the analysis later reads."""

import pyarrow as pa

from slotbench.analysis.analyse import headline_ratios
from slotbench.checks.stopping import look_rows, progress_line
from slotbench.core.entry import fail, progress_log
from slotbench.measure.rawfiles import RawFileChanged, write_json_atomic
from slotbench.tables.consolidate import (CELLS_SCHEMA, RawFileError, consolidate_all,
                                          split_control, verify_raw_files)


def main(sm) -> None:
    look = int(sm.wildcards.look)
    settings = dict(sm.params.stopping)
    with progress_log(sm.log[0]) as log:
        raw = list(sm.input.raw)
        try:
            recorded = verify_raw_files(raw, list(sm.input.sha256))
            cells, _ = split_control(consolidate_all(raw, recorded)["cells"])
            # the types cells.parquet gives them
            cells = pa.Table.from_pandas(cells, schema=CELLS_SCHEMA,
                                         preserve_index=False).to_pandas()
            ratios = headline_ratios(cells)
        except (RawFileChanged, RawFileError, ValueError) as exc:
            fail(f"look {look}: {exc}", log)
        rows, decision, reasons = look_rows(ratios, cells, look, settings,
                                            dict(sm.params.checks))
        print(progress_line(rows, decision, look, settings, int(sm.params.runs_targets)),
              file=log)
        for reason in reasons:
            print(f"look {look}: not yet precise: {reason}", file=log)
        write_json_atomic(sm.output[0], {"look": look, "decision": decision,
                                         "reps_per_run": look * settings["block"],
                                         "reasons": reasons, "rows": rows})


main(snakemake)  # noqa: F821 - provided by Snakemake
