"""Rule figures: draw the report's figures and record the cells behind each one (logic in
slotbench.figures.plots, for the open loop slotbench.figures.openloop and, for a grid of workloads,
slotbench.figures.frontier); only cells whose server
numbers held up against the client, in reps whose serial cell held up too, are drawn (the
cells behind the headline: slotbench.tables.consolidate.headline_cells)."""

import json
from pathlib import Path

import pandas as pd

from slotbench.checks import read_verdicts
from slotbench.core.entry import fail, progress_log
from slotbench.figures import frontier, openloop, plots


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        paths = {fid: Path(getattr(sm.output, fid)) for fid in plots.FIGURE_IDS}
        # the open loop's figures, where the rule declares them
        open_paths = {fid: Path(getattr(sm.output, fid)) for fid in openloop.FIGURE_IDS
                      if hasattr(sm.output, fid)}
        outdirs = {p.parent for p in (paths | open_paths).values()}
        if len(outdirs) != 1:
            fail(f"figures: all figure outputs must share one directory, got "
                 f"{sorted(map(str, outdirs))}", log)
        outdir = outdirs.pop()
        sources = plots.make_all(
            pd.read_parquet(sm.input.cells), pd.read_parquet(sm.input.ratios),
            outdir, files={fid: p.name for fid, p in paths.items()},
            thermal=pd.read_parquet(sm.input.thermal),
            capacity=json.loads(Path(sm.input.capacity).read_text()),
            summary=pd.read_csv(sm.input.summary),
            server_metrics=(pd.read_parquet(sm.input.server_metrics)
                            if hasattr(sm.input, "server_metrics") else None),
        )
        if open_paths:
            sources |= openloop.make_open(
                json.loads(Path(sm.input.openloop).read_text()), outdir,
                files={fid: p.name for fid, p in open_paths.items()},
                verdicts=read_verdicts(sm.input.checks) if hasattr(sm.input, "checks") else None,
            )
        if hasattr(sm.output, "frontier"):  # a grid of workloads
            sources |= frontier.make_frontier(
                json.loads(Path(sm.input.frontier).read_text()), outdir,
                Path(sm.output.frontier).name)
        Path(sm.output.sources).write_text(json.dumps(sources, indent=2) + "\n")
        print(f"figures: {len(sources)} figures", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
