"""Rule paired: the paired design's comparison of every target with the first, pair by pair,
into results/<experiment>/analysis/paired.json and its figure (logic in
slotbench.analysis.paired)."""

import json
from pathlib import Path

import pandas as pd

from slotbench.analysis import paired
from slotbench.core.entry import progress_log
from slotbench.figures.paired import plot
from slotbench.measure.rawfiles import json_bytes


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        cells = pd.read_parquet(sm.input.cells, columns=["target", "run", "rep", "arm", "agg_tps",
                                                         "t_start_unix"])
        decision = json.loads((Path(sm.input.checks) / "headline.json").read_text())
        planned = {str(run): {int(k): list(v) for k, v in pairs.items()}
                   for run, pairs in dict(sm.params.order).items()}
        result = paired.analyse(pd.read_parquet(sm.input.ratios), cells, list(sm.params.targets),
                                planned, decision, int(sm.params.n_boot), float(sm.params.ci),
                                int(sm.params.seed))
        Path(sm.output.json).write_bytes(json_bytes(result))
        plot(result, sm.output.figure)
        order = result["order"]
        print(f"paired: {len(result['comparisons'])} comparisons against {result['baseline']}, "
              f"{order['pairs_in_order']} of {result['pairs_planned']} pairs measured in their "
              f"planned order: {sm.output.json}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
