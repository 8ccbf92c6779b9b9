"""Trap: prompts of unequal length in tokens (docs/method.md#nonces).

Every request carries its own nonce and prompt length *in tokens* is held equal, so that every
arm does the same prefill work. This check verifies the equality from the prompt lengths the
server reported; a request whose length differs from its run's mode is named. A workload's
request (docs/workloads.md) has a planned length of its own: it is held to that instead, and one
whose server-reported length differs from its plan is named with the difference.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged, not_assessable, records
from slotbench.core import stats
from slotbench.core.cells import label_series
from slotbench.core.fmt import count

TRAP = "prompts"
TITLE = "Unequal prompt lengths"
ORDER = 40
TABLES = ("prompts",)

REQUEST_KEYS = ["target", "run", "rep", "arm", "position", "request"]
LENGTH_COLUMNS = REQUEST_KEYS + ["prompt_tokens", "modal_prompt_tokens", "cell",
                                 "planned_input_tokens"]


def modal_lengths(requests: pd.DataFrame) -> pd.Series:
    """Modal server-reported prompt length per (target, run)."""
    req = requests.dropna(subset=["prompt_tokens"])
    return req.groupby(["target", "run"])["prompt_tokens"].agg(stats.mode)


def prompt_lengths(requests: pd.DataFrame) -> pd.DataFrame:
    """Measured requests whose server-reported prompt length differs from their run's mode."""
    if "control" in requests:
        requests = requests[~requests["control"].fillna(False).astype(bool)]
    requests = first_turns(requests)
    req = requests.dropna(subset=["prompt_tokens"])
    if req.empty:
        return pd.DataFrame(columns=LENGTH_COLUMNS)
    planned = (req["planned_input_tokens"] if "planned_input_tokens" in req
               else pd.Series(pd.NA, index=req.index, dtype="Int64"))
    req = req.assign(planned_input_tokens=planned)
    # a workload's requests are held to their own plan, the article's to their run's mode
    by_mode = req[req["planned_input_tokens"].isna()]
    req = req.join(modal_lengths(by_mode).rename("modal_prompt_tokens"), on=["target", "run"])
    expected = req["planned_input_tokens"].astype("Float64").fillna(
        req["modal_prompt_tokens"].astype("Float64"))
    odd = req[req["prompt_tokens"].astype("Float64") != expected].copy()
    odd["cell"] = label_series(odd) if not odd.empty else pd.Series(dtype=object)
    return odd[LENGTH_COLUMNS].reset_index(drop=True)


def first_turns(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests whose prompt length was planned: a conversation's later turns carry its
    history, which the server counts as it was generated, so only its first turn is held."""
    if "turn" not in requests:
        return requests
    return requests[~(requests["turn"].fillna(0) > 0)]


def plan_tokenizer(fps: list[dict]) -> list[str]:
    """What counted prompt tokens when the plan equalised lengths, as the fingerprints say."""
    said = set()
    for fp in fps:
        measurement = (fp.get("config") or {}).get("measurement") or {}
        for value in ((fp.get("plan") or {}).get("tokenizer"), measurement.get("tokenizer")):
            if value is not None:
                said.add(str(value))
    return sorted(said)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    requests = tables.measured_requests
    table = prompt_lengths(requests)
    verdicts = []
    for target in tables.targets:
        req = first_turns(requests[requests["target"] == target])
        n_req = int(req["prompt_tokens"].notna().sum()) if "prompt_tokens" in req else 0
        modal = {str(run): int(v) for (_, run), v in modal_lengths(req).items()} if n_req else {}
        rows = table[table["target"] == target].sort_values(["run", "rep", "position", "request"])
        evidence = {"modal_prompt_tokens": modal, "measured_requests": n_req,
                    "tokenizer": plan_tokenizer(tables.fingerprints_of(target)),
                    "rows": records(rows)}
        if not n_req:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "the server reported no prompt lengths",
                "The server reported no prompt token counts, so equal prompt length cannot be "
                "verified.", evidence=evidence,
            ))
            continue
        values = sorted(set(modal.values()))
        counted = f" ({count(n_req, 'measured request')})"
        planned = (req["planned_input_tokens"].notna() & req["prompt_tokens"].notna()
                   if "planned_input_tokens" in req else pd.Series(False, index=req.index))
        if planned.all():  # a workload: every request held to its own planned length
            evidence["planned_lengths"] = True
            summary = _planned_summary(rows, n_req)
        elif rows.empty:
            summary = (f"all prompts {values[0]} tokens{counted}" if len(values) == 1 else
                       "all prompts equal within their run ("
                       + ", ".join(f"{m} tokens in {run}" for run, m in modal.items())
                       + f"){counted}")
        else:
            first, k = rows.iloc[0], len(rows)
            summary = (
                f"{count(k, 'request')} of {n_req} differ{'s' if k == 1 else ''} from "
                f"{'its' if k == 1 else 'their'} run's modal length (e.g. {first['cell']} request "
                f"{int(first['request'])}: {int(first['prompt_tokens'])} tokens, modal "
                f"{int(first['modal_prompt_tokens'])})"
            )
        verdicts.append(judged(
            TRAP, TITLE, target, len(rows), summary,
            f"Prompt length: {summary}, as the server counted them.", evidence=evidence,
            cells=sorted(set(rows["cell"])),
        ))
    return verdicts, {"prompts": table}


def _planned_summary(rows: pd.DataFrame, n_req: int) -> str:
    """A workload's prompt lengths against their plans, in one phrase."""
    if rows.empty:
        return f"every prompt its planned length ({count(n_req, 'measured request')})"
    diff = (rows["prompt_tokens"] - rows["planned_input_tokens"]).astype(float)
    first, k = rows.iloc[0], len(rows)
    return (f"{count(k, 'request')} of {n_req} differ{'s' if k == 1 else ''} from "
            f"{'its' if k == 1 else 'their'} planned length, by up to {diff.abs().max():.0f} "
            f"tokens (e.g. {first['cell']} request {int(first['request'])}: "
            f"{int(first['prompt_tokens'])} tokens, planned {int(first['planned_input_tokens'])})")
