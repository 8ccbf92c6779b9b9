"""Raw rep files: written atomically, hashed when written, never rewritten in place.

Each raw file gets a sidecar ``<file>.sha256`` in sha256sum format, computed from the bytes that
were written; consolidation refuses a raw file that no longer matches it.
"""

from __future__ import annotations

import hashlib
import json
import os
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


def write_json_atomic(path: str | Path, data: dict) -> str:
    """Write ``data`` as JSON atomically; return the SHA-256 of exactly the bytes written."""
    payload = (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8")
    _write_bytes_atomic(Path(path), payload)
    return hashlib.sha256(payload).hexdigest()


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
