"""Which code runs: the checkout's own package, and which of its modules a rule's script runs,
read from the imports.

The cheap rules (consolidate, analyse, checks, figures, report) declare these files as inputs,
so that a change to their code reruns them and everything downstream. The measuring rules do
not: a change to measurement code never re-measures existing raw files.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent  # scripts/: what the package's module names are relative to


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
    Each file is parsed once while it stays the same (every cheap rule's code input reads the
    same modules)."""
    path = Path(path).resolve()
    stat = path.stat()
    return [(m, list(names), line) for m, names, line in
            _imports(path, Path(root), stat.st_mtime_ns, stat.st_size)]


@functools.lru_cache(maxsize=4096)
def _imports(path: Path, root: Path, _mtime_ns: int, _size: int) -> tuple:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = ""
    if root in path.parents:
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.append((base, tuple(a.name for a in node.names), node.lineno))
    return tuple(found)


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file of every module of the slotbench package."""
    return {module_name(p, root): p for p in sorted((root / "slotbench").rglob("*.py"))}


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
    return sorted(str(p) for p in seen if p != Path(script).resolve())
