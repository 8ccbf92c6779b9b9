"""Rule analyse: within-rep ratios and the per-arm summary (logic in slotbench.analyse)."""

import pandas as pd

from slotbench.analyse import cell_ratios, headline_cells, summarise
from slotbench.entry import fail, progress_log


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        try:
            ratios = cell_ratios(headline_cells(pd.read_parquet(sm.input.cells)))
        except ValueError as exc:
            fail(f"analyse: {exc}", log)
        summary = summarise(ratios, int(sm.params.n_boot), float(sm.params.ci), int(sm.params.seed))
        ratios.to_parquet(sm.output.ratios, index=False)
        summary.to_csv(sm.output.summary, index=False)
        print(f"analyse: {len(ratios)} cells -> {len(summary)} (target, arm) rows", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
