"""Rule checks: deviance, rotation bias, serialisation and the verdict (logic in slotbench.checks)."""

import json

import pandas as pd

from slotbench.checks import deviance, rotation_bias, serialisation, verdict
from slotbench.entry import progress_log


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        cells = pd.read_parquet(sm.input.cells)
        requests = pd.read_parquet(sm.input.requests)
        rotation, dev = float(sm.params.rotation_threshold), float(sm.params.deviance_threshold)
        deviance(cells, dev).to_csv(sm.output.deviance, index=False)
        rotation_bias(cells, rotation)[0].to_csv(sm.output.positions, index=False)
        serialisation(requests).to_csv(sm.output.serialisation, index=False)
        result = verdict(cells, rotation, dev, requests)
        with open(sm.output.verdict, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2, sort_keys=True)
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


main(snakemake)  # noqa: F821 - provided by Snakemake
