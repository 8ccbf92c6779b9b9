"""Trap: a workload's outputs that were not the length their plan asked for (docs/workloads.md).

A workload gives every request its own planned output length. Where the backend can pin it
(llama-server's ignore_eos with n_predict; an OpenAI-compatible server whose target says it
honours ignore_eos) every request must produce exactly that length, and one that did not is
named. Where it cannot (Ollama, a bare OpenAI API) the planned length is only a ceiling: a request
may stop early at its end-of-sequence token. Every arm of a rep sends the same shapes in the same
order, so the arms are compared request for request: an arm whose requests produced a share of
their planned tokens more than ``checks.deviance_threshold`` below the best arm's is named, with
its requests that stopped early. Only a workload's targets get a verdict: the article's outputs
have no planned length (num_predict is their ceiling, and Output deviance compares them).
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged, not_assessable, records, setting
from slotbench.core.cells import arm_name, label_series
from slotbench.core.fmt import count, fmt_pct

TRAP = "outputs"
TITLE = "Output lengths against the plan"
ORDER = 31
TABLES = ("outputs",)
CONFIG_KEY = "checks.deviance_threshold"
# every request's measured rows need these, and a cell label besides
REQUEST_KEYS = ["target", "run", "rep", "arm", "position", "request"]
COLUMNS = REQUEST_KEYS + ["output_tokens", "planned_output_tokens", "pinned", "cell"]


def planned_requests(requests: pd.DataFrame, target: str | None = None) -> pd.DataFrame:
    """The measured requests that carry a planned output length (a workload's)."""
    if "planned_output_tokens" not in requests:
        return requests.iloc[0:0]
    req = requests[requests["planned_output_tokens"].notna()]
    return req if target is None else req[req["target"] == target]


def applies(tables: Tables, target: str) -> bool:
    """Only a workload's target gets a verdict."""
    return not planned_requests(tables.measured_requests, target).empty


def arm_shares(req: pd.DataFrame) -> pd.Series:
    """Per arm, the share of the planned output tokens its requests produced."""
    sums = req.groupby("arm")[["output_tokens", "planned_output_tokens"]].sum()
    return (sums["output_tokens"] / sums["planned_output_tokens"]).sort_index()


def _table(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows = rows.sort_values(["run", "rep", "position", "request"]).copy()
    rows["cell"] = label_series(rows)
    return rows[COLUMNS].reset_index(drop=True)


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    threshold = float(setting(settings, CONFIG_KEY))
    verdicts, tables_out = [], []
    for target in tables.targets:
        req = planned_requests(tables.measured_requests, target)
        if req.empty:
            continue
        counted = req.dropna(subset=["output_tokens"])
        if counted.empty:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "the server reported no output lengths",
                "The server reported no output token counts, so the outputs cannot be held to "
                "their planned lengths.", evidence={"requests": len(req)}))
            continue
        if counted["pinned"].fillna(False).astype(bool).all():
            verdict, rows = _pinned(target, counted)
        else:
            verdict, rows = _ceilings(target, counted, threshold)
        verdicts.append(verdict)
        tables_out.append(rows)
    table = pd.concat(tables_out, ignore_index=True) if tables_out else _table(pd.DataFrame())
    return verdicts, {"outputs": table}


def _pinned(target: str, req: pd.DataFrame) -> tuple[Verdict, pd.DataFrame]:
    """Pinned outputs: every request must have produced exactly its planned length."""
    off = _table(req[req["output_tokens"] != req["planned_output_tokens"]])
    n = len(req)
    if off.empty:
        summary = f"pinned: every output its planned length ({count(n, 'measured request')})"
    else:
        first = off.iloc[0]
        summary = (f"pinned, yet {count(len(off), 'request')} of {n} produced another length "
                   f"than planned (e.g. {first['cell']} request {int(first['request'])}: "
                   f"{int(first['output_tokens'])} tokens, planned "
                   f"{int(first['planned_output_tokens'])})")
    evidence = {"pinned": True, "requests": n, "rows": records(off)}
    return judged(TRAP, TITLE, target, len(off), summary,
                  f"Output lengths: {summary}, as the server counted them.", effect="warn",
                  evidence=evidence, cells=sorted(set(off["cell"]))), off


def _ceilings(target: str, req: pd.DataFrame, threshold: float) -> tuple[Verdict, pd.DataFrame]:
    """Ceilings: the arms' shares of their planned tokens, compared with the best arm's."""
    shares = arm_shares(req)
    best = float(shares.max())
    short = [int(a) for a, s in shares.items() if s < best * (1 - threshold)]
    early = req[req["output_tokens"] < req["planned_output_tokens"]]
    rows = _table(early[early["arm"].isin(short)])
    produced = ", ".join(f"{arm_name(int(a))} {fmt_pct(s)}" for a, s in shares.items())
    if short:
        summary = (f"ceilings (the backend cannot pin them): "
                   + ", ".join(arm_name(a) for a in short)
                   + f" produced less of its planned output than the best arm by more than "
                   f"{fmt_pct(threshold)} ({produced} of the planned tokens)")
    else:
        summary = (f"ceilings (the backend cannot pin them): every arm produced alike "
                   f"({produced} of the planned tokens; "
                   f"{count(len(early), 'request')} of {len(req)} stopped early)")
    evidence = {"pinned": False, "requests": len(req), "early": len(early),
                "shares": {str(int(a)): float(s) for a, s in shares.items()},
                "threshold": threshold, "config_key": CONFIG_KEY, "short_arms": short,
                "rows": records(rows)}
    return judged(TRAP, TITLE, target, short, summary,
                  f"Output lengths: {summary}.", effect="warn", evidence=evidence, arms=short,
                  threshold=threshold, config_key=CONFIG_KEY,
                  cells=sorted(set(rows["cell"]))), rows
