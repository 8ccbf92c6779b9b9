"""Which code runs: the checkout's own package, and which of its modules a rule's script runs,
read from the imports.

The cheap rules (consolidate, analyse, checks, figures, report) declare these files as inputs,
so that a change to their code reruns them and everything downstream. The measuring rules do
not: a change to measurement code never re-measures existing raw files.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent  # scripts/: what the package's module names are relative to
REPO = ROOT.parent  # the checkout: its config/, report/ and requirements.txt


def run_from_checkout() -> str:
    """Put this checkout's scripts/ first on PYTHONPATH, which every rule script the workflow
    starts inherits: whatever another checkout put on the venv's path, the rules import this
    package, and the fingerprint records this checkout's commit and dirty state."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *(p for p in paths if p != str(ROOT))])
    return str(ROOT)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.resolve().relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> list[tuple[str, list[str], int]]:
    """(module, names taken from it, line) of every import in a file, relative ones resolved.
    Each file is parsed once while its text stays the same: within a process (every cheap
    rule's code input reads the same modules) and across processes, through the parse cache
    (every Snakemake start reads the whole package: parsing it anew cost 0.6 s a start)."""
    path = Path(path).resolve()
    text = path.read_bytes()
    package = ""
    if Path(root) in path.parents:
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    key = f"{package}:{hashlib.blake2b(text, digest_size=16).hexdigest()}"
    cache = _parse_cache()
    if key not in cache.entries:
        cache.entries[key] = _imports(text, str(path), package)
        cache.changed = True
    return [(m, list(names), line) for m, names, line in cache.entries[key]]


def _imports(text: bytes, filename: str, package: str) -> list:
    found = []
    todo = list(ast.parse(text, filename).body)
    while todo:  # statements only: an import is a statement, and expressions hold none
        node = todo.pop()
        if isinstance(node, ast.Import):
            found += [[alias.name, [], node.lineno] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.append([base, [a.name for a in node.names], node.lineno])
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                todo += [n for n in getattr(node, field, ()) if isinstance(n, ast.AST)]
    return sorted(found, key=lambda f: f[2])


# --- the parse cache: one JSON file in slotbench's cache directory, keyed by the text ----------


CACHE_FILE = "imports.json"
CACHE_LIMIT = 4096  # entries kept (a few hundred per version of the package)


@dataclass
class _ParseCache:
    path: Path
    entries: dict
    changed: bool = False


def cache_dir() -> Path:
    """Where slotbench keeps what it can fetch or compute again (the embedded model, this
    parse cache): $SLOTBENCH_CACHE, or ~/.cache/slotbench."""
    return Path(os.environ.get("SLOTBENCH_CACHE", Path.home() / ".cache" / "slotbench"))


@functools.lru_cache(maxsize=None)
def _parse_cache() -> _ParseCache:
    path = cache_dir() / CACHE_FILE
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):  # absent, unreadable or half-written: parse again
        entries = {}
    return _ParseCache(path, entries)


def save_parse_cache() -> None:
    """Write the parse cache back if this process parsed anything new (atomically: a
    concurrent Snakemake reads the old file or the new one; if two write, one's new entries
    are parsed again next time). A cache that cannot be written is only slower."""
    cache = _parse_cache()
    if not cache.changed:
        return
    entries = dict(list(cache.entries.items())[-CACHE_LIMIT:])
    try:
        cache.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.path.with_name(f".{CACHE_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(entries, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, cache.path)
        cache.changed = False
    except OSError:
        pass


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file of every module of the slotbench package."""
    return {module_name(p, root): p for p in sorted((root / "slotbench").rglob("*.py"))}


def html_templates(repo: str | Path = REPO) -> list[str]:
    """The Jinja2 templates the HTML pages are rendered from (report/html/ of the checkout)."""
    return [str(p) for p in sorted((Path(repo) / "report" / "html").glob("*.html"))]


def discovered(init: Path) -> bool:
    """Whether a package finds its modules by looking (``DISCOVERED = True`` in its __init__):
    then importing it runs all of them, although no import names them."""
    return init.name == "__init__.py" and "\nDISCOVERED = True" in init.read_text(encoding="utf-8")


def module_files(script: str | Path, root: Path = ROOT) -> list[str]:
    """The package's files that ``script`` runs: its imports, followed through the package,
    with the __init__ of every package on the way and every module of a package that discovers
    its modules (sorted paths)."""
    modules = package_modules(root)
    seen: set[Path] = set()
    todo = [Path(script).resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if discovered(path):
            todo += [p for p in path.parent.glob("*.py") if p != path]
        for target, names, _ in imports(path, root):
            for full in [target] + [f"{target}.{n}" for n in names]:
                parts = full.split(".")
                for i in range(1, len(parts) + 1):  # a module runs its packages' __init__ first
                    if ".".join(parts[:i]) in modules:
                        todo.append(modules[".".join(parts[:i])])
    save_parse_cache()
    return sorted(str(p) for p in seen if p != Path(script).resolve())
