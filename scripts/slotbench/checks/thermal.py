"""Trap: the machine throttling, or reporting thermal pressure, during the reps
(docs/method.md#thermal-state-and-drift).

The background sampler (slotbench.measure.thermal) recorded every source the machine exposes. A
reading with throttled set, or a pressure other than nominal, is an event. A machine whose sources
can report neither (a VM with only /proc/cpuinfo clocks) cannot show throttling, so there the check
is not assessable rather than passed: zero events would rule nothing out. The article's machine
reported no pressure in 424 samples while losing 8.2%, which is why the serial arm's drift is
checked on its own (checks.drift).

The sources are this machine's, the client host's (slotbench.core.hosts): the row describes
"this machine (client and server)" when the server runs here too, and the client host alone when
it runs on another machine, whose temperature nothing here reads. A hot client still distorts a
measurement (its clock reads the streams), so the row still judges it, named as the client's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slotbench.checks.base import Tables, Verdict, records
from slotbench.core import hosts
from slotbench.core.fmt import count, fmt_num
from slotbench.measure.fingerprint import described_machine, host_row_title
from slotbench.measure.thermal import THERMAL_COLUMNS, is_event

TRAP = "thermal"
TITLE = "Thermal throttling"
ORDER = 70
TABLES = ("thermal",)

SUMMARY_COLUMNS = [
    "target", "run", "samples", "sources", "max_temp_c", "min_freq_mhz", "max_freq_mhz",
    "throttle_events", "first_event_t_s", "first_event_t_unix", "errors",
]
# Event groups (one per rep) listed in the evidence; the rest stay in thermal.parquet.
MAX_EVENT_GROUPS = 10


def with_keys(thermal_rows: pd.DataFrame) -> pd.DataFrame:
    df = thermal_rows.copy()
    for col in THERMAL_COLUMNS + ["rep"]:
        if col not in df:
            df[col] = None
    df[["target", "run"]] = df[["target", "run"]].fillna("")
    return df


def events(thermal_rows: pd.DataFrame) -> pd.DataFrame:
    """Every reading that reported throttling or thermal pressure, in time order."""
    df = with_keys(thermal_rows)
    out = df.loc[is_event(df)]
    return out.sort_values(["target", "run", "t_unix"], ignore_index=True).reindex(
        columns=THERMAL_COLUMNS
    )


def thermal_summary(thermal_rows: pd.DataFrame) -> pd.DataFrame:
    """Per target and run: how often the machine was sampled, how hot, how fast, what it said.

    samples counts sampling passes (distinct timestamps), not readings; throttle_events counts
    readings with throttled True or a pressure other than nominal.
    """
    df = with_keys(thermal_rows)
    rows = []
    for (target, run), grp in df.groupby(["target", "run"], sort=True):
        event = is_event(grp)
        hits = grp.loc[event].sort_values("t_unix")
        detail = grp["detail"].fillna("").astype(str)
        temps = pd.to_numeric(grp["temp_c"], errors="coerce")
        freqs = pd.to_numeric(grp["freq_mhz"], errors="coerce")
        rows.append({
            "target": target, "run": run, "samples": int(grp["t_unix"].nunique()),
            "sources": ";".join(sorted(grp["source"].dropna().astype(str).unique())),
            "max_temp_c": float(temps.max()), "min_freq_mhz": float(freqs.min()),
            "max_freq_mhz": float(freqs.max()), "throttle_events": int(event.sum()),
            "first_event_t_s": float(hits["t_s"].iloc[0]) if len(hits) else np.nan,
            "first_event_t_unix": float(hits["t_unix"].iloc[0]) if len(hits) else np.nan,
            "errors": int(detail.str.startswith("error").sum()),
        })
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _rep_text(run, rep) -> str:
    return f"{run}" if rep is None or pd.isna(rep) else f"{run} rep {int(rep)}"


def event_groups(target_events: pd.DataFrame) -> list[dict]:
    """One line of evidence per rep with events: when they started and what the sensors said."""
    groups = []
    for (run, rep), grp in list(target_events.groupby(["run", "rep"], sort=True, dropna=False)):
        details = sorted({f"{s}: {d}" if isinstance(d, str) and d else str(s)
                          for s, d in zip(grp["sensor"], grp["detail"])})[:3]
        groups.append({"run": str(run), "rep": None if pd.isna(rep) else int(rep),
                       "readings": len(grp), "from_t_s": float(grp["t_s"].min()),
                       "text": f"{_rep_text(run, rep)}: {count(len(grp), 'reading')} from "
                               f"{fmt_num(grp['t_s'].min())} s into the rep "
                               f"({'; '.join(details)})"})
    return groups[:MAX_EVENT_GROUPS]


def _facts(rows: pd.DataFrame) -> list[str]:
    temps = pd.to_numeric(rows["max_temp_c"], errors="coerce")
    lo = pd.to_numeric(rows["min_freq_mhz"], errors="coerce").min()
    hi = pd.to_numeric(rows["max_freq_mhz"], errors="coerce").max()
    facts = []
    if temps.notna().any():
        facts.append(f"hottest reading {fmt_num(temps.max())} °C")
    if not pd.isna(lo):
        same = fmt_num(lo, 0) == fmt_num(hi, 0)
        facts.append(f"clock {fmt_num(lo, 0)} MHz throughout" if same
                     else f"clock {fmt_num(lo, 0)}–{fmt_num(hi, 0)} MHz")
    return facts


def _cooldown(fps: list[dict]) -> dict:
    return {str(fp.get("run", "?")): ((fp.get("config") or {}).get("measurement") or {})
            .get("cooldown_s") for fp in fps}


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    samples = with_keys(tables.thermal)
    # this machine's readings only: a source the server host reports (none is read yet) would
    # give rows of its own, never mix into the client host's
    samples = samples[~samples["source"].isin(hosts.SERVER_REPORTED_SOURCES)]
    table = thermal_summary(samples)
    all_events = samples.loc[is_event(samples)].sort_values("t_unix", kind="stable")
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target].sort_values("run")
        mine = samples[samples["target"].astype(str) == target]
        n_samples = int(rows["samples"].fillna(0).sum())
        sources = ", ".join(sorted({s for cs in rows["sources"] for s in str(cs).split(";") if s}))
        facts = _facts(rows) if n_samples else []
        ev = all_events[all_events["target"].astype(str) == target]
        machine = described_machine(tables.fingerprints_of(target))
        the, client = hosts.the(machine), machine == hosts.CLIENT_HOST
        n_events = int(rows["throttle_events"].fillna(0).sum())
        observable = bool(mine["throttled"].notna().any() or mine["pressure"].notna().any())
        first = {str(run): {"rep": None if pd.isna(g.iloc[0]["rep"]) else int(g.iloc[0]["rep"]),
                            "t_s": float(g.iloc[0]["t_s"])}
                 for run, g in ev.groupby("run", sort=True)}
        evidence = {"samples": n_samples, "sources": sources, "facts": facts,
                    "events": n_events, "first_events": first, "event_groups": event_groups(ev),
                    "errors": int(rows["errors"].fillna(0).sum()), "rows": records(rows),
                    "cooldown_s": _cooldown(tables.fingerprints_of(target)), "machine": machine}
        facts_text = f"; {'; '.join(facts)}" if facts else ""
        if not n_samples:
            verdict, summary, assessable = (
                "not assessable",
                f"no thermal source readable on {'the client host' if client else 'this machine'}",
                False,
            )
        elif n_events:
            where = ""
            if len(ev):
                e = ev.iloc[0]
                where = (f" (first: {_rep_text(e['run'], e['rep'])}, {fmt_num(e['t_s'])} s into "
                         "the rep)")
            verdict, assessable = "yes", True
            summary = (
                f"{count(n_events, 'throttle/pressure reading')} in "
                f"{count(n_samples, 'sample')}{where}"
            )
        elif not observable:
            verdict, assessable = "not assessable", False
            summary = (f"no source reports throttling {'on the client host' if client else 'here'} "
                       f"(only {sources}); "
                       f"{count(n_samples, 'sample')}{facts_text}")
        else:
            verdict, assessable = "no", True
            summary = f"no throttling or pressure in {count(n_samples, 'sample')}{facts_text}"
        verdicts.append(Verdict(
            TRAP, host_row_title(TITLE, tables.fingerprints_of(target)), target,
            assessable=assessable,
            fired=bool(n_events), verdict=verdict, summary=summary,
            sentence=f"Thermal state of {the}: {summary}.{hosts.not_described(machine)}",
            evidence=evidence,
        ))
    return verdicts, {"thermal": table}
