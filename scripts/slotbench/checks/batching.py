"""Trap: a batching decomposition the server's own evidence contradicts or explains.

gen_gain reads the generation stage from the client's side: each user's rate times the streams
generating at once, over the serial rate. The server can say directly how many sequences it
decoded per step (cells' ``server_batch``, from its /metrics), and the two must agree: a server
that decoded one sequence per step while the client held several in flight serialised them (the
same trap as the serialisation check's, seen from the server's side, and with its effect); a
server that batched but whose gen_gain stayed near 1 says batching was available and bought
little; a batch near the arm's streams with gen_gain well below 1 says each batched step cost
more than the steps it replaced (said, not a contradiction: a CPU-bound server does this); and a
batch of about one with a large gen_gain is a contradiction: one of the two numbers is wrong,
and the decomposition that rests on them is provisional. The serial arm is the counter's own
check: one request at a time is one sequence per step, so a serial batch away from 1.0 makes the
counter not credible, and nothing is judged from it.
"""

from __future__ import annotations

import pandas as pd

from slotbench.analysis import analyse
from slotbench.checks.base import Tables, Verdict, constant, judged, not_assessable
from slotbench.core import stats
from slotbench.core.cells import SERIAL_ARM, arm_name, cell_labels
from slotbench.core.fmt import fmt_times

TRAP = "batching"
TITLE = "The decomposition with the server's evidence"
ORDER = 16
TABLES = ()

# a batch per decode step within this share of 1.0 is one sequence at a time
ONE_NEAR = 0.1
# the serial arm's batch must be within this of 1.0 for the server's counter to be believed
SERIAL_NEAR = 0.05
# a batch per step from this up means batching was available …
BATCHED = 1.5
# … and a gen_gain below this says it bought little
LITTLE_GAIN = 1.2
# contradictions: a batch of about one with gen_gain above CONTRADICTION_GAIN, or a batch of at
# least FULL_SHARE of the arm's streams with gen_gain below LOSS_GAIN
CONTRADICTION_GAIN = 1.5
FULL_SHARE = 0.8
LOSS_GAIN = 0.8
NO_TELEMETRY = "the results were measured before the server's metrics were read"


def _sequences(batch: float) -> str:
    return f"{batch:.2f} sequence{'' if round(batch, 2) == 1 else 's'} per step"


def _note(cells: pd.DataFrame) -> str:
    if "telemetry_note" not in cells:
        return NO_TELEMETRY
    notes = cells["telemetry_note"].dropna().astype(str)
    notes = notes[notes != ""]
    return stats.mode(list(notes)) if len(notes) else NO_TELEMETRY


def _ratios(cells: pd.DataFrame) -> pd.DataFrame | None:
    try:
        return analyse.cell_ratios(cells)
    except (ValueError, KeyError):
        return None


def judge_arm(arm: int, batch: float, streams: float, gain: float) -> dict:
    """One parallel arm: what its server batch says next to the client's streams and gen_gain."""
    name = arm_name(arm)
    row = {"arm": arm, "server_batch": batch, "streams": streams, "gen_gain": gain,
           "kind": "plain"}
    gain_text = fmt_times(gain)
    row["short"] = f"{name}: {batch:.2f} per step, gen_gain {gain_text}"
    one = abs(batch - 1) <= ONE_NEAR
    if one and not pd.isna(gain) and gain > CONTRADICTION_GAIN:
        return row | {"kind": "contradiction", "text": (
            f"at {name} the server decoded {_sequences(batch)}, yet gen_gain was {gain_text}: a "
            "server that batched nothing cannot multiply the generation stage, so one of the two "
            "numbers is wrong "
            f"({constant(ONE_NEAR=ONE_NEAR, CONTRADICTION_GAIN=CONTRADICTION_GAIN)})")}
    if not pd.isna(streams) and batch >= FULL_SHARE * streams and not pd.isna(gain) \
            and gain < LOSS_GAIN:  # both can be true: a batched step can cost more than N
        return row | {"kind": "little", "text": (
            f"at {name} the server decoded {_sequences(batch)}, near the {streams:g} streams the "
            f"client held, yet gen_gain was {gain_text}: each batched step took longer than the "
            "steps it replaced, so batching lost generation throughput here (a server short of "
            "CPU or memory bandwidth does this) "
            f"({constant(FULL_SHARE=FULL_SHARE, LOSS_GAIN=LOSS_GAIN)})")}
    if one and arm >= 2:  # the client held ``arm`` in flight, whatever the server took of them
        return row | {"kind": "serialised", "text": (
            f"the server decoded {_sequences(batch)} at {name}: it serialised what the client "
            f"sent in parallel ({arm} in flight; {constant(ONE_NEAR=ONE_NEAR)})")}
    if batch >= BATCHED and not pd.isna(gain) and gain < LITTLE_GAIN:
        return row | {"kind": "little", "text": (
            f"at {name} the server decoded {_sequences(batch)}, so batching was available; "
            f"gen_gain {gain_text} says it bought little "
            f"({constant(BATCHED=BATCHED, LITTLE_GAIN=LITTLE_GAIN)})")}
    return row | {"text": f"{name}: the server decoded {_sequences(batch)}, gen_gain {gain_text}"}


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    verdicts = []
    for target in tables.targets:
        cells = tables.cells[tables.cells["target"] == target]
        if "control" in cells:
            cells = cells[~cells["control"].fillna(False).astype(bool)]
        has = "server_batch" in cells and pd.to_numeric(cells["server_batch"],
                                                        errors="coerce").notna().any()
        if not has:
            note = _note(cells)
            verdicts.append(not_assessable(
                TRAP, TITLE, target, f"no server batch: {note}",
                f"Server batching: no cell has the server's batch per decode step ({note}), so "
                "the decomposition cannot be held to the server's evidence.",
                evidence={"reason": note}))
            continue
        batch = pd.to_numeric(cells["server_batch"], errors="coerce")
        serial = stats.median(batch[cells["arm"] == SERIAL_ARM].dropna())
        if not pd.isna(serial) and abs(serial - 1) > SERIAL_NEAR:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, f"serial-1's server batch is {serial:.2f}, not 1",
                f"Server batching: at serial-1, one request at a time, the server reported "
                f"{_sequences(serial)} ({constant(SERIAL_NEAR=SERIAL_NEAR)}): its counter is "
                "not credible, so the parallel arms are not judged from it.",
                evidence={"serial_batch": serial}, cells=cell_labels(
                    cells[cells["arm"] == SERIAL_ARM])))
            continue
        ratios = _ratios(cells)
        rows = []
        for arm in sorted(a for a in cells["arm"].unique() if a > SERIAL_ARM):
            mine = batch[cells["arm"] == arm].dropna()
            if mine.empty:
                continue
            streams, gain = float(arm), float("nan")
            if ratios is not None:
                r = ratios[ratios["arm"] == arm]
                streams, gain = stats.median(r["streams"]), stats.median(r["gen_gain"])
            rows.append(judge_arm(int(arm), stats.median(mine), streams, gain)
                        | {"cells": cell_labels(cells[cells["arm"] == arm])})
        if not rows:
            verdicts.append(not_assessable(
                TRAP, TITLE, target, "no parallel arm has a server batch",
                "Server batching: no parallel arm's cell has the server's batch per decode "
                f"step ({_note(cells)}).", evidence={"serial_batch": serial}))
            continue
        serial_text = ("serial-1 has no server batch, so the counter is unchecked"
                       if pd.isna(serial) else f"serial-1 {_sequences(serial)}, as it should")
        contradictions = [r for r in rows if r["kind"] == "contradiction"]
        serialised = [r for r in rows if r["kind"] == "serialised"]
        fired = contradictions + serialised
        effect = "provisional" if contradictions else "warn"
        texts = [r["text"] for r in fired]
        notes = [r["text"] for r in rows if r["kind"] == "little"]
        plain = [r["text"] for r in rows if r["kind"] == "plain"]
        kinds = {"serialised": "serialised", "contradiction": "contradicts gen_gain",
                 "little": "little gain"}
        summary = "; ".join(r["short"] + (f" ({kinds[r['kind']]})" if r["kind"] in kinds else "")
                            for r in rows)
        sentence = f"Server batching: {'; '.join(texts or notes + plain)}; {serial_text}."
        if fired and notes:
            sentence += f" Also: {'; '.join(notes)}."
        evidence = {"rows": [{k: v for k, v in r.items() if k not in ("cells", "short")}
                             for r in rows],
                    "serial_batch": serial, "notes": notes}
        if serialised and not contradictions:
            evidence["warnings"] = [f"Warning: {t[0].upper()}{t[1:]}." for t in texts]
        verdicts.append(judged(
            TRAP, TITLE, target, bool(fired), summary, sentence, effect=effect,
            verdict=("contradiction" if contradictions else "serialised" if serialised
                     else None),
            evidence=evidence, threshold=ONE_NEAR, arms=[r["arm"] for r in fired],
            cells=sorted({c for r in fired for c in r["cells"]}),
        ))
    return verdicts, {}
