"""Trap: a cell whose output length strayed from its run's mode (docs/method.md#deviance).

num_predict is a ceiling and EOS usually wins, so cells rarely produce the same tokens. One
request that fails to stop moves wall clock and throughput in opposite directions; throughput
(tokens over the wall clock that produced them) is still right, but a wall-over-wall comparison
would book it as a concurrency effect. Every cell more than the threshold from its run's modal
tokens_out is named with its wall-clock and throughput effect.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged, records, setting
from slotbench.core import stats
from slotbench.core.cells import CELL_KEYS, label_series
from slotbench.core.fmt import count, fmt_pct

TRAP = "deviance"
TITLE = "Output deviance"
ORDER = 30
TABLES = ("deviance",)
CONFIG_KEY = "checks.deviance_threshold"

RUN_KEYS = ["target", "run"]
ARM_KEYS = RUN_KEYS + ["arm"]
DEVIANCE_COLUMNS = [
    "target", "run", "rep", "arm", "position",
    "tokens_out", "modal_tokens", "deviation",
    "wall_s", "wall_effect", "agg_tps", "tps_effect",
    "cell", "raw_file", "raw_sha256",
]


def modal_tokens(cells: pd.DataFrame) -> pd.Series:
    """Modal tokens_out per (target, run): what a normal cell of that run produced."""
    return cells.groupby(RUN_KEYS, sort=True)["tokens_out"].agg(stats.mode).rename("modal_tokens")


def deviance(cells: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Cells whose output differs from their run's mode by more than ``threshold``
    (checks.deviance_threshold).

    wall_effect and tps_effect compare each deviant cell with the median of the normal cells of
    the same target, run and arm, showing how far the extra (or missing) tokens moved it.
    """
    df = cells.merge(modal_tokens(cells).reset_index(), on=RUN_KEYS, how="left")
    df["deviation"] = (df["tokens_out"] - df["modal_tokens"]) / df["modal_tokens"]
    is_deviant = df["deviation"].abs() > threshold
    normal = (
        df.loc[~is_deviant]
        .groupby(ARM_KEYS)[["wall_s", "agg_tps"]]
        .agg(stats.median)
        .add_suffix("_normal")
        .reset_index()
    )
    out = df.loc[is_deviant].merge(normal, on=ARM_KEYS, how="left")
    out["wall_effect"] = out["wall_s"] / out["wall_s_normal"] - 1.0
    out["tps_effect"] = out["agg_tps"] / out["agg_tps_normal"] - 1.0
    out["cell"] = label_series(out) if not out.empty else pd.Series(dtype=object)
    out = out.sort_values(CELL_KEYS, ignore_index=True)
    return out.reindex(columns=DEVIANCE_COLUMNS)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    threshold = float(setting(settings, CONFIG_KEY))
    table = deviance(tables.cells, threshold)
    modal = modal_tokens(tables.cells)
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target].sort_values(["run", "rep", "arm"])
        n = len(rows)
        limit = fmt_pct(threshold)
        summary = (f"{count(n, 'cell')} more than {limit} from the modal output" if n
                   else f"no cell more than {limit} from the modal output")
        verdicts.append(judged(
            TRAP, TITLE, target, n, summary,
            (f"{count(n, 'cell')} deviate{'s' if n == 1 else ''} more than {limit} from "
                      f"{'its' if n == 1 else 'their'} run's modal output." if n else
                      f"No cell deviates more than {limit} from its run's modal output."),
            threshold=threshold, config_key=CONFIG_KEY,
            evidence={"rows": records(rows),
                      "modal_tokens": {str(run): int(v) for run, v in modal.loc[target].items()}},
            cells=list(rows["cell"]),
        ))
    return verdicts, {"deviance": table}
