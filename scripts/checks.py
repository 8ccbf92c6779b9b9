"""Rule checks: deviance, rotation bias, serialisation and the verdict (slotbench.checks), plus
the measurement-integrity checks: prompt lengths and cache hits (slotbench.prompts), thermal
state and drift (slotbench.thermal), the client's self-check (slotbench.selfcheck) and the
sufficiency of the reps (slotbench.sufficiency)."""

import json

import pandas as pd

from slotbench import prompts, selfcheck, sufficiency, thermal
from slotbench.checks import deviance, rotation_bias, serialisation, verdict
from slotbench.entry import progress_log

CELL_KEYS = ["target", "run", "rep", "arm", "position"]


def write_json(path, data) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)


def integrity(sm, cells: pd.DataFrame, requests: pd.DataFrame, log) -> None:
    p = sm.params
    prompts.prompt_lengths(requests).to_csv(sm.output.prompts, index=False)
    hits = prompts.cache_hits(requests)
    hits.to_csv(sm.output.cache_hits, index=False)
    control = pd.read_parquet(sm.input.control)
    prompts.control_effect(control, cells).to_csv(sm.output.control, index=False)
    samples = pd.read_parquet(sm.input.thermal)
    thermal.thermal_summary(samples).to_csv(sm.output.thermal, index=False)
    thermal.burst_vs_plateau(cells).to_csv(sm.output.burst, index=False)
    client = {}
    for target, req in requests[~requests["control"]].groupby("target"):
        cpu = cells.loc[cells["target"] == target, CELL_KEYS + ["client_cpu_s"]]
        client[target] = selfcheck.verdict(req, cpu, p.send_lag_s, p.client_cpu_share)
        print(f"checks: {target}: client self-check: {client[target]['sentence']}", file=log)
    write_json(sm.output.client, client)
    summary = pd.read_csv(sm.input.summary)
    suff = sufficiency.sufficiency(summary, target_rel=p.precision)
    suff.to_csv(sm.output.sufficiency, index=False)
    print(f"checks: {len(hits)} cache hits, {len(samples)} thermal readings, "
          f"{int((~suff['meets']).sum())} of {len(suff)} metrics short of ±{p.precision:.0%}",
          file=log)  # fmt: skip


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        cells = pd.read_parquet(sm.input.cells)
        requests = pd.read_parquet(sm.input.requests)
        measured = requests[~requests["control"]]
        rotation, dev = float(sm.params.rotation_threshold), float(sm.params.deviance_threshold)
        deviance(cells, dev).to_csv(sm.output.deviance, index=False)
        rotation_bias(cells, rotation)[0].to_csv(sm.output.positions, index=False)
        serialisation(measured).to_csv(sm.output.serialisation, index=False)
        result = verdict(cells, rotation, dev, measured)
        write_json(sm.output.verdict, result)
        for target, info in result["targets"].items():
            status = f"REFUSED: {info['reason']}" if info["refused"] else "headline allowed"
            bias, deviant = info["rotation_bias"], info["deviant_cells"]
            print(
                f"checks: {target}: rotation bias {bias:.1%}, {deviant} deviant cells; {status}",
                file=log,
            )
            for arm, ser in info.get("serialisation", {}).items():
                if ser["serialised"]:
                    print(f"checks: {target}: arm {arm} SERIALISED: {ser['cause']}", file=log)
        integrity(sm, cells, requests, log)


main(snakemake)  # noqa: F821 - provided by Snakemake
