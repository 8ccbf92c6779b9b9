"""Every default lives in config/schema.yaml, once; every method constant is documented.

A literal fallback in the code for a config key repeats the schema's default (and drifts from it
when the schema changes) or contradicts it. The code reads the resolved config, which
``config.resolve`` fills with every schema default, so it indexes it; where a value can arrive
without the resolved config (settings made by hand, a config older than the key), it asks
``slotbench.core.defaults`` (``config.default(key)``) for the schema's.

The first tests walk the schema's keys and parse every Python file under scripts/ with ``ast``,
flagging, for a name that is a schema key's leaf (or one of ALIASES):

- ``x.get("leaf", <literal>)``, ``x.setdefault("leaf", <literal>)`` and ``x.get("leaf") or
  <literal>``;
- a function parameter of that name with a literal default, and a dataclass field;
- a module constant of that name (upper case, ``DEFAULT_`` dropped) bound to a literal.

A literal equal to the schema's default is flagged as much as a different one: both are a
second default; for a key the schema gives no default, the literal invents one. The empty
literals ("", {}, [], ()) are not defaults but "nothing there", and None is the absence itself.

The others hold docs/method.md#constants to the code: each constant has its value there, every
numeric constant of the checks and the analysis is there (or in NOT_METHOD, with the reason),
and every constant a verdict cites is there.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
SCHEMA = REPO / "config" / "schema.yaml"
METHOD = REPO / "docs" / "method.md"

# Names the code gives a config value that differ from its key's leaf -> the leaves they stand
# for.
ALIASES = {
    "n_boot": ("bootstrap",), "gain": ("saturation_gain",), "timeout_s": ("request_timeout_s",),
    "lag_threshold_s": ("send_lag_s",), "cpu_share_threshold": ("client_cpu_share",),
    "target_rel": ("precision",), "thermal_interval_s": ("interval_s",),
    "client_processes": ("processes",),
    "threshold": ("rotation_threshold", "deviance_threshold", "host_threshold",
                  "drift_threshold"),
}

# Matches that are not config values: (file relative to scripts/, the leaf, the receiver or
# function as the code spells it) -> why.
NOT_CONFIG = {
    ("slotbench/measure/servers/supervisor.py", "reps", "state"):
        "the server state file's count of reps it measured, not the config's reps",
    ("slotbench/checks/ollama.py", "model", "m"):
        "a model Ollama's /api/ps lists; '?' stands for a name it did not give",
    ("slotbench/checks/ollama.py", "backend", "server"):
        "a fingerprint's server record: one recorded before it named its backend was Ollama's",
    ("slotbench/tables/consolidate.py", "backend", "server"):
        "a raw file's server record that names no backend",
    ("slotbench/workflow/resources.py", "threads", "server"):
        "the cores a job asks for when its server's threads are not slotbench's to set (an "
        "Ollama or external server): not a threads default",
    ("slotbench/workflow/config.py", "max_in_flight", "a"):
        "an uncapped rate arm adds no width to the widest arm; not a cap",
    ("slotbench/measure/sampler.py", "kind", "__init__"):
        "which sampler (thermal or host) a Sampler is, not a workload's kind",
    ("slotbench/workflow/archive.py", "format", "FORMAT"):
        "the archive file's format name, not a trace's format",
    ("slotbench/measure/sampler.py", "request_timeout_s", "stop"):
        "how long stopping waits for the sampler's thread, not a request's timeout",
    ("slotbench/checks/sufficiency.py", "min_reps", "MIN_REPS"):
        "the sufficiency check's fewest reps for any interval to count (a method constant); "
        "stopping.min_reps, a sequential experiment's own, defaults to the same number",
}


# --------------------------------------------------------------------------------------------
# The schema's defaults


NONE = "(none)"  # a key without a default


def _walk(node, path: str, out: dict[str, list[tuple[str, object]]]) -> None:
    if not isinstance(node, dict):
        return
    for key, sub in (node.get("properties") or {}).items():
        dotted = f"{path}.{key}" if path else key
        if isinstance(sub, dict):
            out.setdefault(key, []).append((dotted, sub.get("default", NONE)))
        _walk(sub, dotted, out)
    if isinstance(node.get("items"), dict):
        _walk(node["items"], f"{path}[]", out)
    for branch in node.get("oneOf", []) + node.get("anyOf", []) + node.get("allOf", []):
        _walk(branch, path, out)
        _walk(branch.get("then"), path, out)


def schema_defaults() -> dict[str, list[tuple[str, object]]]:
    """leaf -> [(dotted key, default or NONE)] for every key of the schema."""
    out: dict[str, list[tuple[str, object]]] = {}
    _walk(yaml.safe_load(SCHEMA.read_text(encoding="utf-8")), "", out)
    return out


# --------------------------------------------------------------------------------------------
# The code's fallbacks


def _literal(node: ast.AST | None):
    """(True, value) for a literal other than None and the empty ones, else (False, None)."""
    if node is None:
        return False, None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    empty = isinstance(value, (str, tuple, list, dict, set, frozenset)) and not value
    return value is not None and not empty, value


def _leaf(name: str, leaves) -> tuple[str, ...]:
    """The schema leaves ``name`` stands for (none: not a config value's name)."""
    return tuple(leaf for leaf in ALIASES.get(name, (name,)) if leaf in leaves)


def _get_call(node: ast.AST, leaves) -> tuple[tuple, str, ast.AST | None] | None:
    """(leaves, receiver, default node) of ``x.get("leaf"[, d])`` / ``x.setdefault(...)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "setdefault") and node.args):
        return None
    key = node.args[0]
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return None
    found = _leaf(key.value, leaves)
    if not found:
        return None
    default = node.args[1] if len(node.args) > 1 else None
    return found, ast.unparse(node.func.value), default


def _constant_leaf(name: str, leaves) -> tuple[str, ...]:
    if not name.isupper():
        return ()
    return _leaf(name.lower().removeprefix("default_"), leaves)


class Finder(ast.NodeVisitor):
    """Every literal fallback for a schema key in one file: (line, leaf, where, literal, how)."""

    def __init__(self, rel: str, leaves):
        self.rel, self.leaves, self.found, self.scope = rel, leaves, [], []

    def add(self, node, found, where, value, how):
        leaves = tuple(leaf for leaf in found if (self.rel, leaf, where) not in NOT_CONFIG)
        if leaves:
            self.found.append((node.lineno, leaves, where, value, how))

    def visit_Call(self, node):
        got = _get_call(node, self.leaves)
        if got:
            ok, value = _literal(got[2])
            if ok:
                self.add(node, got[0], got[1], value, f"{got[1]}.{node.func.attr}(...)")
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        if isinstance(node.op, ast.Or):
            for left, right in zip(node.values, node.values[1:]):
                got = _get_call(left, self.leaves)
                ok, value = _literal(right)
                if got and ok:
                    self.add(node, got[0], got[1], value, f"{got[1]}.get(...) or")
        self.generic_visit(node)

    def _function(self, node):
        args = node.args
        positional = args.posonlyargs + args.args
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        for arg, default in pairs:
            leaf = _leaf(arg.arg, self.leaves)
            ok, value = _literal(default)
            if leaf and ok:
                self.add(node, leaf, node.name, value, f"parameter of {node.name}()")
        self.scope.append(node)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _binding(self, node, targets, value):
        if self.scope:  # module constants only: a class's attributes name the class's things
            return
        for target in targets:
            if isinstance(target, ast.Name):
                leaf = _constant_leaf(target.id, self.leaves)
                ok, literal = _literal(value)
                if leaf and ok:
                    self.add(node, leaf, target.id, literal, "constant")

    def visit_Assign(self, node):
        self._binding(node, node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._binding(node, [node.target], node.value)
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        # a dataclass field named like a key, with a literal default, is a second default too
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                leaf = _leaf(stmt.target.id, self.leaves)
                ok, value = _literal(stmt.value)
                if leaf and ok:
                    self.add(stmt, leaf, f"{node.name}.{stmt.target.id}", value, "field")
        self.scope.append(node)
        self.generic_visit(node)
        self.scope.pop()


def fallbacks(root: Path = SCRIPTS) -> list[str]:
    defaults = schema_defaults()
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        finder = Finder(rel, set(defaults))
        finder.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for line, leaves, _where, value, how in finder.found:
            keys = [kd for leaf in leaves for kd in defaults[leaf]]
            given = [(k, d) for k, d in keys if d is not NONE]
            if not given:
                verdict = "invents a default for " + ", ".join(k for k, _ in keys)
            else:
                same = any(d == value for _, d in given)
                verdict = (f"{'repeats' if same else 'contradicts'} the schema's "
                           + "; ".join(f"{k} = {d!r}" for k, d in given))
            out.append(f"scripts/{rel}:{line}: {how} gives {'/'.join(leaves)!r} the literal "
                       f"{value!r} ({verdict})")
    return out


def test_no_literal_default_repeats_the_schema():
    found = fallbacks()
    assert not found, (
        "defaults outside config/schema.yaml (index the resolved config, or read "
        "config.default(key) where a value can arrive without it):\n  " + "\n  ".join(found)
    )


def test_the_finder_sees_each_kind_of_fallback(tmp_path):
    (tmp_path / "m.py").write_text(
        "SEED = 7\n"
        "DEFAULT_BOOTSTRAP = 2000\n"
        "def f(cfg, ci=0.95, *, n_boot=10, other=3):\n"
        "    a = cfg.get('cooldown_s', 0)\n"
        "    b = cfg.get('reps') or 10\n"
        "    c = cfg.setdefault('endpoint', 'chat')\n"
        "    d = cfg.get('cooldown_s')\n"
        "    e = cfg.get('not_a_key', 1)\n"
        "    SEED = 3\n"
        "class C:\n"
        "    temperature: float = 0.7\n",
        encoding="utf-8",
    )
    found = fallbacks(tmp_path)
    leaves = [re.search(r"gives '(\w+)'", line).group(1) for line in found]
    assert sorted(leaves) == sorted(["seed", "bootstrap", "ci", "bootstrap", "cooldown_s",
                                     "reps", "endpoint", "temperature"]), found
    assert any("repeats" in line and "'ci'" in line for line in found)
    assert any("contradicts" in line and "'seed'" in line for line in found)


# --------------------------------------------------------------------------------------------
# The method constants: docs/method.md#constants is the code's


def constants_table() -> list[dict]:
    """The rows of docs/method.md's "## Constants" table: name, value, what, where."""
    text = METHOD.read_text(encoding="utf-8")
    section = text[text.index("\n## Constants\n"):]
    nxt = section.find("\n## ", 1)
    section = section if nxt < 0 else section[:nxt]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 4 or set(cells[0]) <= set("- ") \
                or cells[0] == "name":
            continue
        name, value, what, where = cells
        rows.append({"name": name.strip("`"), "value": value.strip("`"), "what": what,
                     "where": where.strip("`")})
    return rows


def _module(where: str):
    rel = where.removeprefix("scripts/").removesuffix(".py").replace("/", ".")
    return importlib.import_module(rel)


def test_every_documented_constant_is_the_codes():
    rows = constants_table()
    assert rows, "docs/method.md has no constants table"
    wrong = []
    for row in rows:
        module = _module(row["where"])
        code = getattr(module, row["name"], "missing")
        documented = ast.literal_eval(row["value"])
        if code != documented:
            wrong.append(f"{row['name']}: docs/method.md says {row['value']}, "
                         f"{row['where']} has {code!r}")
    assert not wrong, "\n".join(wrong)


# Numeric module constants of the checks and the analysis that do not decide a verdict or a
# number of the report, with the reason.
NOT_METHOD = {
    ("slotbench.checks.host", "NAMED"): "how many reps the detail table names, presentation",
    ("slotbench.checks.thermal", "MAX_EVENT_GROUPS"): "how many events are listed, presentation",
    ("slotbench.checks.rotation", "MAX_REPS_QUOTED"):
        "the most reps a sentence quotes as needed, presentation",
    ("slotbench.checks.overload", "PER"):
        "the sentence quotes waiting's growth per this many requests, presentation",
    ("slotbench.core.stats", "PERM_CHUNK"): "permutations computed per batch, memory only",
}
# Besides the trap modules: the modules whose constants decide the analysis' numbers.
METHOD_MODULES = ["slotbench.tables.crosscheck", "slotbench.tables.delivery", "slotbench.analysis.analyse",
                  "slotbench.core.stats", "slotbench.analysis.capacity", "slotbench.analysis.openloop",
                  "slotbench.tables.openloop", "slotbench.analysis.across", "slotbench.analysis.compare",
                  "slotbench.analysis.paired", "slotbench.core.sequential"]


def _numeric_constants(module) -> dict[str, float]:
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            ok, value = _literal(stmt.value)
            for t in targets:
                if (isinstance(t, ast.Name) and t.id.isupper() and ok
                        and isinstance(value, (int, float)) and not isinstance(value, bool)
                        and t.id not in ("ORDER",)):
                    out[t.id] = value
    return out


def test_every_method_constant_is_documented():
    from slotbench.checks import trap_modules

    documented = {(_module(r["where"]).__name__, r["name"]) for r in constants_table()}
    modules = trap_modules() + [importlib.import_module(m) for m in METHOD_MODULES]
    missing = [f"{m.__name__}.{name} = {value}"
               for m in modules for name, value in _numeric_constants(m).items()
               if (m.__name__, name) not in documented and (m.__name__, name) not in NOT_METHOD]
    assert not missing, ("method constants missing from docs/method.md#constants (or from "
                         "NOT_METHOD with a reason):\n  " + "\n  ".join(missing))


def cited_constants() -> set[str]:
    """The constants the code's texts cite: every ``constant(NAME=...)`` call's names, and the
    upper-case names on a line that cites docs/method.md#constants (or the two before it)."""
    cited = set()
    for path in sorted(SCRIPTS.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", "")) \
                    == "constant":
                cited |= {k.arg for k in node.keywords if k.arg}
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if "docs/method.md#constants" in line:
                window = " ".join(lines[max(0, i - 2): i + 1])
                cited |= set(re.findall(r"\b(?:[A-Z][A-Z0-9]*_[A-Z0-9_]+|ALPHA|NEAR)\b", window))
    return cited


def test_every_constant_a_verdict_cites_is_in_the_table():
    documented = {r["name"] for r in constants_table()}
    cited = cited_constants()
    assert {"ALPHA", "SERIALISED_SHARE", "MIN_REPS", "NEAR", "TIME_RATIO", "BURST_FRAC",
            "PIPELINING_TOLERANCE"} <= cited, cited
    assert not cited - documented, f"cited but not in docs/method.md#constants: {cited - documented}"
