"""Raw rep files: written atomically, hashed when written, never rewritten in place.

Each raw file gets a sidecar ``<file>.sha256`` in sha256sum format, computed from the bytes that
were written; consolidation refuses a raw file that no longer matches it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

RAW_SCHEMA = "slotbench.raw/1"


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``.

    A crash at any point leaves either no file or the complete file, never a partial one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_AS_IS = (str, int, bool, type(None))


def plain(value, key=None):
    """A JSON-ready copy of ``value``, the one cleaner every JSON the pipeline writes goes
    through: NaN, infinity and pandas' NA and NaT become None (JSON has no such values), numpy
    scalars Python ones, tuples lists; ``key`` (e.g. str), if given, is applied to every dict
    key, else keys stay as they are."""
    kind = type(value)
    if kind in _AS_IS:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {(k if key is None else key(k)): plain(v, key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, key) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    pd = sys.modules.get("pandas")  # NA and NaT exist only where pandas is imported
    if pd is not None and (value is pd.NA or value is pd.NaT):
        return None
    return value


def json_bytes(data: dict) -> bytes:
    """The bytes of ``data`` as a raw file holds them: always valid JSON."""
    return (json.dumps(plain(data), indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def write_json_atomic(path: str | Path, data: dict) -> str:
    """Write ``data`` as JSON atomically; return the SHA-256 of exactly the bytes written."""
    payload = json_bytes(data)
    _write_bytes_atomic(Path(path), payload)
    return hashlib.sha256(payload).hexdigest()


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` as UTF-8 atomically: a reader finds the old file or the new, never part."""
    _write_bytes_atomic(Path(path), text.encode("utf-8"))


def write_raw_atomic(path: str | Path, data: dict) -> str:
    """A rep's raw file and then its .sha256 sidecar, both atomically; returns the SHA-256.

    The sidecar goes first: a crash between the two leaves a recorded hash without its raw
    file (the rep is simply measured again), never a raw file without its hash.
    """
    path = Path(path)
    payload = json_bytes(data)
    digest = hashlib.sha256(payload).hexdigest()
    write_sha256_atomic(f"{path}.sha256", digest, path.name)
    _write_bytes_atomic(path, payload)
    return digest


def sha256_line(digest: str, name: str) -> str:
    """One line in sha256sum's format, so `sha256sum -c` can check the file too."""
    return f"{digest}  {name}\n"


def write_sha256_atomic(path: str | Path, digest: str, name: str) -> None:
    """Record ``digest`` for the file ``name`` (in the same directory) at ``path``, atomically."""
    _write_bytes_atomic(Path(path), sha256_line(digest, name).encode("ascii"))


class RawFileChanged(ValueError):
    """A raw file no longer has the SHA-256 recorded when it was written."""


def recorded_sha256(raw: str | Path, sidecar: str | Path) -> str:
    """The SHA-256 that ``sidecar`` records for ``raw``; RawFileChanged if it cannot say."""
    raw, sidecar = Path(raw), Path(sidecar)
    try:
        text = sidecar.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise RawFileChanged(
            f"raw file {raw}: its recorded hash {sidecar} cannot be read ({exc}). "
            "Restore both from an archive, or delete the raw file and its .sha256 to re-measure "
            "that rep."
        ) from None
    parts = text.split()
    if len(parts) != 2 or len(parts[0]) != 64 or parts[1].lstrip("*") != raw.name:
        raise RawFileChanged(
            f"raw file {raw}: {sidecar} is not a sha256sum line for {raw.name}. "
            "Restore both from an archive, or delete the raw file and its .sha256 to re-measure "
            "that rep."
        )
    return parts[0].lower()


def verify_raw_file(raw: str | Path, sidecar: str | Path) -> str:
    """Return the recorded SHA-256 of ``raw`` after checking the file still has it."""
    recorded = recorded_sha256(raw, sidecar)
    actual = sha256_file(raw)
    if actual != recorded:
        raise RawFileChanged(
            f"raw file {raw} has SHA-256 {actual}, but {sidecar} recorded {recorded} when it was "
            "written: the raw file changed after it was written. Restore it from an archive, or "
            "delete it and its .sha256 to re-measure that rep."
        )
    return recorded


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def file_state(raw: str | Path) -> str:
    """What a raw file is now: its recorded SHA-256, size, modification and change time.

    The change time (ctime) moves whenever the file's bytes or metadata do and cannot be set
    back, so an edit is seen even when the modification time was restored.
    """
    raw = Path(raw)
    try:
        st = raw.stat()
    except FileNotFoundError:
        return "missing"
    try:
        recorded = Path(f"{raw}.sha256").read_text(encoding="ascii").split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        recorded = "no-sha256"
    return f"{recorded} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def inventory_token(raw_paths: list[str], ledger: str | Path) -> str:
    """A token that changes exactly when a raw file consolidation already read has changed.

    The consolidate rule writes a ledger of the raw files as it read them, with the token it ran
    under. While every file in the ledger is as the ledger says, the token stays the ledger's,
    so nothing reruns; once one is deleted, replaced, edited (even with its mtime restored) or
    loses its .sha256, the token becomes a digest of the files' states now, which consolidate
    and the report see as a changed param: the missing reps are measured again and a changed
    file is refused, on the next plain run.
    """
    states = {str(p): file_state(p) for p in raw_paths}
    try:
        recorded = json.loads(Path(ledger).read_text(encoding="utf-8"))
        if all(states.get(p, file_state(p)) == s for p, s in recorded["files"].items()):
            return recorded["token"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return hashlib.sha256(json.dumps(states, sort_keys=True).encode()).hexdigest()


def combined_token(tokens) -> str:
    """One token for many blocks' inventory tokens: it changes when any of them does."""
    return hashlib.sha256(" ".join(tokens).encode()).hexdigest()


def write_ledger(path: str | Path, raw_paths: list[str], token: str) -> None:
    """Record the raw files as consolidation read them, and the token it ran under."""
    _write_ledger(path, {str(p): file_state(p) for p in raw_paths}, token)


def merge_ledgers(path: str | Path, ledgers: list[str], token: str) -> int:
    """One ledger of every raw file the blocks' ledgers record; returns how many."""
    files = {}
    for ledger in ledgers:
        files.update(read_json(ledger)["files"])
    _write_ledger(path, files, token)
    return len(files)


def _write_ledger(path: str | Path, files: dict, token: str) -> None:
    data = {"token": token, "files": files}
    _write_bytes_atomic(Path(path), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def unrecorded(raw_paths: list[str]) -> list[str]:
    """Raw files that exist without the .sha256 recorded when they were written."""
    return [str(p) for p in raw_paths if Path(p).exists() and not Path(f"{p}.sha256").exists()]


def unrecorded_refusal(raw_paths: list[str]) -> str | None:
    """Why the workflow must not start (a raw file without the SHA-256 recorded when it was
    written cannot be verified: re-measuring it would lose it, reading it would trust it), or
    None."""
    missing = unrecorded(raw_paths)
    if not missing:
        return None
    return (f"raw file {missing[0]} has no {Path(missing[0]).name}.sha256 (the hash recorded "
            "when it was written), so it cannot be verified"
            + (f" ({len(missing) - 1} more like it)" if len(missing) > 1 else "")
            + ". Restore the .sha256 from an archive, or delete the raw file to measure that rep "
            "again; nothing was run.")


# Free space a rep needs before it starts: its raw file is well under 1 MB per 100 requests, so
# this leaves room for the raw file, the logs and everything the analysis writes after it.
MIN_FREE_BYTES = 100_000_000  # 100 MB, as the message counts them


def check_free_space(directory: str | Path, needed: int = MIN_FREE_BYTES) -> str | None:
    """Why a rep must not start here (too little free disk), or None."""
    directory = Path(directory)
    probe = next((p for p in [directory, *directory.parents] if p.exists()), Path("."))
    free = shutil.disk_usage(probe).free
    if free >= needed:
        return None
    return (f"only {free / 1e6:.0f} MB are free on the disk of {directory} ({needed / 1e6:.0f} MB "
            "are needed for a rep and what follows it); nothing was measured. Free some space "
            "and rerun")


def unsaved_paths(path: str | Path, fallback_dir: str | Path) -> list[Path]:
    """Where save_raw keeps a measured rep whose raw file could not be written: the rep's log
    directory, else the temporary directory (named after the raw file's absolute path, so two
    workflows never share one)."""
    path = Path(path)
    tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    return [Path(fallback_dir) / f"{path.name}.unsaved",
            Path(tempfile.gettempdir()) / f"slotbench-{tag}-{path.name}.unsaved"]


def save_raw(path: str | Path, data: dict, fallback_dir: str | Path) -> tuple[str, str | None]:
    """Write a measured rep's raw file; if the disk refuses (full, read-only), keep the data
    elsewhere (unsaved_paths), with its SHA-256 beside it: (SHA-256, None) when it landed where
    it belongs, else (SHA-256, what happened and where the measured data went). The next run of
    the rep rule puts a kept rep in place instead of measuring it again (restore_unsaved)."""
    try:
        return write_raw_atomic(path, data), None
    except OSError as exc:
        reason = exc
    payload = json_bytes(data)
    digest = hashlib.sha256(payload).hexdigest()
    for target in unsaved_paths(path, fallback_dir):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_bytes_atomic(Path(f"{target}.sha256"), sha256_line(digest, target.name).encode())
            _write_bytes_atomic(target, payload)
        except OSError:
            continue
        return digest, (f"the raw file {path} could not be written ({reason.strerror or reason}); "
                        f"the measured rep was kept in {target} (SHA-256 {digest}). Free some "
                        "space and rerun snakemake: it puts the kept rep in place without "
                        "measuring it again")
    return digest, (f"the raw file {path} could not be written ({reason.strerror or reason}), "
                    "nor kept anywhere else; this rep's measurement is lost. Free some space "
                    "and rerun snakemake: it measures this rep again")


def restore_unsaved(path: str | Path, fallback_dir: str | Path,
                    expect: dict) -> tuple[str, Path] | None:
    """Put a rep that save_raw kept elsewhere in place as ``path`` (with its .sha256), if it is
    whole (matches the SHA-256 kept with it) and is this rep (``expect``: the keys it must have,
    e.g. target, run, rep, experiment); return (SHA-256, where it was), or None. A kept file
    that is not whole or not this rep is left where it is."""
    for kept in unsaved_paths(path, fallback_dir):
        if not kept.exists():
            continue
        try:
            payload = kept.read_bytes()
            digest = recorded_sha256(kept, f"{kept}.sha256")
            data = json.loads(payload)
        except (RawFileChanged, OSError, ValueError):
            continue
        if hashlib.sha256(payload).hexdigest() != digest or not isinstance(data, dict):
            continue
        if any(data.get(k) != v for k, v in expect.items()):
            continue
        write_sha256_atomic(f"{path}.sha256", digest, Path(path).name)
        _write_bytes_atomic(Path(path), payload)
        kept.unlink()
        Path(f"{kept}.sha256").unlink(missing_ok=True)
        return digest, kept
    return None
