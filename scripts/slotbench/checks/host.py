"""Trap: other processes (or a hypervisor's steal) taking the machine during a rep
(docs/method.md#host-contention).

A benchmark shares its cores with whatever else runs. slotbench.measure.hostload samples, during
every rep, the CPU of the target server, of the harness, and of everything else by name, plus steal
time and the load average. A rep in which other processes, or steal, took more than the threshold's
share of the machine on average was measured on a shared machine: it is named, with the processes
that competed, in a warning before the headline. Where no source could sample the host (an
unsupported system, raw files from before this check) the check is not assessable.

The samples are this machine's, the client host's (slotbench.core.hosts). With the server on it
too (managed, or a loopback URL) the row describes "this machine (client and server)"; with the
server on another machine the row is the client host's: a busy client still reads streams late,
but nothing here says how busy the server's machine was, and the row says so.
"""

from __future__ import annotations

import pandas as pd

from slotbench.checks.base import Tables, Verdict, judged, not_assessable, records, setting
from slotbench.core import hosts
from slotbench.core.fmt import count, fmt_pct
from slotbench.measure.fingerprint import described_machine, host_row_title

TRAP = "host"
TITLE = "Host contention (other processes, steal)"
ORDER = 75
TABLES = ("host",)
CONFIG_KEY = "checks.host_threshold"
HOST_COLUMNS = ["target", "run", "rep", "samples", "cpus", "other_cores", "other_max_cores",
                "other_share", "steal_share", "load1", "server_cores", "top", "contended"]


# The sentence names at most this many shared reps (the busiest), so that it does not grow
# with the run.
NAMED = 20


def _top(texts, samples: int, n: int = 3) -> str:
    """The processes that used the most CPU over a rep, as mean cores per sample."""
    by_name: dict[str, float] = {}
    for text in texts.dropna():
        for item in str(text).split(";"):
            if "=" in item:
                name, cores = item.rsplit("=", 1)
                by_name[name] = by_name.get(name, 0.0) + float(cores)
    ranked = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return ", ".join(f"{name} {cores / samples:.2f} cores" for name, cores in ranked
                     if cores / samples >= 0.01)


def per_rep(host: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per rep: how busy the rest of the machine was while the rep measured (t_s >= 0)."""
    measured = host[(host["t_s"] >= 0) & host["other_cores"].notna()]
    rows = []
    for (target, run, rep), grp in measured.groupby(["target", "run", "rep"], sort=True):
        cpus, steal = float(grp["cpus"].max()), grp["steal_cores"]
        other_mean = float(grp["other_cores"].mean())
        steal_share = float(steal.mean()) / cpus if steal.notna().any() else float("nan")
        share = other_mean / cpus
        rows.append({
            "target": target, "run": run, "rep": int(rep), "samples": len(grp), "cpus": int(cpus),
            "other_cores": other_mean, "other_max_cores": float(grp["other_cores"].max()),
            "other_share": share, "steal_share": steal_share,
            "load1": float(grp["load1"].mean()), "server_cores": float(grp["server_cores"].mean()),
            "top": _top(grp["top"], len(grp)),
            "contended": bool(share > threshold or (steal_share == steal_share
                                                    and steal_share > threshold)),
        })
    return pd.DataFrame(rows, columns=HOST_COLUMNS)


def _where(busy: pd.DataFrame) -> str:
    """The shared reps in words, in rep order: every one up to NAMED, else the NAMED busiest
    and how many more (every rep is in host.csv)."""
    named = busy if len(busy) <= NAMED else busy.nlargest(NAMED, "other_share").sort_index()
    text = ", ".join(f"{r['run']} rep {r['rep']} ({fmt_pct(r['other_share'])}"
                     + (f": {r['top']}" if r["top"] else "") + ")"
                     for r in named.to_dict("records"))
    if len(busy) > NAMED:
        text += f" and {count(len(busy) - NAMED, 'more rep')} (every one in host.csv)"
    return text


def check(tables: Tables, settings: dict) -> tuple[list[Verdict], dict]:
    threshold = float(setting(settings, CONFIG_KEY))
    host = tables.host if tables.host is not None else pd.DataFrame(columns=["target"])
    if "source" in host:  # this machine's samples only (slotbench.core.hosts)
        host = host[~host["source"].isin(hosts.SERVER_REPORTED_SOURCES)]
    table = per_rep(host, threshold) if len(host) else pd.DataFrame(columns=HOST_COLUMNS)
    verdicts = []
    for target in tables.targets:
        rows = table[table["target"] == target]
        fps = tables.fingerprints_of(target)
        machine, title = described_machine(fps), host_row_title(TITLE, fps)
        the, aside = hosts.the(machine), hosts.not_described(machine)
        # the traps table's words: the title names the machine, "the machine" is this one
        said = "the client host" if machine == hosts.CLIENT_HOST else "the machine"
        common = {"threshold": threshold, "config_key": CONFIG_KEY}
        if rows.empty:
            verdicts.append(not_assessable(
                TRAP, title, target,
                "no host samples (no source on "
                + ("the client host)" if machine == hosts.CLIENT_HOST else "this system)"),
                f"Host contention is not assessable: nothing sampled what else ran on {the} "
                f"during the reps.{aside}", evidence={"machine": machine}, **common))
            continue
        busy = rows[rows["contended"]]
        where = _where(busy)
        worst = rows.loc[rows["other_share"].idxmax()]
        if len(busy):
            summary = f"{count(len(busy), 'rep')} of {len(rows)} shared {said}: {where}"
            warning = (
                f"Warning: other processes took more than {fmt_pct(threshold)} of the CPU of "
                f"{the} during {count(len(busy), 'rep')} of {target}: {where}. " + (
                    "Those reps were measured on a shared machine, so their throughput is not "
                    "the server's alone; rerun them on a quiet machine"
                    if machine == hosts.SHARED else
                    "Those reps were measured from a busy client, which may read the streams "
                    "late, so their timings may be the client's rather than the server's; rerun "
                    "them from a quiet client")
                + " (delete their raw files and their .sha256)."
            )
            sentence = warning.removeprefix("Warning: ") + aside
        else:
            summary = (f"the rest of {said} used at most {fmt_pct(worst['other_share'])} of "
                       f"its CPU in any rep ({len(rows)} reps sampled)")
            warning = None
            sentence = (f"Host contention on {the}: the rest of it used at most "
                        f"{fmt_pct(worst['other_share'])} of its CPU in any rep ({len(rows)} reps "
                        f"sampled).{aside}")
        verdicts.append(judged(
            TRAP, title, target, len(busy), summary, sentence, effect="warn",
            evidence={"rows": records(rows), "warnings": [warning] if warning else [],
                      "machine": machine},
            arms=[], **common,
        ))
    return verdicts, {"host": table}
