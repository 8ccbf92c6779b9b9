"""Details of the thermal check: what each source said during the reps, per run, of the machine
the verdict names (this machine as client and server, or the client host alone)."""

from __future__ import annotations

from slotbench.core import hosts
from slotbench.core.fmt import count, fmt_int, fmt_num, missing
from slotbench.provenance import ids as prov
from slotbench.report.blocks import Bullets, Heading, Paragraph, Table
from slotbench.report.traps import quiet_evidence

TRAP = "thermal"
COLUMNS = ["run", "samples", "sources", "max °C", "clock MHz (min–max)",
           "throttle/pressure events", "first event", "read errors"]
NOTE = (
    "Sampled about once a second from before each rep's warm-up to its last cell; an event is a "
    "reading with throttled set or a pressure other than nominal. The first event's time is "
    "seconds into its rep."
)


def cooldown_line(cooldown: dict) -> str:
    """Cooldown between reps as the fingerprints recorded it (0 = none)."""
    known = {run: v for run, v in cooldown.items() if v is not None}
    if not known:
        return "Cooldown between reps: not recorded in the fingerprint."

    def text(v) -> str:
        return "none, 0 s" if float(v) == 0 else f"{float(v):g} s"

    if len(set(known.values())) == 1 and len(known) == len(cooldown):
        return (f"Cooldown between reps: {text(next(iter(known.values())))} (recorded in the "
                "fingerprint).")
    per_run = ", ".join(f"{text(v)} in {run}" if v is not None else f"not recorded in {run}"
                        for run, v in sorted(cooldown.items()))
    return f"Cooldown between reps: {per_run} (recorded in the fingerprint)."


def machine_of(verdict: dict) -> str:
    """The machine a verdict describes; one from before it was named reads as one with no
    fingerprint would (slotbench.measure.fingerprint.described_machine)."""
    return verdict["evidence"].get("machine") or hosts.SHARED


def _text(verdict: dict) -> tuple[str, str]:
    ev = verdict["evidence"]
    machine = machine_of(verdict)
    the, aside = hosts.the(machine), hosts.not_described(machine)
    facts = f"; {'; '.join(ev['facts'])}" if ev["facts"] else ""
    samples, sources = count(ev["samples"], "sample"), ev["sources"]
    if verdict["fired"]:
        effect = (
            "Cells measured while it was throttled ran slower than the machine can: rotation "
            "spreads the loss over the arms, but absolute tok/s are lower, and a loss that grows "
            "over the run shows in the serial arm's drift below."
            if machine == hosts.SHARED else
            "A throttled client reads the streams late: cells measured then may carry the "
            "client's delay in their timings, not the server's.")
        return "warning", (
            f"Warning: {the} reported throttling or thermal pressure in "
            f"{count(ev['events'], 'reading')} during the reps of {verdict['target']}; sources: "
            f"{sources}{facts}. {effect}{aside}"
        )
    if not verdict["assessable"]:
        return "", (
            f"Thermal state of {the}: not assessable: only {sources} was readable, and no source "
            "on it reports throttling or thermal pressure, so zero events does not rule "
            f"throttling out. {samples} during the reps{facts}. The article's machine reported "
            "no pressure in 424 samples while losing 8.2%: the serial arm's drift below is the "
            f"better evidence.{aside}"
        )
    return "", (
        f"Thermal state of {the}: no throttling or thermal pressure reported in {samples} during "
        f"the reps (sources: {sources}{facts}). A quiet sensor is weak evidence (the article's "
        "machine reported no pressure while losing 8.2%): read it with the serial arm's drift "
        f"below.{aside}"
    )


def render(verdict: dict, ctx) -> list:
    ev = verdict["evidence"]
    machine = machine_of(verdict)
    the = hosts.the(machine)
    heading = Heading(4, hosts.titled("Thermal state", machine))
    cooldown = Paragraph(cooldown_line(ev["cooldown_s"]))
    tid = prov.integrity_id(ctx.target, "thermal")
    if not ev["samples"]:
        text = (
            f"Thermal state of {the}: no thermal source readable on it. The sampler found no "
            "thermal zone, CPU clock, pmset or nvidia-smi it could read, so throttling was "
            "neither seen nor ruled out; the serial arm's burst-vs-plateau drift below is the "
            f"only evidence of thermal decay.{hosts.not_described(machine)}"
        )
        return [heading, cooldown, *quiet_evidence(ctx, "thermal", text, verdict["title"])]
    kind, text = _text(verdict)
    if ev["errors"]:
        text += (
            f" {count(ev['errors'], 'reading')} failed (detail \"error: …\" in thermal.parquet)."
        )
    table_rows, row_ids, refs = [], [], []
    for r in ev["rows"]:
        run = str(r["run"])
        first = "—"
        if run in ev["first_events"]:
            e = ev["first_events"][run]
            first = f"rep {fmt_int(e['rep'])} at {fmt_num(e['t_s'])} s"
        elif not missing(r.get("first_event_t_s")):
            first = f"at {fmt_num(r['first_event_t_s'])} s"
        lo, hi = r.get("min_freq_mhz"), r.get("max_freq_mhz")
        clock = "n/a" if missing(lo) else f"{fmt_num(lo, 0)}–{fmt_num(hi, 0)}"
        table_rows.append([run, fmt_int(r["samples"]), str(r.get("sources") or "none"),
                           fmt_num(r.get("max_temp_c")), clock, fmt_int(r.get("throttle_events")),
                           first, fmt_int(r.get("errors"))])
        rid = prov.integrity_id(ctx.target, "thermal", run)
        row_ids.append(rid)
        refs.append(prov.Ref(
            rid, "table-row", f"Thermal samples of {the}, {ctx.target}/{run} (during its reps)",
            prov.with_roles((ctx.index.labels(ctx.target, run=run), "source")), anchor=rid,
            parent=tid, metric={"name": "throttle_events", "value": r.get("throttle_events"),
                                "text": table_rows[-1][5]},
            row=dict(zip(COLUMNS, table_rows[-1])),
        ))
    table_ref = prov.Ref(
        tid, "table", f"Thermal state of {the} during the reps of {ctx.target}",
        prov.with_roles((ctx.cells, "source")), tid, parent=ctx.overview_id,
        metric={"name": "throttle_events", "value": ev["events"], "text": str(ev["events"])},
    )
    blocks = [heading, cooldown, Paragraph(text, kind)]
    if ev["event_groups"]:
        blocks.append(Bullets([g["text"] for g in ev["event_groups"]]))
    blocks += [Table(f"Thermal samples of {the}, per run", COLUMNS, table_rows, NOTE, anchor=tid,
                     row_ids=row_ids),
               ctx.sources(ctx.cells, tid, (table_ref, *refs))]
    return blocks
