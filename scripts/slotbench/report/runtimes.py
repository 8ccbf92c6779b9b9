"""How long each shipped config takes: timings read from finished runs, kept in
docs/run-times.json, and the page docs/run-times.md made from them.

``timing(results)`` reads one run's results directory: which shipped config made it (its
config.resolved.yaml), the machine and date (its fingerprints), the wall time from its first
job's start to its last output (Snakemake's metadata records, in the working directory's
.snakemake/metadata), the time its reps measured (each raw file's started_unix to
finished_unix) and the serial arm's tok/s (analysis/summary.csv), which sets how long the same
config takes on another machine; for ``reps: auto``, why its reps stopped
(analysis/stopping.csv), since there the data set their number. ``page(timings)`` is the page;
nothing else in the documentation states how long a shipped config takes.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from slotbench.core.cells import arm_name
from slotbench.measure.workload import describe as describe_workload
from slotbench.measure.workload import is_article
from slotbench.report import results_dir as rd
from slotbench.workflow.archive import METADATA_DIR, metadata_record

RECORD = "docs/run-times.json"
PAGE = "docs/run-times.md"
COMMAND = "python -m slotbench docs --run-times RESULTS_DIR..."
# shipped configs that measure a server of your own: their time is your server's
YOURS = ("config/ollama.yaml", "config/openai.yaml")


def workdir_of(results: Path) -> Path:
    """The working directory Snakemake ran in: the nearest directory above ``results`` with
    Snakemake's metadata."""
    for parent in Path(results).resolve().parents:
        if (parent / METADATA_DIR).is_dir():
            return parent
    raise rd.ResultsDirError(f"no {METADATA_DIR} above {results}: give a results directory "
                             "inside the working directory Snakemake ran in")


def job_span(results: Path) -> tuple[float, float]:
    """(first job's start, last output's time) of the files in ``results``, unix seconds."""
    workdir = workdir_of(results)
    starts, ends = [], []
    for path in Path(results).resolve().rglob("*"):
        if not path.is_file():
            continue
        meta = workdir / metadata_record(path.relative_to(workdir).as_posix())
        if meta.is_file():
            record = json.loads(meta.read_text(encoding="utf-8"))
            if record.get("starttime") and record.get("endtime"):
                starts.append(float(record["starttime"]))
                ends.append(float(record["endtime"]))
    if not starts:
        raise rd.ResultsDirError(f"{workdir / METADATA_DIR} has no record of a file in "
                                 f"{results}: was it moved from another working directory?")
    return min(starts), max(ends)


def timing(results: Path, repo: Path = rd.REPO) -> dict:
    """One finished run's timings (see the module's doc)."""
    results = Path(results)
    cfg = rd.resolved_config(results)
    files = rd.shipped_config(cfg, repo)
    if files is None:
        raise rd.ResultsDirError(
            f"{results}/config.resolved.yaml is none of the shipped configs (config/config.yaml "
            "alone, or with one or two of config/*.yaml): run times are recorded for those")
    fps = rd.fingerprints(results)
    raws = sorted(rd.need(results, "raw").glob("*/*/rep*.json"))
    if not raws:
        raise rd.ResultsDirError(f"{results}/raw holds no raw file: give the results directory "
                                 "of a finished run")
    reps = [rd.read_json(results, str(p.relative_to(results))) for p in raws]
    summary = rd.need(results, "analysis/summary.csv").read_text(encoding="utf-8")
    start, end = job_span(results)
    return {
        "command": rd.command(files),
        "measured_utc": rd.measured_utc(fps),
        "machine": rd.machine(fps),
        "commit": rd.commit(fps),
        "wall_s": round(end - start, 1),
        "measuring_s": round(sum(r["finished_unix"] - r["started_unix"] for r in reps), 1),
        "targets": len({str(r["target"]) for r in reps}),
        "runs": len({(str(r["target"]), str(r["run"])) for r in reps}),
        "reps": len(reps),
        "arms": sorted({int(c["arm"]) for r in reps for c in r["cells"]}),
        "requests": sum(len(c["requests"]) for r in reps for c in r["cells"]),
        "num_predict": int(cfg["num_predict"]),
        **({"workload": describe_workload(cfg["workload"])}
           if not is_article(cfg.get("workload")) else {}),
        "serial_tps": rd.serial_tps(list(csv.DictReader(summary.splitlines()))),
        **({"stopped": stop} if (stop := stopped(results)) else {}),
    }


def stopped(results: Path) -> str | None:
    """The last look's decision of a sequential run (analysis/stopping.csv); None for a fixed
    number of reps, which has no trail."""
    path = Path(results) / "analysis/stopping.csv"
    if not path.is_file():
        return None
    rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    if not rows:
        raise rd.ResultsDirError(f"{path} has no look: give the results directory of a "
                                 "finished run")
    return max(rows, key=lambda r: int(r["look"]))["look_decision"]


def recorded(timings: list[dict], new: list[dict]) -> list[dict]:
    """The recorded timings with ``new`` ones in place of those of the same command, in the
    order of the shipped ways to run."""
    by_command = {t["command"]: t for t in timings} | {t["command"]: t for t in new}
    order = {rd.command(files): i for i, files in enumerate(rd.candidates())}
    return sorted(by_command.values(), key=lambda t: (order.get(t["command"], len(order)),
                                                      t["command"]))


def load(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


def dump(timings: list[dict]) -> str:
    return json.dumps(timings, indent=2, ensure_ascii=False) + "\n"


def duration(seconds: float) -> str:
    """61.4 -> "1 min 1 s"; 48.2 -> "48 s"."""
    whole = round(seconds)
    minutes, secs = divmod(whole, 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def what(t: dict) -> str:
    arms = ", ".join(arm_name(a) for a in t["arms"])
    targets = f"{t['targets']} targets, " if t["targets"] > 1 else ""
    auto = f" (reps: auto, stopped {t['stopped']})" if t.get("stopped") else ""
    return (f"{targets}{t['runs']} run{'s' if t['runs'] > 1 else ''}, {t['reps']} reps{auto}; "
            f"{arms}; {t['requests']:,} requests of "
            + (f"the workload {t['workload']}" if t.get("workload")
               else f"≤{t['num_predict']} tokens"))


PAGE_HEAD = f"""# Run times

How long each shipped config took on a real run, from its first job's start to its report
(setup excluded; Snakemake's own start, about 2 s, not counted). This page is the one place
the documentation states it. It is generated: `.venv/bin/{COMMAND}` reads the timings of
finished runs (a results directory each: its Snakemake metadata, raw files, fingerprints and
resolved config), keeps them in [run-times.json](run-times.json), one run per command, and
rewrites this page; `.venv/bin/python -m slotbench docs --check` fails when the page is not what
the kept timings give.

On your machine a run takes about as long as the time below scaled by the serial tok/s: the
"serial tok/s" column is the serial arm's aggregate rate in that run (its first target's), and your own run's is in
its report (the per-arm table's serial-1 row). Most of a run is its reps ("measuring"); the
rest is the server's start, warm-ups, the analysis, figures and report.
"""


def layered(files: tuple[str, ...], repo: Path) -> tuple[str, ...]:
    """A file whose own comment says to layer it on the smoke config, with the smoke config."""
    smoke = "config/smoke.yaml"
    if files and smoke not in files and f"--configfile {smoke} {files[0]}" in (
            repo / files[0]).read_text(encoding="utf-8"):
        return (smoke, *files)
    return files


def page(timings: list[dict], repo: Path = rd.REPO) -> str:
    machines: dict[str, int] = {}
    for t in timings:
        machines.setdefault(rd.machine_text(t["machine"]), len(machines) + 1)
    lines = [PAGE_HEAD.rstrip("\n"), "",
             "| command | what it measures | time | of it measuring | serial tok/s | measured |",
             "| --- | --- | --- | --- | --- | --- |"]
    for t in timings:
        n = machines[rd.machine_text(t["machine"])]
        mark = f", machine {n}" if len(machines) > 1 else ""
        serial = "—" if t.get("serial_tps") is None else f"{t['serial_tps']:g}"
        lines.append(f"| `{t['command']}` | {what(t)} | {duration(t['wall_s'])} | "
                     f"{duration(t['measuring_s'])} | {serial} | "
                     f"{t['measured_utc']}, pipeline {t['commit']}{mark} |")
    lines.append("")
    if len(machines) == 1:
        lines.append(f"Measured on {next(iter(machines))}.")
    else:
        lines += [f"Machine {n}: {name}." for name, n in machines.items()]
    used = {word for t in timings for word in t["command"].split()}
    singles = [f for f in rd.candidates(repo) if len(f) < 2 and not set(f) & set(YOURS)]
    matrices = [f[0] for f in singles if f and "matrix" in f[0]]
    missing = [rd.command(layered(f, repo)) for f in singles
               if not set(f) & (used | set(matrices))
               and rd.command(f) not in {t["command"] for t in timings}]
    if missing:
        lines += ["", "No run recorded yet: " + ", ".join(f"`{m}`" for m in missing) + "."]
    if matrices:
        lines += ["", "The target matrices (" + ", ".join(f"`{m}`" for m in matrices) + ") run "
                  "their endpoints side by side with `--cores 2 --jobs 2`: how that divides the "
                  "time is measured in [benchmarks/RESULTS.md]"
                  "(../benchmarks/RESULTS.md#5-a-target-matrix-fanned-out)."]
    lines += ["", " and ".join(f"`{rd.command((f,))}`" for f in YOURS)
              + " measure a server of your own, so their time is your server's; run the smoke "
              "size first ([Quick starts](targets.md#quick-starts))."]
    return "\n".join(lines) + "\n"
