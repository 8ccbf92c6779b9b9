"""The package's shape, read from its source: its layers, which module imports which, and any
circle among them.

A layer is a folder of the package; ``slotbench.LAYERS`` gives their order, lowest first. The
package's own ``__init__`` sits at the bottom with ``core``, and the command line
(``slotbench.__main__``) on top of every layer. tests/test_architecture.py holds the package
to this shape, and ``python -m slotbench docs`` draws it in docs/architecture.md.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from slotbench import LAYERS
from slotbench.core.code import PACKAGE, imports, module_name

COMMANDS = "commands"  # slotbench.__main__: `python -m slotbench`, over every layer
ORDER = (*LAYERS, COMMANDS)


@dataclass(frozen=True)
class Edge:
    """One module importing another of the package, at a line; lazy when the import runs
    inside a function rather than when the module loads."""

    source: str
    target: str
    line: int
    lazy: bool


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> file of every module of the package."""
    root = package.parent
    return {module_name(p, root): p for p in sorted(package.rglob("*.py"))}


def layer_of(name: str) -> str | None:
    """A module's layer: the folder it sits in (None for a module loose in the package)."""
    parts = name.split(".")
    if len(parts) == 1:
        return LAYERS[0]  # the package's own names: its version and its layers
    if parts[1] == "__main__":
        return COMMANDS
    return parts[1] if parts[1] in LAYERS else None


def _lazy_lines(path: Path) -> set[int]:
    """Lines of the imports that run inside a function."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines |= {n.lineno for n in ast.walk(node)
                      if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def edges(package: Path = PACKAGE) -> list[Edge]:
    """Every import of one package module by another."""
    found = modules(package)
    top = package.name
    result = []
    for name, path in found.items():
        lazy = _lazy_lines(path)
        for target, names, line in imports(path, package.parent):
            if target.split(".")[0] != top:
                continue
            hits = {f"{target}.{n}" for n in names if f"{target}.{n}" in found}
            if len(hits) < len(names) or not names:
                hits.add(target)
            for hit in sorted(hits):
                if hit in found and hit != name:
                    result.append(Edge(name, hit, line, line in lazy))
    return result


def relative_imports(package: Path = PACKAGE) -> list[str]:
    """``file:line`` of every relative import (the package imports absolutely)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def circles(all_edges: list[Edge]) -> list[list[str]]:
    """Every set of modules that import each other round a circle (lazily or not), each
    sorted; Tarjan's strongly connected components."""
    graph: dict[str, set[str]] = {}
    for e in all_edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_imports(all_edges: list[Edge]) -> dict[tuple[str, str], int]:
    """(importing layer, imported layer) -> how many imports, across layers only."""
    counts: dict[tuple[str, str], int] = {}
    for e in all_edges:
        a, b = layer_of(e.source), layer_of(e.target)
        if a != b:
            counts[(a, b)] = counts.get((a, b), 0) + 1
    return counts


def picture(package: Path = PACKAGE) -> str:
    """The package as Markdown: a Mermaid graph of its layers and what each imports, and a
    table of each layer's modules."""
    all_edges = edges(package)
    counts = layer_imports(all_edges)
    mods = modules(package)
    lines = ["```mermaid", "flowchart TD"]
    lines += [f"    {layer}[\"{layer}/\"]" if layer != COMMANDS else f"    {layer}[\"__main__\"]"
              for layer in reversed(ORDER)]
    for (a, b), n in sorted(counts.items(), key=lambda kv: (-ORDER.index(kv[0][0]),
                                                              -ORDER.index(kv[0][1]))):
        lines.append(f"    {a} --> {b}")
    lines += ["```", "", "| layer | modules | imports from |", "| --- | --- | --- |"]
    for layer in reversed(ORDER):
        names = sorted(n.split(".", 2)[2] if n.count(".") > 1 else n.split(".")[-1]
                       for n in mods if layer_of(n) == layer and n != "slotbench"
                       and not n.endswith("__init__") and mods[n].name != "__init__.py")
        below = [b for b in ORDER if (layer, b) in counts]
        folder = "`slotbench/__main__.py`" if layer == COMMANDS else f"`slotbench/{layer}/`"
        lines.append(f"| {folder} | {', '.join(names) or '—'} | {', '.join(below) or '—'} |")
    return "\n".join(lines) + "\n"
