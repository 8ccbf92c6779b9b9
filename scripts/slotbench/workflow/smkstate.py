"""What an interrupted Snakemake leaves behind, and how the next plain run gets past it.

A Snakemake killed with SIGKILL (or a machine that lost power) leaves its lock in
``.snakemake/locks`` and marks the outputs of the jobs it was running as incomplete in
``.snakemake/incomplete``. Left alone, the next run refuses to start ("Directory cannot be
locked") or refuses the marked files ("Incomplete files detected"), and ``--rerun-incomplete``
would throw a measured rep away. Before Snakemake looks, the workflow (rules/common.smk, through
``settle``):

- removes the lock when it was taken on this machine and no other Snakemake (nor a job of one)
  works in the directory any more (read from /proc; without /proc, or for a lock taken on
  another machine, the lock stays and Snakemake's ``--unlock`` applies);
- keeps a raw file marked incomplete that is complete, i.e. it matches the SHA-256 recorded with
  it (the rep finished just as Snakemake died), and clears its mark; one that does not match is
  deleted with its hash, so that rep is measured again;
- keeps plans and fingerprints (written atomically, so whole if they exist);
- deletes any other output marked incomplete (a derived file: it costs a re-render).

It also names a results/ left by a slotbench from before experiments had their own folders
(core/experiments.py): left as it is, with the command that keeps it as an experiment.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from base64 import urlsafe_b64decode, urlsafe_b64encode
from pathlib import Path

from slotbench.core.experiments import RESULTS, old_layout_note, split
from slotbench.measure.rawfiles import RawFileChanged, verify_raw_file

STATE = Path(".snakemake")
# the host of the last Snakemake to start here: a lock taken on another machine (a shared file
# system) cannot be judged from this machine's processes, so it stays
HOST = STATE / "slotbench-host"


def record_path(subject: str | Path, path: str, max_len: int = 255) -> str:
    """Where Snakemake's file persistence keeps its record of output ``path`` under ``subject``
    (``.snakemake/metadata`` or ``.snakemake/incomplete``).

    Mirrors snakemake.persistence.file.FilePersistence._record_path: the URL-safe base64 of the
    path relative to the working directory, split into directories of at most ``max_len - 1``
    characters, all but the last prefixed with "@".
    """
    b64 = urlsafe_b64encode(path.encode()).decode()
    parts = [b64[i : i + max_len - 1] for i in range(0, len(b64), max_len - 1)]
    parts = ["@" + p for p in parts[:-1]] + parts[-1:]
    return "/".join([str(subject), *parts])


def _ancestors() -> set[int]:
    """This process and the ones that started it (a shell running this Snakemake is not
    another Snakemake at work)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def others_at_work(workdir: Path = Path(".")) -> list[int] | None:
    """PIDs of other Snakemake processes (or their jobs) working in ``workdir``: any process
    whose command line mentions snakemake and whose working directory is ``workdir``. None
    where that cannot be known (no /proc, e.g. macOS)."""
    proc = Path("/proc")
    if not (proc / "self" / "cwd").exists():
        return None
    here, mine, found = workdir.resolve(), _ancestors(), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            if Path(os.readlink(entry / "cwd")) != here:
                continue
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone, or another user's: not a Snakemake of ours
            continue
        if b"snakemake" in cmdline:
            found.append(int(entry.name))
    return found


def clear_stale_lock(workdir: Path = Path(".")) -> str | None:
    """Remove the lock of a Snakemake that is gone (no Snakemake, and no job of one, works in
    this directory any more); say so, or None. Where that cannot be known the lock stays, and
    Snakemake's own message (``--unlock``) applies."""
    if not locked(workdir):
        return None
    try:
        host = (workdir / HOST).read_text().strip()
    except OSError:
        host = None
    if host != socket.gethostname():
        return None
    others = others_at_work(workdir)
    if others is None or others:
        return None
    shutil.rmtree(workdir / STATE / "locks", ignore_errors=True)
    return ("slotbench: removed the lock left by a Snakemake that is no longer running (it was "
            "killed or its machine stopped)")


def locked(workdir: Path = Path(".")) -> bool:
    """Whether a Snakemake holds locks here."""
    locks = workdir / STATE / "locks"
    return locks.is_dir() and any(locks.iterdir())


def settle(workdir: Path = Path("."), old_results: bool = True) -> list[str]:
    """Run by the main Snakemake as the workflow is parsed: clear a dead Snakemake's lock and
    settle what it marked incomplete, and (``old_results``) name a results/ from before
    experiments had their own folders. Nothing is touched while another Snakemake holds the
    lock (it may be writing those files right now)."""
    said = [line for line in [clear_stale_lock(workdir)] if line]
    if not locked(workdir):
        (workdir / STATE).mkdir(exist_ok=True)
        (workdir / HOST).write_text(socket.gethostname() + "\n")
        said += recover_incomplete(workdir)
    note = old_layout_note(workdir / RESULTS) if old_results else None
    return said + ([note] if note else [])


def marked_incomplete(workdir: Path = Path(".")) -> dict[str, Path]:
    """Output path -> its incomplete mark, for every output Snakemake marked incomplete."""
    root = workdir / STATE / "incomplete"
    found = {}
    for mark in root.rglob("*") if root.is_dir() else ():
        if not mark.is_file() or mark.name == "migration_underway":
            continue
        parts = [p.removeprefix("@") for p in mark.relative_to(root).parts]
        try:
            found[urlsafe_b64decode("".join(parts)).decode()] = mark
        except (ValueError, UnicodeDecodeError):
            continue
    return found


def recover_incomplete(workdir: Path = Path(".")) -> list[str]:
    """Settle the outputs an interrupted Snakemake marked incomplete; one line per kept or
    discarded rep. Plans and fingerprints are written atomically: one that exists is whole."""
    said = []
    marks = marked_incomplete(workdir)
    for path, mark in sorted(marks.items()):
        target = workdir / path
        folder, below = split(path)  # results/<experiment>, and the path below it
        if folder and below.startswith("raw/") and path.endswith(".json") and target.exists():
            sidecar = workdir / f"{path}.sha256"
            try:
                verify_raw_file(target, sidecar)
            except RawFileChanged:
                target.unlink(missing_ok=True)
                sidecar.unlink(missing_ok=True)
                said.append(f"slotbench: {path} was being written when Snakemake stopped; it was "
                            "removed and that rep will be measured again")
            else:
                said.append(f"slotbench: kept {path}: the rep was measured completely before "
                            "Snakemake stopped")
            marks.get(f"{path}.sha256", mark).unlink(missing_ok=True)
        elif folder and below.startswith(("raw/", "plan/", "fingerprint/")):
            pass  # a sidecar (settled with its raw file), or an atomic file: whole if it exists
        elif target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
        mark.unlink(missing_ok=True)
    return said


def drop_pending_timers() -> int:
    """Cancel the timers Snakemake's scheduler left pending; say how many.

    The scheduler re-evaluates through ``threading.Timer`` (its job rate limiter, one second by
    default), and the last one is still pending when the workflow ends: the interpreter waits
    for it before it exits, a second added to every run. Called from onsuccess and onerror,
    when the scheduler is done and nothing waits for those timers any more."""
    pending = [t for t in threading.enumerate()
               if isinstance(t, threading.Timer) and not t.finished.is_set()]
    for timer in pending:
        timer.cancel()
    return len(pending)
