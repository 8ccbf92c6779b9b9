"""Snakemake entry point: draw the report's figures and record the cells behind each one."""

import json
from pathlib import Path

import pandas as pd

from slotbench import figures


def main(snakemake) -> None:
    out = snakemake.output
    paths = {fid: Path(getattr(out, fid)) for fid in figures.FIGURE_IDS}
    outdirs = {p.parent for p in paths.values()}
    if len(outdirs) != 1:
        raise ValueError(
            f"figures: all figure outputs must share one directory, got {sorted(map(str, outdirs))}"
        )
    sources = figures.make_all(
        pd.read_parquet(snakemake.input.cells),
        pd.read_parquet(snakemake.input.ratios),
        outdirs.pop(),
        files={fid: p.name for fid, p in paths.items()},
        thermal=pd.read_parquet(snakemake.input.thermal),
    )
    Path(out.sources).write_text(json.dumps(sources, indent=2) + "\n")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake
