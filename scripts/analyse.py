"""Rule analyse: within-rep ratios and the per-arm summary (logic in slotbench.analysis.analyse),
the capacity under the service levels (slotbench.analysis.capacity) and the open loop's numbers with
the capacity in requests/s (slotbench.analysis.openloop), a workload's lengths
(slotbench.analysis.workload) and a grid of workloads' frontier (slotbench.analysis.frontier)."""

import json
from pathlib import Path

import pandas as pd

from slotbench.analysis import capacity, frontier, openloop, workload
from slotbench.analysis.analyse import (BOOTSTRAPPED, headline_ratios, sequential_summary,
                                        summarise, with_costs)
from slotbench.checks import stopping
from slotbench.core.entry import fail, progress_log
from slotbench.measure.rawfiles import json_bytes


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        try:
            cells = pd.read_parquet(sm.input.cells)
            ratios = with_costs(headline_ratios(cells), dict(sm.params.prices))
        except ValueError as exc:
            fail(f"analyse: {exc}", log)
        summary = summarise(ratios, int(sm.params.n_boot), float(sm.params.ci), int(sm.params.seed))
        if hasattr(sm.output, "stopping"):  # reps: auto: intervals valid though they stopped it
            summary = sequential_summary(summary, ratios, float(sm.params.ci),
                                                  BOOTSTRAPPED)
            looks = stopping.trail(ratios, cells, dict(sm.params.stopping),
                                   dict(sm.params.checks))
            looks.to_csv(sm.output.stopping, index=False)
            print(f"analyse: {looks['look'].nunique()} looks, the last: "
                  f"{looks['look_decision'].iloc[-1] if len(looks) else 'none'}", file=log)
        ratios.to_parquet(sm.output.ratios, index=False)
        summary.to_csv(sm.output.summary, index=False)
        boot = (int(sm.params.n_boot), float(sm.params.ci), int(sm.params.seed))
        assessed = capacity.assess(ratios, dict(sm.params.slo), *boot)
        with open(sm.output.capacity, "wb") as fh:
            fh.write(json_bytes(assessed))  # NaN (an interval that could not be drawn) as null
        if hasattr(sm.output, "openloop"):  # only the rate arms' requests are read
            requests = pd.read_parquet(sm.input.requests, filters=[("arm", "<", 0)])
            opened = openloop.assess(ratios, requests, dict(sm.params.slo), *boot)
            with open(sm.output.openloop, "wb") as fh:
                fh.write(json_bytes(opened))
        if hasattr(sm.output, "workload"):  # a workload's lengths, beside its trace's
            plans = [json.loads(Path(p).read_text()) for p in sm.input.plans]
            lengths = workload.assess(pd.read_parquet(sm.input.requests), plans,
                                      dict(sm.params.workloads))
            with open(sm.output.workload, "wb") as fh:
                fh.write(json_bytes(lengths))
        if hasattr(sm.output, "frontier"):  # a grid: its workloads side by side
            front = frontier.assess(summary, dict(sm.params.workloads), float(sm.params.ci))
            with open(sm.output.frontier, "wb") as fh:
                fh.write(json_bytes(front))
        print(f"analyse: {len(ratios)} cells -> {len(summary)} (target, arm) rows", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
