"""Archive a run so it can be audited, verify an archive, and re-render its report offline.

``snakemake --cores 1 archive`` writes results/<experiment>/archive/<name>.tar.gz (``<name>``:
the experiment's, unless archive.name says otherwise): the experiment's raw files with their
recorded SHA-256s, every derived table, figure, check and log, the fingerprints, the resolved
config, the report, the Snakemake metadata of those files, ``pip freeze`` and the pipeline's git
state, all under one top-level directory ``<name>/`` (the results at their paths in the working
directory, ``<name>/results/<experiment>/…``, and no other experiment's) and listed with their
SHA-256 in ``<name>/MANIFEST.sha256`` (``sha256sum -c`` format). No environment variable goes
in, and the archive is refused if any member contains the value of a target's ``api_key_env``.

``python -m slotbench archive-verify FILE`` checks every member against the manifest; ``python -m
slotbench archive-render FILE --out DIR`` re-runs consolidation → checks → analysis → figures →
report from the archived raw files with no server (the measuring rules are not even in the DAG) and
compares the tables with the archived ones byte for byte. An archive made before experiments had
their own folders (its results directly in ``results/``) re-renders in that layout, as it was made.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath

from slotbench.core.cli import Parser
from slotbench.core.code import REPO
from slotbench.core.experiments import RESOLVED_CONFIG, RESULTS, prefix_in, split
from slotbench.measure.fingerprint import pipeline_version
from slotbench.measure.rawfiles import RawFileChanged, verify_raw_file
from slotbench.workflow.rerender import compare_tables
from slotbench.workflow.smkstate import record_path

FORMAT = "slotbench.archive/1"
MANIFEST = "MANIFEST.sha256"
METADATA_DIR = ".snakemake/metadata"
# What goes in, relative to the experiment's folder (besides the files the rule names as input).
RESULT_DIRS = ["raw", "plan", "fingerprint", "checks", "analysis", "figures", "logs"]
RESULT_GLOBS = [
    "*.parquet", "servers.json", RESOLVED_CONFIG, "report.md", "report.html", "provenance.json",
]
# The checkout that re-renders an archive: its rules and code, never its results.
WORKFLOW = ["Snakefile", "rules", "scripts", "config", "envs", "profiles", "report"]
# Rules a re-render may run: none of them talks to a server. fingerprint, plan and rep are not
# in the DAG at all, so their outputs are read as they were archived.
RENDER_RULES = ["consolidate_block", "consolidate", "checks", "analyse", "paired", "figures",
                "report", "all"]


class ArchiveError(RuntimeError):
    """The archive cannot be written, read or trusted; the message says which file and why."""


# ---------------------------------------------------------------------------------------------
# writing

CONFIG_HEADER = (
    "# slotbench: the resolved configuration (every default filled in, validated) that produced\n"
    "# these results. Run the same experiment, or re-render an archive, with\n"
    "#   snakemake --cores 1 --configfile {path}\n"
)


def dump_config(cfg: dict, path: str | Path) -> str:
    """The resolved config as YAML that resolves to itself again (dates stay strings), for the
    file ``path`` (its header names it)."""
    import yaml  # only the rule that writes the config needs it

    return (CONFIG_HEADER.format(path=Path(path).as_posix())
            + yaml.safe_dump(cfg, sort_keys=True, allow_unicode=True, width=100))


def metadata_record(path: str, max_len: int = 255) -> str:
    """Where Snakemake's file persistence keeps the metadata record of output ``path``."""
    return record_path(METADATA_DIR, path, max_len)


def _name_max(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX") or 255
    except (OSError, ValueError):
        return 255


def collect(workdir: Path, results: str, inputs: list[str] = (), exclude: list[str] = (),
            max_len: int = 255) -> list[str]:
    """Relative paths of the result files of the experiment whose folder is ``results`` (e.g.
    results/smoke) to archive, sorted; temporary files are skipped.

    Besides the named inputs, directories and files, any other file in the experiment's folder
    that a rule produced (it has a Snakemake metadata record) goes in too, so a new stage's
    outputs are not silently left out; its archive/ never does, nor another experiment's file.
    """
    workdir = Path(workdir)
    excluded = {os.path.normpath(p) for p in exclude}
    found = {os.path.normpath(os.path.relpath(p, workdir) if os.path.isabs(p) else p)
             for p in inputs}
    for pattern in RESULT_GLOBS:
        found.update(str(p.relative_to(workdir)) for p in (workdir / results).glob(pattern))
    for directory in RESULT_DIRS:
        found.update(str(p.relative_to(workdir))
                     for p in (workdir / results / directory).rglob("*"))
    for path in (workdir / results).rglob("*"):
        rel = path.relative_to(workdir).as_posix()
        if not rel.startswith(f"{results}/archive/") and path.is_file() and (
            workdir / metadata_record(rel, max_len)
        ).is_file():
            found.add(str(Path(rel)))
    keep = []
    for rel in found:
        path = workdir / rel
        if rel in excluded or not path.is_file() or path.is_symlink():
            continue
        if split(rel)[0] != results:  # an input of another experiment's: never
            continue
        if any(part.startswith(".") or part == "__pycache__" for part in Path(rel).parts):
            continue  # .rep1.json.XXXX.tmp from an interrupted atomic write, caches
        keep.append(Path(rel).as_posix())
    return sorted(keep)


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"# {' '.join(cmd)} could not run: {exc}\n"
    if proc.returncode != 0:
        return f"# {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}\n"
    return proc.stdout


def code_state(repo: Path = REPO) -> tuple[dict, str | None]:
    """The pipeline's git commit and dirty flag (as the fingerprints record them), the work
    tree's status lines, and ``git diff HEAD`` when dirty (untracked files are only listed)."""
    version = pipeline_version(repo)
    status = _run(["git", "-C", str(repo), "status", "--porcelain"])
    diff = None
    if version["dirty"]:
        diff = _run(["git", "-C", str(repo), "diff", "HEAD", "--no-color"])
    return version | {"repo": repo.name, "status": status.splitlines()}, diff


def generated_members(name: str, created_utc: str) -> dict[str, bytes]:
    """The members that describe the software rather than the results."""
    code, diff = code_state()
    freeze = _run([sys.executable, "-m", "pip", "freeze", "--all"])
    out = {
        "ARCHIVE.json": {
            "format": FORMAT, "name": name, "created_utc": created_utc,
            "python": platform.python_version(), "platform": platform.platform(),
            "code": {k: code[k] for k in ("commit", "dirty")},
            "render": f"python -m slotbench archive-render {name}.tar.gz --out DIR",
        },
        "code/git.json": code,
        "software/pip-freeze.txt": freeze,
    }
    if diff is not None:
        out["code/git.diff"] = diff
    return {
        k: (json.dumps(v, indent=1, sort_keys=True) + "\n" if isinstance(v, dict) else v).encode()
        for k, v in out.items()
    }


def secret_values(names: list[str]) -> dict[str, bytes]:
    """Values of the named environment variables that are set (the API keys to keep out)."""
    return {n: os.environ[n].encode() for n in names if os.environ.get(n)}


def _check_secret(member: str, data: bytes, secrets: dict[str, bytes]) -> None:
    for env, value in secrets.items():
        if value in data or value in member.encode():
            raise ArchiveError(
                f"{member} contains the value of ${env} (the API key of a target's api_key_env); "
                "no archive was written. Remove the key from that file (or unset the variable "
                "if the match is a coincidence: archiving sends no request) and rerun"
            )


def _tarinfo(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, mtime, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build_archive(out: str | Path, name: str, *, results: str, workdir: str | Path = ".",
                  inputs: list[str] = (), secret_envs: list[str] = (),
                  exclude: list[str] = ()) -> dict:
    """Write the archive of the experiment whose folder is ``results`` (relative to
    ``workdir``) atomically; return what went in (members, bytes, seconds)."""
    started = time.monotonic()
    workdir, out = Path(workdir), Path(out)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    secrets = secret_values(list(secret_envs))
    meta_dir = workdir / METADATA_DIR
    max_len = _name_max(meta_dir) if meta_dir.is_dir() else 255
    files = collect(workdir, results, list(inputs), [str(out), *exclude], max_len)
    for rel in files:  # an archive of a raw file that changed since it was written is no record
        if split(rel)[1].startswith("raw/") and rel + ".sha256" in files:
            try:
                verify_raw_file(workdir / rel, workdir / (rel + ".sha256"))
            except RawFileChanged as exc:
                raise ArchiveError(f"{exc} No archive was written.") from None
    records = [metadata_record(rel, max_len) for rel in files]
    members = files + sorted(r for r in records if (workdir / r).is_file())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    manifest = []
    try:
        with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:

            def add(rel: str, data: bytes, mtime: float) -> None:
                _check_secret(rel, data, secrets)
                manifest.append(f"{hashlib.sha256(data).hexdigest()}  {rel}\n")
                tar.addfile(_tarinfo(f"{name}/{rel}", len(data), mtime), io.BytesIO(data))

            for rel in members:
                path = workdir / rel
                add(rel, path.read_bytes(), path.stat().st_mtime)
            now = time.time()
            for rel, data in generated_members(name, created).items():
                add(rel, data, now)
            text = "".join(sorted(manifest, key=lambda line: line[66:])).encode()
            tar.addfile(_tarinfo(f"{name}/{MANIFEST}", len(text), now), io.BytesIO(text))
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"path": str(out), "members": len(manifest) + 1, "files": len(files),
            "metadata_records": len(members) - len(files), "bytes": out.stat().st_size,
            "seconds": time.monotonic() - started}


# ---------------------------------------------------------------------------------------------
# reading and verifying


def _prefix(members: list[tarfile.TarInfo], archive: Path) -> str:
    """The single top-level directory every member sits under; unsafe names are refused."""
    tops = set()
    for m in members:
        parts = PurePosixPath(m.name).parts
        if m.name.startswith("/") or ".." in parts or len(parts) < 2:
            raise ArchiveError(f"{archive}: member {m.name!r} is outside the archive's directory")
        tops.add(parts[0])
    if len(tops) != 1:
        raise ArchiveError(f"{archive}: members under {sorted(tops)}, expected one directory")
    return tops.pop()


def read_archive(archive: str | Path) -> tuple[str, dict[str, bytes]]:
    """(top-level directory, relative member path -> bytes) of a slotbench archive."""
    archive = Path(archive)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            prefix = _prefix(members, archive)
            data = {}
            for m in members:
                if m.isdir():
                    continue
                if not m.isfile():
                    raise ArchiveError(f"{archive}: member {m.name} is not a regular file")
                data[m.name[len(prefix) + 1 :]] = tar.extractfile(m).read()
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ArchiveError(f"{archive}: cannot read it as a .tar.gz archive ({exc})") from None
    return prefix, data


def check_manifest(prefix: str, data: dict[str, bytes]) -> list[str]:
    """Problems found comparing every member with MANIFEST.sha256 (empty when all match)."""
    if MANIFEST not in data:
        return [f"{prefix}/{MANIFEST} is missing: this is not a slotbench archive"]
    listed = {}
    for number, line in enumerate(data[MANIFEST].decode(errors="replace").splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not match:
            return [f"{prefix}/{MANIFEST} line {number} is not a sha256sum line: {line!r}"]
        listed[match.group(2)] = match.group(1)
    problems = []
    for rel in sorted(set(listed) | set(data) - {MANIFEST}):
        if rel not in data:
            problems.append(f"{prefix}/{rel}: listed in the manifest but missing")
        elif rel not in listed:
            problems.append(f"{prefix}/{rel}: in the archive but not in the manifest")
        elif (actual := hashlib.sha256(data[rel]).hexdigest()) != listed[rel]:
            problems.append(f"{prefix}/{rel}: SHA-256 {actual}, the manifest says {listed[rel]}")
    return problems


def verify(archive: str | Path) -> tuple[str, dict[str, bytes]]:
    """Read and verify an archive; ArchiveError lists every mismatching member."""
    prefix, data = read_archive(archive)
    problems = check_manifest(prefix, data)
    if problems:
        raise ArchiveError(
            f"{archive}: {len(problems)} member(s) do not match {prefix}/{MANIFEST}:\n  "
            + "\n  ".join(problems)
        )
    return prefix, data


# ---------------------------------------------------------------------------------------------
# re-rendering


def copy_workflow(dest: Path, repo: Path = REPO) -> None:
    """The rules and code of this checkout (never its results or metadata) into ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for item in WORKFLOW:
        src = repo / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, dest / item)


def extract(archive: Path, prefix: str, dest: Path) -> None:
    """Members into ``dest`` without their top-level directory, modification times kept (the
    Snakemake metadata and mtimes say the archived outputs are up to date)."""
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            stripped = copy.copy(member)
            stripped.name = member.name[len(prefix) + 1 :]
            tar.extract(stripped, dest, filter="data")


def render_command(config: str, old_layout: bool = False) -> list[str]:
    """The re-render's Snakemake command, with the archived resolved config ``config``; an
    archive made before experiments had their own folders (``old_layout``) renders in place,
    in results/ itself (rules/common.smk: old_layout)."""
    return [
        sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", config,
        *(["--config", "old_layout=true"] if old_layout else []),
        "--forcerun", "consolidate_block", "--allowed-rules", *RENDER_RULES,
    ]


def render(archive: str | Path, out: str | Path, stream=sys.stdout) -> int:
    """Verify, extract into ``out`` with this checkout's workflow, re-render, compare tables."""
    archive, out = Path(archive), Path(out)
    prefix, data = verify(archive)
    print(f"verified: {len(data)} members of {archive} match {prefix}/{MANIFEST}", file=stream)
    if out.exists() and any(out.iterdir()):
        raise ArchiveError(f"{out} is not empty; re-render into a new or empty directory")
    folder = prefix_in(data)  # results/<experiment>/, or results/ in an archive from before
    config = folder + RESOLVED_CONFIG
    if config not in data:
        raise ArchiveError(f"{archive} has no {RESULTS}/<experiment>/{RESOLVED_CONFIG}; it "
                           "cannot be re-rendered")
    out.mkdir(parents=True, exist_ok=True)
    copy_workflow(out)
    extract(archive, prefix, out)
    print(f"extracted into {out} with the workflow of {REPO}", file=stream)
    cmd = render_command(config, old_layout=folder == f"{RESULTS}/")
    print("re-rendering: " + " ".join(cmd[1:]), file=stream, flush=True)
    proc = subprocess.run(cmd, cwd=out)
    if proc.returncode != 0:
        print(f"re-render FAILED: snakemake exited {proc.returncode} (see its output above)",
              file=stream)
        return 1
    rows = compare_tables(data, out)
    width = max(len(what) for what, _, _ in rows) if rows else 0
    print("\ntables, archived vs re-rendered:", file=stream)
    for what, same, detail in rows:
        print(f"  {'identical' if same else 'DIFFERS  '}  {what:<{width}}  {detail}", file=stream)
    differing = [what for what, same, _ in rows if not same]
    if not rows:
        print("re-render: the archive holds no tables to compare", file=stream)
        return 1
    if differing:
        print(f"re-render: {len(differing)} of {len(rows)} tables differ from the archive",
              file=stream)
        return 1
    more = sum("this version adds" in detail for _, _, detail in rows)
    print(f"re-render: all {len(rows)} tables are byte-identical to the archive" + (
        f" ({more} in every archived column and row, beside what this version adds)"
        * bool(more)),
        file=stream)
    return 0


# ---------------------------------------------------------------------------------------------
# command line (python -m slotbench archive-verify / archive-render)


def main_verify(argv: list[str]) -> int:
    parser = Parser(
        prog="slotbench archive-verify",
        description="Check every member of a slotbench archive against its MANIFEST.sha256.",
        examples=[".venv/bin/slotbench archive-verify results/smoke/archive/smoke.tar.gz"],
    )
    parser.add_argument("archive", help="results/<experiment>/archive/<name>.tar.gz")
    args = parser.parse_args(argv)
    try:
        prefix, data = verify(args.archive)
    except ArchiveError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"OK: {args.archive}: all {len(data) - 1} members match {prefix}/{MANIFEST}")
    return 0


def main_render(argv: list[str]) -> int:
    parser = Parser(
        prog="slotbench archive-render",
        examples=[".venv/bin/slotbench archive-render results/smoke/archive/smoke.tar.gz "
                  "--out /tmp/rerender"],
        description="Verify an archive, extract it with this checkout's workflow and re-render "
        "the report from its raw files, without any server; the tables must come out "
        "byte-identical.",
    )
    parser.add_argument("archive", help="results/<experiment>/archive/<name>.tar.gz")
    parser.add_argument("--out", required=True, help="a new or empty directory")
    args = parser.parse_args(argv)
    try:
        return render(args.archive, args.out)
    except ArchiveError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
