"""Measurement integrity: each trap, whether its detector fired, and the evidence."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from slotbench import provenance as prov
from slotbench.cells import cell_label
from slotbench.report.format import (
    DASH,
    _missing,
    _signed,
    _split,
    _union,
    arm_name,
    fmt_change,
    fmt_num,
    fmt_pct,
    fmt_times,
)
from slotbench.report.frames import _measured_requests, _rows_of, _truthy
from slotbench.report.blocks import Bullets, Heading, Paragraph, Sources, Table, _count


# --------------------------------------------------------------------------------------------
# Measurement integrity: each trap, whether its detector fired, and the evidence
# --------------------------------------------------------------------------------------------

INTEGRITY_INPUTS = (
    "prompts", "cache_hits", "control", "thermal_summary", "burst", "client", "sufficiency",
    "thermal",
)  # fmt: skip
# A serial-arm loss from burst to plateau beyond this is flagged (the article lost 8.2%).
DRIFT_THRESHOLD = 0.05
ARTICLE_DRIFT = 0.082
# Rows shown in a table of flagged requests; the rest stay in the checks' CSV.
MAX_ROWS = 30
CONTROL_OFF = (
    "Control arm off: set control_arm: true to measure how much a shared prefix would inflate "
    "the parallel arms."
)


@dataclass(frozen=True)
class Trap:
    """One line of the integrity overview and the blocks with its evidence."""

    name: str
    fired: str  # "yes", "no", "not checked", "off", …
    evidence: str
    ref_id: str = ""  # provenance id of the evidence, when it is shown
    blocks: tuple = ()


@dataclass(frozen=True)
class TargetContext:
    """What every trap of one target needs to name its cells and raw files."""

    target: str
    cells: list
    hashes: list
    index: prov.CellIndex
    overview_id: str

    def hashes_for(self, labels) -> list[str]:
        found = {self.index.info(label).get("raw_sha256") for label in labels}
        return sorted(h for h in found if h is not None and not _missing(h))


def _labels_of(rows: pd.DataFrame) -> list[str]:
    if "cell" in rows:
        return [
            str(c) if not _missing(c) else cell_label(t, r, p, a)
            for c, t, r, p, a in zip(rows["cell"], rows["target"], rows["run"], rows["rep"],
                                     rows["arm"])
        ]  # fmt: skip
    return [cell_label(*k) for k in rows[["target", "run", "rep", "arm"]].itertuples(index=False)]


def _ms(seconds) -> str:
    return "n/a" if _missing(seconds) else f"{float(seconds) * 1000:.1f} ms"


def _duration(seconds) -> str:
    if _missing(seconds):
        return "n/a"
    s = float(seconds)
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


def _int_text(x) -> str:
    return "n/a" if _missing(x) else str(int(x))


def _signed_int(x) -> str:
    return "n/a" if _missing(x) else _signed(f"{int(x):+d}")


def _modal_lengths(requests: pd.DataFrame) -> dict[str, int]:
    """run -> modal server-reported prompt length (the smallest mode, as the check uses)."""
    if requests.empty or "prompt_tokens" not in requests:
        return {}
    rows = requests.dropna(subset=["prompt_tokens"])
    return {
        str(run): int(grp["prompt_tokens"].mode().min())
        for run, grp in rows.groupby("run", sort=True)
    }


def _fp_measurement(fp: dict) -> dict:
    return (fp.get("config") or {}).get("measurement") or {}


def tokenizer_sentence(fps: list[dict]) -> str:
    """Whether the plan equalised lengths with the server's tokenizer, if the fingerprint says."""
    said = {
        str(v)
        for fp in fps
        for v in ((fp.get("plan") or {}).get("tokenizer"), _fp_measurement(fp).get("tokenizer"))
        if v is not None
    }
    if not said:
        return (
            "Whether the plan equalised lengths with the server's own tokenizer is not recorded "
            "in the fingerprint; the equality stated here is measured from the prompt lengths "
            "the server reported."
        )
    if said == {"server"}:
        return (
            "The plan equalised lengths with the server's own tokenizer (recorded in the "
            "fingerprint), and the server's reported lengths are checked here."
        )
    return (
        f"The plan counted prompt tokens with {', '.join(sorted(said))} (recorded in the "
        "fingerprint), not necessarily the server's tokenizer; the server's reported lengths "
        "are what is checked here."
    )


def cooldown_line(fps: list[dict]) -> str:
    """Cooldown between reps as the fingerprint recorded it (0 = none)."""
    values = {str(fp.get("run", "?")): _fp_measurement(fp).get("cooldown_s") for fp in fps}
    known = {run: v for run, v in values.items() if v is not None}
    if not known:
        return "Cooldown between reps: not recorded in the fingerprint."

    def text(v) -> str:
        v = float(v)
        return "none, 0 s" if v == 0 else f"{v:g} s"

    if len(set(known.values())) == 1 and len(known) == len(values):
        return f"Cooldown between reps: {text(next(iter(known.values())))} (recorded in the fingerprint)."
    per_run = ", ".join(
        f"{text(v)} in {run}" if v is not None else f"not recorded in {run}"
        for run, v in sorted(values.items())
    )
    return f"Cooldown between reps: {per_run} (recorded in the fingerprint)."


def _flagged_table(ctx, trap, rows, labels, columns, make_row, title, row_title, metric):
    """Table of flagged requests (capped at MAX_ROWS) with an entry per row and its Sources."""
    tid = prov.integrity_id(ctx.target, trap)
    table_rows, row_ids, refs = [], [], []
    shown = list(zip(labels, rows.to_dict("records")))[:MAX_ROWS]
    for label, r in shown:
        table_rows.append(make_row(label, r))
        key = prov.rep_of(label)
        where = (
            [key[1], f"rep{key[2]}", f"arm{int(r['arm'])}"]
            if key is not None
            else [str(r.get("run")), f"rep{int(r['rep'])}", f"arm{int(r['arm'])}"]
        )
        rid = prov.integrity_id(ctx.target, trap, *where, f"request{int(r['request'])}")
        row_ids.append(rid)
        refs.append(
            prov.Ref(
                rid,
                "table-row",
                f"{row_title} {label} request {int(r['request'])}",
                prov.with_roles(([label], "deviant")),
                anchor=rid,
                parent=tid,
                metric=metric(r),
                row=dict(zip(columns, table_rows[-1])),
            )
        )
    note = ""
    if len(labels) > len(shown):
        note = f"{len(labels) - len(shown)} more in results/checks/{trap}.csv (first {MAX_ROWS} shown)."
    flagged = sorted(set(labels), key=prov.label_key)
    others = [c for c in ctx.cells if c not in set(flagged)]
    table_ref = prov.Ref(
        tid,
        "table",
        f"{title} ({ctx.target})",
        prov.with_roles((flagged, "deviant"), (others, "comparison")),
        tid,
        parent=ctx.overview_id,
    )
    return [
        Table(title, columns, table_rows, note, anchor=tid, row_ids=row_ids),
        Sources(flagged, ctx.hashes_for(flagged), tid, (table_ref, *refs)),
    ]


def _quiet_evidence(ctx, trap, text, title) -> list:
    """A quiet detector's sentence, anchored, with the cells it looked at."""
    tid = prov.integrity_id(ctx.target, trap)
    ref = prov.Ref(
        tid,
        "table",
        f"{title} ({ctx.target}): {text}",
        prov.with_roles((ctx.cells, "source")),
        tid,
        parent=ctx.overview_id,
    )
    return [Paragraph(text, anchor=tid), Sources(ctx.cells, ctx.hashes, tid, (ref,))]


def prompts_trap(ctx, prompts, requests, fps) -> Trap:
    name = "Unequal prompt lengths"
    if prompts is None:
        return Trap(name, "not checked", "prompts.csv was not given")
    measured = _measured_requests(requests, ctx.target)
    modal = _modal_lengths(measured)
    n_req = int(measured["prompt_tokens"].notna().sum()) if "prompt_tokens" in measured else 0
    rows = _rows_of(prompts, ctx.target)
    tid = prov.integrity_id(ctx.target, "prompts")
    tokenizer = tokenizer_sentence(fps)
    values = sorted(set(modal.values()))
    if len(values) == 1:
        modal_text = f"{values[0]} tokens"
    elif values:
        modal_text = ", ".join(f"{m} tokens in {run}" for run, m in modal.items())
    else:
        modal_text = None
    if rows.empty:
        counted = f" ({_count(n_req, 'measured request')})" if n_req else ""
        if len(values) == 1:
            evidence = f"all prompts {values[0]} tokens{counted}"
        elif values:
            evidence = f"all prompts equal within their run ({modal_text}){counted}"
        else:
            evidence = f"all prompts had their run's modal length{counted}"
        text = (
            f"Prompt length: {evidence}, as the server counted them. Every request carries its "
            "own nonce, and equal length in tokens gives every arm the same prefill work. "
            + tokenizer
        )
        return Trap(name, "no", evidence, tid, (Heading(4, "Prompt length"),
                                                *_quiet_evidence(ctx, "prompts", text, name)))  # fmt: skip
    rows = rows.sort_values(["run", "rep", "position", "request"])
    labels = _labels_of(rows)
    k = len(rows)
    first_label, first = labels[0], rows.iloc[0]
    modal_first = int(first["modal_prompt_tokens"])
    of = f" of {n_req}" if n_req else ""
    evidence = (
        f"{_count(k, 'request')}{of} differ{'s' if k == 1 else ''} from "
        f"{'its' if k == 1 else 'their'} run's modal length "
        f"(e.g. {first_label} request {int(first['request'])}: {int(first['prompt_tokens'])} "
        f"tokens, modal {modal_first})"
    )
    text = (
        f"Warning: {_count(k, 'measured request')}{of} had a prompt length different from "
        f"{'its' if k == 1 else 'their'} run's modal {modal_text or f'{modal_first} tokens'}, as the server counted them. "
        "Their prefill did different work, so an arm holding more of them is not measured on "
        "the same requests (method rule 2). The plan must hold prompt length in tokens equal; "
        "replan with the server's tokenizer. " + tokenizer
    )
    columns = ["cell", "position", "request", "prompt tokens", "run's modal", "difference"]

    def make_row(label, r):
        return [label, _int_text(r["position"]), _int_text(r["request"]),
                _int_text(r["prompt_tokens"]), _int_text(r["modal_prompt_tokens"]),
                _signed_int(r["prompt_tokens"] - r["modal_prompt_tokens"])]  # fmt: skip

    def metric(r):
        return {"name": "prompt_tokens", "value": r["prompt_tokens"],
                "text": _int_text(r["prompt_tokens"])}  # fmt: skip

    blocks = [Heading(4, "Prompt length"), Paragraph(text, "warning")]
    blocks += _flagged_table(ctx, "prompts", rows, labels, columns, make_row,
                             "Requests with an unequal prompt length", "Unequal prompt length:",
                             metric)  # fmt: skip
    return Trap(name, "yes", evidence, tid, tuple(blocks))


def cache_trap(ctx, cache_hits, requests) -> Trap:
    name = "Prefix-cache hits"
    if cache_hits is None:
        return Trap(name, "not checked", "cache_hits.csv was not given")
    measured = _measured_requests(requests, ctx.target)
    n_req = len(measured)
    rows = _rows_of(cache_hits, ctx.target)
    tid = prov.integrity_id(ctx.target, "cache")
    how = (
        "llama.cpp reports cached prompt tokens (cache_n) and the prompt tokens it evaluated; "
        "Ollama reports neither, so there a prompt evaluated at least "
        "4× faster per token than the target's median, or not at all, counts as a hit."
    )
    if rows.empty:
        counted = f" in {_count(n_req, 'measured request')}" if n_req else ""
        evidence = f"no cache hits{counted}"
        text = (
            f"Prefix cache: {evidence}. No measured request was served, even partly, from a "
            f"prefix cache. {how}"
        )
        return Trap(name, "no", evidence, tid, (Heading(4, "Prefix cache"),
                                                *_quiet_evidence(ctx, "cache", text, name)))  # fmt: skip
    rows = rows.sort_values(["run", "rep", "position", "request"])
    labels = _labels_of(rows)
    k = len(rows)
    of = f" of {n_req}" if n_req else ""
    first = rows.iloc[0]
    evidence = (
        f"{_count(k, 'request')}{of} served (partly) from a prefix cache (e.g. {labels[0]} "
        f"request {int(first['request'])}: {first['reason']})"
    )
    text = (
        f"Warning: {_count(k, 'measured request')}{of} {'was' if k == 1 else 'were'} served, "
        "at least partly, from a "
        "prefix cache: their prefill was skipped, so their arm did less work than the others "
        "and looks faster than the server is. Every request should carry its own nonce near the "
        f"start of the prompt and be sent with the cache off. {how}"
    )
    columns = ["cell", "position", "request", "prompt tokens", "evaluated", "evidence"]

    def make_row(label, r):
        return [label, _int_text(r["position"]), _int_text(r["request"]),
                _int_text(r["prompt_tokens"]), _int_text(r.get("evaluated")),
                str(r.get("reason") or "")]  # fmt: skip

    def metric(r):
        return {"name": "evaluated", "value": r.get("evaluated"),
                "text": _int_text(r.get("evaluated"))}  # fmt: skip

    blocks = [Heading(4, "Prefix cache"), Paragraph(text, "warning")]
    blocks += _flagged_table(ctx, "cache", rows, labels, columns, make_row,
                             "Requests served from a prefix cache", "Prefix-cache hit:",
                             metric)  # fmt: skip
    return Trap(name, "yes", evidence, tid, tuple(blocks))


def control_line(row) -> str:
    arm = arm_name(row["arm"])
    return (
        f"Control (shared prompt, cache allowed): {arm} would have shown "
        f"{fmt_num(row['control_agg_tps'])} tok/s instead of {fmt_num(row['measured_agg_tps'])} "
        f"tok/s ({fmt_change(1 + row['inflation'])}) {DASH} not part of the headline."
    )


def control_trap(ctx, control) -> Trap:
    name = "Shared-prefix inflation (control arm)"
    if control is None:
        return Trap(name, "not checked", "control.csv was not given")
    rows = _rows_of(control, ctx.target)
    heading = Heading(4, "Control arm")
    if rows.empty:
        if control.empty:
            return Trap(
                name, "off", "control arm off", "", (heading, Paragraph(CONTROL_OFF, "note"))
            )
        text = f"The control arm measured no cell of {ctx.target}."
        return Trap(name, "off", "no control cells for this target", "",
                    (heading, Paragraph(text, "note")))  # fmt: skip
    tid = prov.integrity_id(ctx.target, "control")
    rows = rows.sort_values("arm")
    lines = [control_line(r) for r in rows.to_dict("records")]
    control_cells = sorted(_union(rows["cells"]), key=prov.label_key)
    measured = (
        sorted(_union(rows["measured_cells"]), key=prov.label_key)
        if "measured_cells" in rows
        else []
    )
    n_control = int(rows["control_cells"].sum()) if "control_cells" in rows else len(control_cells)
    top = rows.iloc[-1]
    evidence = (
        f"measured: a shared prompt would have shown {fmt_change(1 + top['inflation'])} at "
        f"{arm_name(top['arm'])} (not in the headline)"
    )
    explain = (
        f"The control arm sends one shared prompt to every request at the largest concurrency "
        "and lets the server cache it (MLPerf TEST04 in spirit), once per rep after the measured "
        f"arms ({_count(n_control, 'control cell')}). The difference is what a benchmark whose "
        "requests share a prefix would have booked as a concurrency gain. The measured arms "
        "never share one; the control's numbers appear only here."
    )
    ref = prov.Ref(
        tid,
        "table",
        f"Control arm of {ctx.target}: " + " ".join(lines),
        # a control cell may share its label with the measured cell of its rep and arm
        prov.with_each_role((control_cells, "control"), (measured, "comparison")),
        tid,
        parent=ctx.overview_id,
        metric={"name": "inflation", "value": top["inflation"],
                "text": fmt_change(1 + top["inflation"])},
    )  # fmt: skip
    cells = sorted(set(control_cells) | set(measured), key=prov.label_key)
    blocks = (heading, Paragraph(" ".join(lines), anchor=tid), Paragraph(explain, "note"),
              Sources(cells, ctx.hashes_for(cells), tid, (ref,)))  # fmt: skip
    return Trap(name, "n/a (a measurement)", evidence, tid, blocks)


def _event_rows(thermal: pd.DataFrame | None, target) -> tuple[pd.DataFrame, bool | None]:
    """(the target's throttle/pressure readings, whether any source could report them)."""
    from slotbench.thermal import _event_mask

    rows = _rows_of(thermal, target)
    if rows.empty:
        return pd.DataFrame(), None
    rows = rows.copy()
    for col in ("throttled", "pressure", "detail", "t_s", "t_unix", "sensor", "rep"):
        if col not in rows:
            rows[col] = None
    observable = bool(rows["throttled"].notna().any() or rows["pressure"].notna().any())
    return rows.loc[_event_mask(rows)].sort_values("t_unix", kind="stable"), observable


def _rep_text(run, rep) -> str:
    return f"{run}" if _missing(rep) else f"{run} rep {int(rep)}"


def thermal_trap(ctx, summary, thermal, fps, cells_of) -> Trap:
    name = "Thermal throttling"
    heading = Heading(4, "Thermal state")
    cooldown = Paragraph(cooldown_line(fps))
    if summary is None:
        return Trap(name, "not checked", "thermal.csv was not given", "", (heading, cooldown))
    rows = _rows_of(summary, ctx.target)
    tid = prov.integrity_id(ctx.target, "thermal")
    if rows.empty or int(rows["samples"].fillna(0).sum()) == 0:
        evidence = "no thermal source readable on this machine"
        text = (
            "Thermal state: no thermal source readable on this machine. The sampler found no "
            "thermal zone, CPU clock, pmset or nvidia-smi it could read, so throttling was "
            "neither seen nor ruled out; the serial arm's burst-vs-plateau drift below is the "
            "only evidence of thermal decay."
        )
        blocks = (heading, cooldown, *_quiet_evidence(ctx, "thermal", text, name))
        return Trap(name, "n/a (no source)", evidence, tid, blocks)
    rows = rows.sort_values("run")
    events, observable = _event_rows(thermal, ctx.target)
    if observable is None:  # no samples given: judge by the source names
        sources = set(_union(rows["sources"]))
        observable = None if not sources else not sources <= {"cpuinfo"}
    n_events = int(rows["throttle_events"].fillna(0).sum())
    first_by_run = {}
    if not events.empty:
        for run, grp in events.groupby("run", sort=True):
            first_by_run[str(run)] = grp.iloc[0]
    columns = ["run", "samples", "sources", "max °C", "clock MHz (min–max)",
               "throttle/pressure events", "first event", "read errors"]  # fmt: skip
    table_rows, row_ids, refs = [], [], []
    for r in rows.to_dict("records"):
        run = str(r["run"])
        first = "—"
        if run in first_by_run:
            e = first_by_run[run]
            first = f"rep {_int_text(e['rep'])} at {fmt_num(e['t_s'])} s"
        elif not _missing(r.get("first_event_t_s")):
            first = f"at {fmt_num(r['first_event_t_s'])} s"
        lo, hi = r.get("min_freq_mhz"), r.get("max_freq_mhz")
        clock = "n/a" if _missing(lo) else f"{fmt_num(lo, 0)}–{fmt_num(hi, 0)}"
        table_rows.append([run, _int_text(r["samples"]), str(r.get("sources") or "none"),
                           fmt_num(r.get("max_temp_c")), clock,
                           _int_text(r.get("throttle_events")), first,
                           _int_text(r.get("errors"))])  # fmt: skip
        rid = prov.integrity_id(ctx.target, "thermal", run)
        row_ids.append(rid)
        run_cells = cells_of(ctx.target, run)
        refs.append(
            prov.Ref(
                rid, "table-row", f"Thermal samples of {ctx.target}/{run} (during its reps)",
                prov.with_roles((run_cells, "source")), anchor=rid, parent=tid,
                metric={"name": "throttle_events", "value": r.get("throttle_events"),
                        "text": table_rows[-1][5]},
                row=dict(zip(columns, table_rows[-1])),
            )
        )  # fmt: skip
    samples = int(rows["samples"].fillna(0).sum())
    sources = ", ".join(_union(rows["sources"])) or "none"
    temps = pd.to_numeric(rows["max_temp_c"], errors="coerce")
    lo = pd.to_numeric(rows["min_freq_mhz"], errors="coerce").min()
    hi = pd.to_numeric(rows["max_freq_mhz"], errors="coerce").max()
    facts = []
    if temps.notna().any():
        facts.append(f"hottest reading {fmt_num(temps.max())} °C")
    if not _missing(lo):
        same = fmt_num(lo, 0) == fmt_num(hi, 0)
        facts.append(
            f"clock {fmt_num(lo, 0)} MHz throughout"
            if same
            else f"clock {fmt_num(lo, 0)}–{fmt_num(hi, 0)} MHz"
        )
    facts_text = f"; {'; '.join(facts)}" if facts else ""
    bullets = []
    if n_events:
        fired = "yes"
        where = ""
        if not events.empty:
            e = events.iloc[0]
            where = f" (first: {_rep_text(e['run'], e['rep'])}, {fmt_num(e['t_s'])} s into the rep)"
        evidence = (
            f"{_count(n_events, 'throttle/pressure reading')} in {_count(samples, 'sample')}{where}"
        )
        text = (
            f"Warning: the machine reported throttling or thermal pressure in "
            f"{_count(n_events, 'reading')} during the reps of {ctx.target}{where}; sources: "
            f"{sources}{facts_text}. Cells measured while it was throttled ran slower than the "
            "machine can: rotation spreads the loss over the arms, but absolute tok/s are lower, "
            "and a loss that grows over the run shows in the serial arm's drift below."
        )
        kind = "warning"
        if not events.empty:
            for (run, rep), grp in list(events.groupby(["run", "rep"], sort=True, dropna=False))[
                :10
            ]:
                details = "; ".join(
                    sorted({f"{s}: {d}" if isinstance(d, str) and d else str(s)
                            for s, d in zip(grp["sensor"], grp["detail"])})[:3]
                )  # fmt: skip
                bullets.append(
                    f"{_rep_text(run, rep)}: {_count(len(grp), 'reading')} from "
                    f"{fmt_num(grp['t_s'].min())} s into the rep ({details})"
                )
    elif observable is False:
        fired = "no (not observable)"
        evidence = (
            f"no source reports throttling here (only {sources}); {_count(samples, 'sample')}"
            f"{facts_text}"
        )
        text = (
            f"Thermal state: only {sources} was readable, and no source on this machine reports "
            "throttling or thermal pressure, so zero events does not rule throttling out. "
            f"{_count(samples, 'sample')} during the reps{facts_text}. The article's machine "
            "reported no pressure in 424 samples while losing 8.2%: the serial arm's drift below "
            "is the better evidence."
        )
        kind = ""
    else:
        fired = "no"
        evidence = f"no throttling or pressure in {_count(samples, 'sample')}{facts_text}"
        text = (
            f"Thermal state: no throttling or thermal pressure reported in "
            f"{_count(samples, 'sample')} during the reps (sources: {sources}{facts_text}). A "
            "quiet sensor is weak evidence (the article's machine reported no pressure while "
            "losing 8.2%): read it with the serial arm's drift below."
        )
        kind = ""
    errors = int(rows["errors"].fillna(0).sum()) if "errors" in rows else 0
    if errors:
        text += f" {_count(errors, 'reading')} failed (detail \"error: …\" in thermal.parquet)."
    table_ref = prov.Ref(
        tid, "table", f"Thermal state of {ctx.target} during its reps",
        prov.with_roles((ctx.cells, "source")), tid, parent=ctx.overview_id,
        metric={"name": "throttle_events", "value": n_events, "text": str(n_events)},
    )  # fmt: skip
    blocks = [heading, cooldown, Paragraph(text, kind)]
    if bullets:
        blocks.append(Bullets(bullets))
    blocks.append(
        Table(
            "Thermal samples per run",
            columns,
            table_rows,
            "Sampled about once a second from before each rep's warm-up to its last cell; an "
            "event is a reading with throttled set or a pressure other than nominal. The first "
            "event's time is seconds into its rep.",
            anchor=tid,
            row_ids=row_ids,
        )
    )
    blocks.append(Sources(ctx.cells, ctx.hashes, tid, (table_ref, *refs)))
    return Trap(name, fired, evidence, tid, tuple(blocks))


def burst_sentence(row) -> str:
    change = row.get("change")
    return (
        f"serial arm: burst {fmt_num(row['burst_tps'])} tok/s, plateau "
        f"{fmt_num(row['plateau_tps'])} tok/s ({fmt_change(1 + change, 1)})"
    )


def burst_trap(ctx, burst) -> Trap:
    name = "Drift (serial arm, burst vs plateau)"
    if burst is None:
        return Trap(name, "not checked", "burst.csv was not given")
    rows = _rows_of(burst, ctx.target)
    if rows.empty:
        return Trap(name, "n/a", "no serial cells to compare")
    r = rows.iloc[0].to_dict()
    tid = prov.integrity_id(ctx.target, "burst")
    change, n = r.get("change"), int(r.get("n_serial") or 0)
    burst_cells = sorted(_split(r.get("burst_cells")), key=prov.label_key)
    plateau_cells = sorted(_split(r.get("plateau_cells")), key=prov.label_key)
    if _missing(change):
        evidence = f"too few serial cells ({n}) to see a trend"
        text = f"Drift: {evidence}; run more reps to compare the first serial cells with the last."
        fired = "n/a"
    else:
        evidence = burst_sentence(r)
        fired = "yes" if change <= -DRIFT_THRESHOLD else "no"
        text = (
            f"Drift: {evidence} over {_count(n, 'serial cell')} spanning "
            f"{_duration(r.get('span_s'))}; the article lost {fmt_pct(ARTICLE_DRIFT, 1)}. Burst is "
            "the median of the first quarter of the serial cells in time order (runs pooled), "
            "plateau the median of the last half. The serial arm does the same work in every rep, "
            "so a trend in it is the machine drifting, not concurrency."
        )
        if fired == "yes":
            text += (
                f" A loss beyond {fmt_pct(DRIFT_THRESHOLD)} means the machine slowed during the "
                "run (heat, power or background load): rotation spreads it over the arms, but "
                "absolute tok/s depend on when they were measured; a cooldown between reps or "
                "a cooler machine narrows it."
            )
    ref = prov.Ref(
        tid, "table", f"Burst vs plateau of {ctx.target}'s serial arm: {evidence}",
        prov.with_roles((burst_cells, "burst"), (plateau_cells, "plateau")),
        tid, parent=ctx.overview_id,
        metric={"name": "change", "value": change,
                "text": "n/a" if _missing(change) else fmt_change(1 + change, 1)},
    )  # fmt: skip
    cells = sorted(set(burst_cells) | set(plateau_cells), key=prov.label_key)
    kind = "warning" if fired == "yes" else ""
    blocks = (Heading(4, "Drift"), Paragraph(text, kind, anchor=tid),
              Sources(cells, ctx.hashes_for(cells), tid, (ref,)))  # fmt: skip
    return Trap(name, fired, evidence, tid, blocks)


CLIENT_LEAD = "The client may have distorted these numbers: "


def client_warning(info: dict | None) -> Paragraph | None:
    """The warning shown before the headline table when the client self-check fired."""
    if not info or not _truthy(info.get("distorted")):
        return None
    sentence = str(info.get("sentence") or "")
    detail = sentence[len(CLIENT_LEAD) :] if sentence.startswith(CLIENT_LEAD) else sentence
    text = "Warning: the client could have distorted these numbers"
    return Paragraph(f"{text}: {detail}" if detail else f"{text}.", "warning")


def client_trap(ctx, client: dict | None) -> Trap:
    name = "Client distortion (self-check)"
    if client is None:
        return Trap(name, "not checked", "client.json was not given")
    info = client.get(ctx.target)
    if not info:
        return Trap(name, "not checked", f"client.json has no self-check for {ctx.target}")
    tid = prov.integrity_id(ctx.target, "client")
    distorted = _truthy(info.get("distorted"))
    lag_fired, cpu_fired = _truthy(info.get("lag_fired")), _truthy(info.get("cpu_fired"))
    assessed = _truthy(info.get("cpu_assessed"))
    over_lag = [str(c) for c in info.get("cells_over_lag") or []]
    over_cpu = [str(c) for c in info.get("cells_over_cpu") or []]
    early = [str(c) for c in info.get("early_cells") or []]
    columns = ["check", "measured", "threshold", "fired", "cells over it"]
    share = info.get("cpu_share")
    cpu_measured = (
        f"{fmt_pct(share, 1)} of an inter-token interval ({_ms(info.get('cpu_per_token_s'))} "
        f"of {_ms(info.get('inter_token_s'))}, worst cell {info.get('worst_cpu_cell')})"
        if assessed and not _missing(share)
        else "not assessed (no per-cell CPU times or no server generation times)"
    )
    table_rows = [
        ["send lag p95 (max)",
         f"{_ms(info.get('lag_p95_s'))} (max {_ms(info.get('lag_max_s'))})",
         _ms(info.get("lag_threshold_s")), "yes" if lag_fired else "no",
         ", ".join(over_lag) or "none"],
        ["client CPU per streamed token", cpu_measured,
         f"{fmt_pct(info.get('cpu_share_threshold'))} of an inter-token interval",
         ("yes" if cpu_fired else "no") if assessed else "n/a",
         ", ".join(over_cpu) or "none"],
    ]  # fmt: skip
    keys = ("lag", "cpu")
    row_ids = [prov.integrity_id(ctx.target, "client", k) for k in keys]
    worst = [str(info["worst_cpu_cell"])] if info.get("worst_cpu_cell") else []
    refs = []
    metrics = (
        {"name": "lag_p95_s", "value": info.get("lag_p95_s"), "text": table_rows[0][1]},
        {"name": "cpu_share", "value": share, "text": table_rows[1][1]},
    )
    for rid, row, flagged, metric, what in zip(
        row_ids, table_rows, (over_lag, over_cpu or worst), metrics,
        ("send lag of every request", "client CPU per streamed token"),
    ):  # fmt: skip
        refs.append(
            prov.Ref(
                rid, "table-row", f"Client self-check of {ctx.target}: {what}",
                prov.with_roles((flagged, "deviant"), (ctx.cells, "source")),
                anchor=rid, parent=tid, metric=metric, row=dict(zip(columns, row)),
            )
        )  # fmt: skip
    flagged = sorted(set(over_lag) | set(over_cpu) | set(early), key=prov.label_key)
    table_ref = prov.Ref(
        tid, "table", f"Client self-check of {ctx.target}",
        prov.with_roles((flagged, "deviant"), (ctx.cells, "source")), tid,
        parent=ctx.overview_id,
    )  # fmt: skip
    sentence = str(info.get("sentence") or "")
    if distorted:
        evidence = (
            "the client could have distorted these numbers ("
            + ", ".join(w for w, f in (("late sends", lag_fired), ("client CPU", cpu_fired)) if f)
            + f"): p95 send lag {_ms(info.get('lag_p95_s'))}"
        )
        if assessed and not _missing(share):
            evidence += f", CPU {fmt_pct(share, 1)} of an inter-token interval"
    else:
        evidence = f"client kept up: p95 send lag {_ms(info.get('lag_p95_s'))}"
        evidence += (
            f", CPU {fmt_pct(share, 1)} of an inter-token interval"
            if assessed and not _missing(share)
            else ", CPU not assessed"
        )
    how = (
        "The client checks itself: a request sent later than the moment its slot freed leaves "
        "the server idle (send lag), and a client that spends much CPU per streamed token takes "
        "it from a server on the same cores."
    )
    blocks = (
        Heading(4, "Client self-check"),
        Paragraph(sentence, "warning" if distorted else ""),
        Paragraph(how, "note"),
        Table("Client self-check", columns, table_rows, anchor=tid, row_ids=row_ids),
        Sources(ctx.cells, ctx.hashes, tid, (table_ref, *refs)),
    )
    return Trap(name, "yes" if distorted else "no", evidence, tid, blocks)


def _pct_g(x) -> str:
    """A precision target as a percent with the digits it was given: 0.05 -> 5%, 0.001 -> 0.1%."""
    return "n/a" if _missing(x) else f"{round(float(x) * 100, 6):g}%"


SUFFICIENCY_COLUMNS = ["arm", "metric", "reps", "value [95% CI]", "CI half-width", "target",
                       "meets target", "reps needed"]  # fmt: skip


def sufficiency_trap(ctx, suff) -> Trap:
    name = "Too few reps (interval width)"
    if suff is None:
        return Trap(name, "not checked", "sufficiency.csv was not given")
    rows = _rows_of(suff, ctx.target)
    if rows.empty:
        return Trap(name, "n/a", "no parallel arm to assess")
    tid = prov.integrity_id(ctx.target, "sufficiency")
    order = {m: i for i, m in enumerate(("speedup", "user_ratio", "ttft_ratio", "gen_gain",
                                         "pipelining"))}  # fmt: skip
    rows = rows.assign(_o=rows["metric"].map(lambda m: order.get(m, len(order))))
    rows = rows.sort_values(["arm", "_o", "metric"])
    table_rows, row_ids, refs = [], [], []
    for r in rows.to_dict("records"):
        arm, metric = int(r["arm"]), str(r["metric"])
        meets = _truthy(r.get("meets"))
        target_rel = r.get("target_rel")
        value = (
            f"{fmt_times(r['value'])} [{fmt_times(r['lo'])}, {fmt_times(r['hi'])}]"
            if not _missing(r.get("lo"))
            else fmt_times(r.get("value"))
        )
        rel = "n/a" if _missing(r.get("rel")) else f"±{float(r['rel']) * 100:.1f}%"
        table_rows.append([arm_name(arm), metric, _int_text(r.get("n_reps")), value, rel,
                           f"±{_pct_g(target_rel)}", "yes" if meets else "no",
                           _int_text(r.get("reps_needed"))])  # fmt: skip
        rid = prov.integrity_id(ctx.target, "sufficiency", f"arm{arm}", metric)
        row_ids.append(rid)
        refs.append(
            prov.Ref(
                rid, "table-row",
                f"Interval width of {ctx.target}, {arm_name(arm)}: {metric}",
                prov.metric_cells(ctx.index, ctx.target, arm, metric),
                anchor=rid, parent=tid,
                metric={"name": "rel_half_width", "value": r.get("rel"), "text": rel},
                row=dict(zip(SUFFICIENCY_COLUMNS, table_rows[-1])),
            )
        )  # fmt: skip
    misses = rows[~rows["meets"].map(_truthy)]
    n_reps = sorted({int(n) for n in rows["n_reps"].dropna()})
    reps_text = f"{n_reps[0]} reps" if len(n_reps) == 1 else "their reps"
    targets = sorted({float(t) for t in rows["target_rel"].dropna()})
    target_text = f"±{_pct_g(targets[0])}" if len(targets) == 1 else "their target"
    m = len(rows)
    if misses.empty:
        fired = "no"
        evidence = f"every interval meets {target_text} with {reps_text}"
        text = (
            f"Enough reps: every interval meets {target_text} with {reps_text} "
            f"({_count(m, 'interval')}: each headline ratio of each parallel arm, 95% bootstrap "
            "interval half-width relative to the value)."
        )
    else:
        fired = "yes"
        needed = pd.to_numeric(misses["reps_needed"], errors="coerce").max()
        widest = misses.loc[pd.to_numeric(misses["rel"], errors="coerce").fillna(float("inf"))
                            .idxmax()]  # fmt: skip
        need_text = "" if _missing(needed) else f"; about {int(needed)} reps would meet them all"
        evidence = (
            f"{len(misses)} of {_count(m, 'interval')} miss {target_text} with {reps_text}"
            f"{need_text}"
        )
        widest_rel = "n/a" if _missing(widest.get("rel")) else f"±{float(widest['rel']) * 100:.1f}%"
        text = (
            f"Too few reps: {evidence} if the spread stays as it is (widest: "
            f"{arm_name(widest['arm'])} {widest['metric']} {widest_rel}). An interval narrows "
            "as 1/√reps, so reps needed = reps × (half-width / target)²; fewer than 5 reps never "
            "count as meeting the target, since the bootstrap interval of so few is too narrow "
            "to trust. Read the headline's ratios with their intervals."
        )
    table_ref = prov.Ref(
        tid, "table", f"Interval width of every headline ratio of {ctx.target}",
        prov.with_roles((ctx.cells, "source")), tid, parent=ctx.overview_id,
    )  # fmt: skip
    blocks = (
        Heading(4, "Enough reps?"),
        Paragraph(text),
        Table("Interval width of each ratio", SUFFICIENCY_COLUMNS, table_rows,
              "CI half-width = (high − low) / 2 of the 95% bootstrap interval, relative to the "
              "value.", anchor=tid, row_ids=row_ids),
        Sources(ctx.cells, ctx.hashes, tid, (table_ref, *refs)),
    )  # fmt: skip
    return Trap(name, fired, evidence, tid, blocks)


def checks_traps(target, verdict, thresholds, ser_rows, deviance, shown: set) -> list[Trap]:
    """The checks shown earlier in the target's section, as overview lines."""
    traps = []
    detailed = [r for r in ser_rows if "n_cells" in r]
    if ser_rows:
        serialised = [arm_name(r["arm"]) for r in ser_rows if r["serialised"]]
        traps.append(
            Trap(
                "Serialised arm (server ran one request at a time)",
                "yes" if serialised else "no",
                (
                    f"{', '.join(serialised)} served one request at a time"
                    if serialised
                    else "every parallel arm ran its requests together"
                ),
                prov.serialisation_id(target) if detailed else "",
            )
        )
    verdict = verdict or {}
    bias, thr = verdict.get("rotation_bias"), thresholds["rotation"]
    if _missing(bias):
        traps.append(Trap("Rotation bias", "not checked", "no rotation bias was computed"))
    else:
        rid = prov.rotation_id(target)
        traps.append(
            Trap(
                "Rotation bias",
                "yes" if bias > thr else "no",
                f"rotation bias {fmt_pct(bias, 1)} against a {fmt_pct(thr)} threshold"
                + ("; headline refused" if verdict.get("refused") else ""),
                rid if rid in shown else "",
            )
        )
    rows = deviance[deviance["target"] == target] if not deviance.empty else deviance
    n = len(rows)
    traps.append(
        Trap(
            "Output deviance",
            "yes" if n else "no",
            (
                f"{_count(n, 'cell')} more than {fmt_pct(thresholds['deviance'])} from the modal "
                "output"
                if n
                else f"no cell more than {fmt_pct(thresholds['deviance'])} from the modal output"
            ),
            prov.deviance_id(target),
        )
    )
    return traps


def integrity_blocks(target, ctx: TargetContext, traps: list[Trap]) -> list:
    blocks: list = [
        Heading(3, "Measurement integrity"),
        Paragraph(
            "Each trap that could make these numbers wrong without any error, whether its "
            "detector fired, and the evidence; details and sources follow (those of the checks "
            "above are in their own sections). The control arm, when on, is reported here and "
            "never in the per-arm table."
        ),
    ]
    columns = ["trap", "fired", "evidence", "details"]
    rows = [[t.name, t.fired, t.evidence, t.ref_id or DASH] for t in traps]
    ref = prov.Ref(
        ctx.overview_id,
        "table",
        f"Measurement integrity of {target}: each trap, whether its detector fired, the evidence",
        prov.with_roles((ctx.cells, "source")),
        ctx.overview_id,
    )
    blocks.append(
        Table("Traps and detectors", columns, rows, anchor=ctx.overview_id, link_column=3)
    )
    blocks.append(Sources(ctx.cells, ctx.hashes, ctx.overview_id, (ref,)))
    for t in traps:
        blocks += list(t.blocks)
    return blocks
