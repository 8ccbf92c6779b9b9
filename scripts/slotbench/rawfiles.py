"""Raw rep files: written atomically, hashed, never rewritten in place."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

RAW_SCHEMA = "slotbench.raw/1"


def write_json_atomic(path: str | Path, data: dict) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``.

    A crash at any point leaves either no file or the complete file, never a partial one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
