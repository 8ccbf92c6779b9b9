"""Trap: a parallel arm whose rounds ran in two states.

A round is one set of requests in flight together. A closed-loop arm of N streams keeps N
requests in flight, sending the next one as soon as one is done, so ordering a cell's requests by
when they were sent and taking consecutive groups of N gives its rounds: the first N start the
cell together, each later group is the next N sends. A trailing group of fewer than N (the cell
ran out of requests) is left out: fewer were in flight. A round's per-user rate is the mean over
its requests of output tokens over generation time.

An arm's headline is a median over its cells, and a median describes one state. When some rounds
ran in another (a request deferred for a slot, two slots that never decoded together), the arm's
round rates fall into two separated groups and the median describes only the group it lands in.
The rates are split in two at the largest gap between neighbours that leaves each side at least
MIN_CLUSTER_ROUNDS rounds and MIN_CLUSTER_SHARE of them; the split is two states only when the
gap between the two sides' medians is more than SEPARATION times their pooled spread (the
median absolute deviation scaled to a standard deviation) and more than MIN_GAP_SHARE of the
faster side's median. For each side the verdict gives what the evidence says about why: the
server's own batch per decode step over its rounds (from its /metrics, where it had them), the
llama.cpp slots that served them and their positions in the rep.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from slotbench.checks.base import Tables, Verdict, constant, judged, not_assessable
from slotbench.core import stats
from slotbench.core.cells import CELL_KEYS, SERIAL_ARM, arm_name, label_series
from slotbench.core.fmt import fmt_num
from slotbench.tables import telemetry

TRAP = "rounds"
TITLE = "Rounds that split into two states"
ORDER = 11
TABLES = ("rounds",)

ROUND_COLUMNS = ["target", "run", "rep", "arm", "position", "round", "requests", "user_tps",
                 "cluster", "server_batch", "slots", "server_cores", "other_cores", "cell"]
NEEDED = ["target", "run", "rep", "arm", "position", "t_sent_s", "t_done_s", "output_tokens",
          "gen_s"]
# an arm with fewer rounds than this cannot show two groups of any size
MIN_ROUNDS = 8
# each side of a split holds at least this many rounds and this share of the arm's
MIN_CLUSTER_ROUNDS = 2
MIN_CLUSTER_SHARE = 0.1
# the two sides' medians must lie this many pooled standard deviations apart …
SEPARATION = 3.0
# … and this share of the faster side's median apart
MIN_GAP_SHARE = 0.15
# the median absolute deviation times this is a standard deviation (for normal data)
MAD_SD = 1.4826
# a batch per decode step within this of 1.0 is one sequence at a time: no batching
NO_BATCH_NEAR = 0.1
# the slower rounds cluster at one position when at least this share of them held it (and
# less than this share of the faster rounds did)
POSITION_SHARE = 0.8
# the host's samples (checks/host.py) explain the split when the server process, or the rest of
# the machine, used at least this many cores more in one state's rounds than in the other's
CORES_APART = 0.3
CONSTANTS = constant(MIN_ROUNDS=MIN_ROUNDS, MIN_CLUSTER_ROUNDS=MIN_CLUSTER_ROUNDS,
                     MIN_CLUSTER_SHARE=MIN_CLUSTER_SHARE, SEPARATION=SEPARATION,
                     MIN_GAP_SHARE=MIN_GAP_SHARE)


def _window():
    """The server's evidence over a window of a rep (slotbench.tables.telemetry.window)."""
    return telemetry.window


def _samples_by_rep(server_metrics: pd.DataFrame | None) -> dict:
    """(target, run, rep) -> that rep's server metric samples."""
    if server_metrics is None or server_metrics.empty or not {"target", "run", "rep"} <= set(
            server_metrics):
        return {}
    return {(str(t), str(r), int(p)): grp
            for (t, r, p), grp in server_metrics.groupby(["target", "run", "rep"], sort=False)}


def _round_batch(window, samples, t0: float, t1: float) -> float:
    """The server's mean batch per decode step over [t0, t1], NaN where it cannot say."""
    if window is None or samples is None:
        return float("nan")
    try:
        value = (window(samples, t0, t1) or {}).get("server_batch")
    except (KeyError, ValueError, TypeError):
        return float("nan")
    return float("nan") if value is None or pd.isna(value) else float(value)


def _host_cores(host: pd.DataFrame | None, out: pd.DataFrame) -> tuple[list, list]:
    """Each round's mean server_cores and other_cores from the host samples of its rep taken
    while it ran (NaN without any)."""
    nan = [float("nan")] * len(out)
    if host is None or host.empty or not {"server_cores", "other_cores", "t_s"} <= set(host):
        return nan, list(nan)
    by_rep = {(str(t), str(r), int(p)): g for (t, r, p), g in
              host.groupby(["target", "run", "rep"], sort=False)}
    server, other = [], []
    for t, r, p, t0, t1 in zip(out["target"], out["run"], out["rep"], out["t0"], out["t1"]):
        g = by_rep.get((str(t), str(r), int(p)))
        inside = g[(g["t_s"] >= t0) & (g["t_s"] <= t1)] if g is not None else None
        if inside is None or inside.empty:
            server.append(float("nan"))
            other.append(float("nan"))
        else:
            server.append(float(pd.to_numeric(inside["server_cores"], errors="coerce").mean()))
            other.append(float(pd.to_numeric(inside["other_cores"], errors="coerce").mean()))
    return server, other


def rounds(requests: pd.DataFrame, server_metrics: pd.DataFrame | None = None,
           host: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per full round of every closed-loop parallel arm's cells."""
    if requests.empty or any(c not in requests for c in NEEDED):
        return pd.DataFrame(columns=ROUND_COLUMNS)
    keep = NEEDED + (["id_slot"] if "id_slot" in requests else [])
    req = requests.loc[requests["arm"] > SERIAL_ARM, keep].dropna(subset=["t_sent_s"])
    if req.empty:
        return pd.DataFrame(columns=ROUND_COLUMNS)
    gen = pd.to_numeric(req["gen_s"], errors="coerce")
    tokens = pd.to_numeric(req["output_tokens"], errors="coerce")
    req = req.assign(_rate=(tokens / gen).where(gen > 0))
    req = req.sort_values([*CELL_KEYS, "t_sent_s"], kind="stable")
    req["_round"] = req.groupby(CELL_KEYS, sort=False).cumcount() // req["arm"].astype(int)
    keys = [*CELL_KEYS, "_round"]
    size = req.groupby(keys, sort=False)["t_sent_s"].transform("size")
    req = req[size == req["arm"]]  # a trailing round of fewer than N is left out
    if req.empty:
        return pd.DataFrame(columns=ROUND_COLUMNS)
    grouped = req.groupby(keys, sort=True)
    out = grouped.agg(position=("position", "first"), requests=("t_sent_s", "size"),
                      user_tps=("_rate", "mean"), t0=("t_sent_s", "min"),
                      t1=("t_done_s", "max")).reset_index()
    if "id_slot" in req:
        slot = pd.to_numeric(req["id_slot"], errors="coerce")
        named = req.assign(_slot=slot)[slot.notna()].sort_values([*keys, "_slot"])
        named["_slot"] = named["_slot"].astype(int).astype(str)
        slots = named.groupby(keys, sort=True)["_slot"].agg(";".join)
        out["slots"] = slots.reindex(pd.MultiIndex.from_frame(out[keys])).to_numpy()
    else:
        out["slots"] = None
    out = out.dropna(subset=["user_tps"]).rename(columns={"_round": "round"})
    window, by_rep = _window(), _samples_by_rep(server_metrics)
    out["server_batch"] = [
        _round_batch(window, by_rep.get((str(t), str(r), int(p))), t0, t1)
        for t, r, p, t0, t1 in zip(out["target"], out["run"], out["rep"], out["t0"], out["t1"])
    ] if len(out) else []
    out["server_cores"], out["other_cores"] = _host_cores(host, out)
    out["cluster"] = None
    out["cell"] = label_series(out) if len(out) else []
    return out[ROUND_COLUMNS].reset_index(drop=True)


def _mad_sd(values: np.ndarray) -> float:
    return MAD_SD * float(np.median(np.abs(values - np.median(values))))


def split(rates) -> dict | None:
    """The two-group split of an arm's round rates: where it falls (``threshold``), the two
    sides' medians and pooled spread and whether they are two states (``bimodal``); None when
    the arm has too few rounds for two sides of the least size."""
    x = np.sort(np.asarray(rates, dtype=float))
    n = len(x)
    least = max(MIN_CLUSTER_ROUNDS, math.ceil(MIN_CLUSTER_SHARE * n - 1e-9))
    if n < MIN_ROUNDS or n < 2 * least:
        return None
    ks = np.arange(least, n - least + 1)
    k = int(ks[np.argmax(x[ks] - x[ks - 1])])
    lower, upper = x[:k], x[k:]
    lo_med, hi_med = float(np.median(lower)), float(np.median(upper))
    pooled = math.sqrt(((len(lower) - 1) * _mad_sd(lower) ** 2
                        + (len(upper) - 1) * _mad_sd(upper) ** 2) / (n - 2))
    gap = hi_med - lo_med
    bimodal = bool(gap > SEPARATION * pooled and gap > MIN_GAP_SHARE * hi_med)
    return {"threshold": (x[k - 1] + x[k]) / 2, "lower_median": lo_med, "upper_median": hi_med,
            "gap": gap, "pooled_sd": pooled, "bimodal": bimodal, "n": n}


def _slots_text(slots: pd.Series) -> str | None:
    found = Counter(s for v in slots.dropna() for s in str(v).split(";") if s)
    if not found:
        return None
    return ", ".join(f"slot {s} ×{n}" for s, n in sorted(found.items(), key=lambda i: int(i[0])))


def _slot_set(slots: pd.Series) -> set[str]:
    return {s for v in slots.dropna() for s in str(v).split(";") if s}


def _positions(frame: pd.DataFrame) -> dict[int, int]:
    return dict(sorted(Counter(int(p) for p in frame["position"]).items()))


def _mean_batch(frame: pd.DataFrame) -> float:
    values = frame["server_batch"].dropna()
    return float(values.mean()) if len(values) else float("nan")


def _cluster(frame: pd.DataFrame, name: str) -> dict:
    return {"cluster": name, "rounds": len(frame),
            "user_tps_median": stats.median(frame["user_tps"]),
            "cells": sorted(set(frame["cell"])), "server_batch": _mean_batch(frame),
            "slots": _slots_text(frame["slots"]), "positions": _positions(frame)}


def _why(few: pd.DataFrame, many: pd.DataFrame, few_name: str, many_name: str) -> str:
    """What the evidence says about why the fewer rounds ran apart."""
    reasons = []
    few_slots, many_slots = _slot_set(few["slots"]), _slot_set(many["slots"])
    if few_slots and many_slots and few_slots != many_slots:
        reasons.append(f"slot placement: the {few_name} rounds ran on slots "
                       f"{', '.join(sorted(few_slots, key=int))}, the {many_name} ones on "
                       f"{', '.join(sorted(many_slots, key=int))}")
    few_pos, many_pos = _positions(few), _positions(many)
    top = max(few_pos, key=few_pos.get)
    few_share, many_share = few_pos[top] / len(few), many_pos.get(top, 0) / len(many)
    if few_share >= POSITION_SHARE and many_share < POSITION_SHARE:
        counts = ", ".join(f"{p}: {n}" for p, n in few_pos.items())
        others = ", ".join(f"{p}: {n}" for p, n in many_pos.items())
        reasons.append(f"position in the rep: {few_pos[top]} of the {len(few)} {few_name} rounds "
                       f"were at position {top} (by position {counts}; the {many_name} ones "
                       f"{others})")
    for column, who in (("server_cores", "the server process"),
                        ("other_cores", "other processes on this machine")):
        a, b = (pd.to_numeric(f[column], errors="coerce").mean() for f in (few, many))
        if not (pd.isna(a) or pd.isna(b)) and abs(a - b) >= CORES_APART:
            reasons.append(f"{who} used {a:.2f} cores during the {few_name} rounds against "
                           f"{b:.2f} during the {many_name} ones (the host's samples; "
                           f"{constant(CORES_APART=CORES_APART)})")
    batch = _mean_batch(few)
    if not pd.isna(batch) and abs(batch - 1) <= NO_BATCH_NEAR:
        reasons.append(f"the server decoded {batch:.2f} sequences per step in them: it did not "
                       "batch them")
    if not reasons:
        return "not explained by what the server reports (slots, position in the rep, batch " \
               "per step) nor by the host's CPU use"
    return "; ".join(reasons)


def judge_arm(arm: int, frame: pd.DataFrame, median_rate: float) -> dict:
    """One arm's rounds: too few, one state or two, with the sentence that says so."""
    name = arm_name(arm)
    found = split(frame["user_tps"])
    if found is None:
        return {"arm": arm, "rounds": len(frame), "assessable": False, "bimodal": False,
                "text": f"{name}: {len(frame)} rounds, too few to judge"}
    base = {"arm": arm, "rounds": len(frame), "assessable": True, "bimodal": found["bimodal"],
            "gap": found["gap"], "pooled_sd": found["pooled_sd"]}
    if not found["bimodal"]:
        return base | {"text": f"{name}: {len(frame)} rounds in one state (per-user "
                               f"{fmt_num(stats.median(frame['user_tps']))} tok/s, median round)"}
    slow = frame[frame["user_tps"] < found["threshold"]]
    fast = frame[frame["user_tps"] >= found["threshold"]]
    few, many = (slow, fast) if len(slow) <= len(fast) else (fast, slow)
    few_name, many_name = ("slower", "faster") if few is slow else ("faster", "slower")
    if pd.isna(median_rate):
        median_rate = stats.median(frame["user_tps"])
    lands = "slower" if median_rate < found["threshold"] else "faster"
    unbatched = (not pd.isna(_mean_batch(few)) and abs(_mean_batch(few) - 1) <= NO_BATCH_NEAR
                 and _mean_batch(many) > 1 + NO_BATCH_NEAR)
    text = (f"{name}: {len(few)} of {len(frame)} rounds "
            f"{'got no batching' if unbatched else 'ran in another state'}: each user "
            f"{fmt_num(stats.median(few['user_tps']))} tok/s against "
            f"{fmt_num(stats.median(many['user_tps']))} in the other {len(many)}")
    if not (pd.isna(_mean_batch(few)) or pd.isna(_mean_batch(many))):
        text += (f"; the server decoded {_mean_batch(few):.2f} sequences per step in them "
                 f"against {_mean_batch(many):.2f}")
    few_slots, many_slots = _slots_text(few["slots"]), _slots_text(many["slots"])
    if few_slots and many_slots:
        text += f"; in them {few_slots}, in the others {many_slots}"
    left = len(few) if lands == many_name else len(many)
    text += (f"; the median ({fmt_num(median_rate)} tok/s per user) lands in the {lands} "
             f"cluster, so the headline's median does not describe the other {left}. Why: "
             f"{_why(few, many, few_name, many_name)}")
    return base | {"text": text, "lands": lands, "minority": few_name,
                   "threshold": found["threshold"],
                   "clusters": [_cluster(slow, "slower"), _cluster(fast, "faster")],
                   "minority_cells": sorted(set(few["cell"]))}


def _arm_medians(cells: pd.DataFrame, target: str) -> dict[int, float]:
    """Each arm's median per-user rate over its cells: the rate the headline quotes."""
    if cells.empty or "user_tps" not in cells:
        return {}
    mine = cells[cells["target"] == target]
    return {int(a): stats.median(g["user_tps"].dropna()) for a, g in mine.groupby("arm")}


def _headline_requests(tables: Tables) -> pd.DataFrame:
    """The measured requests of the cells behind the headline."""
    req = tables.measured_requests
    if req.empty or tables.cells.empty or any(c not in req for c in CELL_KEYS):
        return req
    behind = set(label_series(tables.cells))
    return req[label_series(req).isin(behind).to_numpy()]


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    requests = _headline_requests(tables)
    lacking = [c for c in NEEDED if c not in requests]
    table = rounds(requests, getattr(tables, "server_metrics", None), tables.host)
    verdicts, parts = [], []
    for target in tables.targets:
        mine = table[table["target"] == target].copy()
        if lacking or mine.empty:
            why = (f"the requests have no {', '.join(lacking)}" if lacking
                   else "no parallel arm has a full round with generation times")
            verdicts.append(not_assessable(
                TRAP, TITLE, target, why,
                f"Rounds: {why}, so whether a parallel arm's rounds ran in two states cannot be "
                "seen.", evidence={"arms": []}))
            continue
        medians = _arm_medians(tables.cells, target)
        arms = []
        for arm, grp in mine.groupby("arm", sort=True):
            verdict = judge_arm(int(arm), grp, medians.get(int(arm), float("nan")))
            if verdict["bimodal"]:
                mine.loc[grp.index, "cluster"] = np.where(
                    grp["user_tps"] < verdict["threshold"], "slower", "faster")
            elif verdict["assessable"]:
                mine.loc[grp.index, "cluster"] = "one"
            arms.append(verdict)
        parts.append(mine)
        judgeable = [a for a in arms if a["assessable"]]
        too_few = [a["text"] for a in arms if not a["assessable"]]
        evidence = {"arms": [{k: v for k, v in a.items() if k not in ("minority_cells",)}
                             for a in arms]}
        if not judgeable:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "too few rounds in every parallel arm",
                f"Rounds: {'; '.join(too_few)} ({CONSTANTS}): whether an arm's rounds ran in "
                "two states cannot be seen.", evidence=evidence))
            continue
        split_arms = [a for a in judgeable if a["bimodal"]]
        if split_arms:
            warnings = [f"Warning: {a['text']} ({CONSTANTS})." for a in split_arms]
            summary = "; ".join(f"{arm_name(a['arm'])}: {a['clusters'][0]['rounds']} slower and "
                                f"{a['clusters'][1]['rounds']} faster rounds" for a in split_arms)
            sentence = " ".join(w.removeprefix("Warning: ") for w in warnings)
        else:
            summary = "; ".join(a["text"] for a in judgeable)
            sentence = f"Rounds: {summary} ({CONSTANTS})."
            warnings = []
        if too_few:
            sentence += f" Not judged: {'; '.join(too_few)}."
        verdicts.append(judged(
            TRAP, TITLE, target, bool(split_arms), summary, sentence, effect="warn",
            evidence=evidence | {"warnings": warnings}, threshold=SEPARATION,
            arms=[a["arm"] for a in split_arms],
            cells=sorted({c for a in split_arms for c in a["minority_cells"]}),
        ))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=ROUND_COLUMNS)
    return verdicts, {"rounds": out[ROUND_COLUMNS]}


__all__ = ["rounds", "split", "judge_arm", "check"]
