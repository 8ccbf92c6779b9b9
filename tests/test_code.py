"""Which of the package's files a rule's script runs (slotbench.core.code): the imports read from
the source, and the parse cache that spares every Snakemake start from parsing the package."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slotbench.core import code

SCRIPTS = sorted(p.name for p in code.ROOT.glob("*.py"))


def every_import(path: Path) -> list:
    """The reference: every import node anywhere in the tree (ast.walk)."""
    package = code.module_name(path).rpartition(".")[0]
    if path.name == "__init__.py":
        package = code.module_name(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.append((base, [a.name for a in node.names], node.lineno))
    return sorted(found)


@pytest.mark.parametrize("path", sorted((code.ROOT / "slotbench").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(code.ROOT)))
def test_imports_finds_every_import_the_whole_tree_holds(path):
    assert sorted(code.imports(path)) == every_import(path)


def test_imports_inside_functions_try_and_match_blocks_are_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "def f():\n"
        "    try:\n        import a\n    except ImportError:\n        from . import b\n"
        "    finally:\n        import c\n"
        "class K:\n    def g(self):\n        with open('x'):\n            from .d import e\n"
        "match 1:\n    case 1:\n        import z\n"
        "x = [__import__('not_a_statement')]\n")
    got = code.imports(pkg / "m.py", tmp_path)
    assert [(m, n) for m, n, _ in got] == [
        ("a", []), ("pkg", ["b"]), ("c", []), ("pkg.d", ["e"]), ("z", [])]


def module_files_in_a_new_process(cache_home: Path) -> dict:
    script = ("import json, sys\n"
              "from slotbench.core import code\n"
              f"print(json.dumps({{s: code.module_files(code.ROOT / s) for s in {SCRIPTS!r}}}))\n")
    env = os.environ | {"SLOTBENCH_CACHE": str(cache_home)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow  # fresh interpreters
def test_the_parse_cache_gives_what_a_fresh_parse_gives_and_survives_damage(tmp_path):
    cache = tmp_path / code.CACHE_FILE
    fresh = module_files_in_a_new_process(tmp_path)
    assert cache.exists(), "the first process wrote no cache"
    entries = json.loads(cache.read_text())
    # every module a rule script reaches was parsed once and kept (the command's own modules,
    # which no rule script imports, need not be)
    reached = {f for files in fresh.values() for f in files}
    assert len(reached) > 50 and len(entries) >= len(reached)
    assert module_files_in_a_new_process(tmp_path) == fresh  # read from the cache
    cache.write_text("{not json")
    assert module_files_in_a_new_process(tmp_path) == fresh  # unreadable: parsed again
    assert json.loads(cache.read_text()) == entries  # and written anew
    assert fresh["figures.py"] and all(f.startswith(str(code.ROOT)) for f in fresh["figures.py"])


def test_a_changed_file_is_parsed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SLOTBENCH_CACHE", str(tmp_path / "cache"))
    code._parse_cache.cache_clear()
    pkg = tmp_path / "root" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("import a\n")
    assert [m for m, _, _ in code.imports(pkg / "m.py", pkg.parent)] == ["a"]
    code.save_parse_cache()
    (pkg / "m.py").write_text("import b\n")
    assert [m for m, _, _ in code.imports(pkg / "m.py", pkg.parent)] == ["b"]
    code._parse_cache.cache_clear()
    assert [m for m, _, _ in code.imports(pkg / "m.py", pkg.parent)] == ["b"]
    code._parse_cache.cache_clear()
