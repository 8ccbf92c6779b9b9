"""The documentation keeps its promises: links resolve, nothing points outside the repository,
the README's first screen says how to start, and every command the docs show is at least parsed.

- Every relative link in a Markdown file of the repository (and in report/*.rst) must reach a
  file, and a link into a Markdown file's #section a heading with that GitHub slug. Code
  comments that cite ``docs/<page>.md#<section>`` are held to the same rule.
- No link or path leaves the repository.
- Every ``snakemake …`` command in README.md and docs/*.md runs as a dry run (``-n``) in a
  throw-away copy of the repository, so nothing is measured, and so does every ``slotbench run``
  without ``--url`` (Snakemake's ``-n`` after ``--``); every other ``slotbench …`` or
  ``python -m slotbench …`` command runs with ``--help``. A command that cannot run here (a
  cluster profile whose plugins are not installed, a file only a finished run makes) is skipped
  with the reason.
- The verdict example in docs/report.md is what the code writes.
- The generated docs (config/README.md, report/<figure>.rst, marked sections of hand-written
  pages) are what ``python -m slotbench docs`` writes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from e2e_helpers import REPO, copy_repo

VENV_BIN = Path(sys.executable).parent
SNAKEMAKE = VENV_BIN / "snakemake"
DOC_PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250
FIRST_SCREEN = 60
SMOKE = ".venv/bin/snakemake --cores 1 --configfile config/smoke.yaml"
CLI_SMOKE = ".venv/bin/slotbench run --smoke"
DEFAULT = ".venv/bin/snakemake --cores 1"
OUTSIDE = "../" + "shared"  # spelt in two parts so that this file does not contain it
MD_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMG_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
RST_LINK = re.compile(r"`[^`<]*<([^>`]+)>`__?")
DOC_CITE = re.compile(r"\b(docs/[a-z0-9_-]+\.md)(#[A-Za-z0-9_-]+)?")
FENCE = re.compile(r"^\s*(```|~~~)")
# a command line: optional VAR=value assignments, then snakemake, slotbench or python
COMMAND = re.compile(
    r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:\S*/)?(?:snakemake|slotbench|python3?)(?:\s|$)")


# --------------------------------------------------------------------------------------------
# Files and headings
# --------------------------------------------------------------------------------------------


@cache
def repo_files() -> tuple[str, ...]:
    """What git would ship (tracked and new, not ignored files), as copy_repo copies it."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True, check=True,
    ).stdout.decode()
    return tuple(sorted(f for f in out.split("\0") if f and (REPO / f).is_file()))


def text_files() -> list[str]:
    exts = (".md", ".rst", ".py", ".smk", ".yaml", ".yml", ".sh", ".txt", ".toml", ".cfg", ".c")
    return [f for f in repo_files() if f.endswith(exts) or f in ("Snakefile", ".ci/run")]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a Markdown file, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def links(rel: str) -> list[tuple[int, str]]:
    text = (REPO / rel).read_text(encoding="utf-8")
    if rel.endswith(".rst"):
        return [(n, m) for n, line in enumerate(text.splitlines(), 1)
                for m in RST_LINK.findall(line)]
    found = []
    for n, line in prose_lines(text):
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        found += [(n, m) for m in MD_LINK.findall(line) + IMG_LINK.findall(line)]
    return found


def link_problem(source: Path, target: str) -> str | None:
    """Why a relative link from ``source`` does not resolve inside the repository, or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path_part, _, anchor = target.partition("#")
    dest = (source.parent / path_part).resolve() if path_part else source.resolve()
    if not dest.is_relative_to(REPO.resolve()):
        return f"{target} leaves the repository"
    if not dest.exists():
        return f"{target}: no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading with the anchor #{anchor} in {dest.relative_to(REPO)}"
    return None


def markdown_files() -> list[str]:
    return [f for f in repo_files() if f.endswith(".md")]


def rst_files() -> list[str]:
    return [f for f in repo_files() if f.startswith("report/") and f.endswith(".rst")]


# --------------------------------------------------------------------------------------------
# (a) links resolve, (b) nothing leaves the repository
# --------------------------------------------------------------------------------------------


def test_every_relative_link_resolves():
    broken = []
    for rel in markdown_files() + rst_files():
        for number, target in links(rel):
            problem = link_problem(REPO / rel, target)
            if problem:
                broken.append(f"{rel}:{number}: {problem}")
    assert not broken, "\n".join(broken)


def test_the_link_checker_sees_a_broken_link_and_a_missing_anchor(tmp_path):
    page = REPO / "docs/method.md"
    assert link_problem(page, "method.md#rotation") is None
    assert link_problem(page, "../README.md") is None
    assert "no such file" in link_problem(page, "nowhere.md")
    assert "no heading" in link_problem(page, "method.md#no-such-section")
    assert "leaves the repository" in link_problem(page, "../../elsewhere.md")
    assert slug("`snakemake --report`") == "snakemake---report"
    assert slug("Capacity: how many users fit") == "capacity-how-many-users-fit"
    assert slug("Run times (2-core x86_64)") == "run-times-2-core-x86_64"


def test_every_cited_docs_section_exists():
    """Code, tests, rules and the report cite docs/<page>.md#<section>: each must exist."""
    broken = []
    for rel in text_files():
        if rel == "tests/test_docs.py":
            continue
        text = (REPO / rel).read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for page, anchor in DOC_CITE.findall(line):
                if not (REPO / page).is_file():
                    broken.append(f"{rel}:{number}: {page} does not exist")
                elif anchor and anchor[1:] not in anchors(REPO / page):
                    broken.append(f"{rel}:{number}: {page} has no section {anchor}")
    assert not broken, "\n".join(broken)


def test_nothing_points_outside_the_repository():
    leaving = []
    for rel in text_files():
        if rel == "tests/test_docs.py":
            continue
        text = (REPO / rel).read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE in line or "DESIGN.md" in line or re.search(
                r"\bmethod rules? \d|\(rules? \d", line, re.I
            ):
                leaving.append(f"{rel}:{number}: {line.strip()[:100]}")
    for rel in markdown_files() + rst_files():
        for number, target in links(rel):
            if "leaves the repository" in (link_problem(REPO / rel, target) or ""):
                leaving.append(f"{rel}:{number}: {target}")
    assert not leaving, "\n".join(leaving)


# --------------------------------------------------------------------------------------------
# (c) the README's first screen
# --------------------------------------------------------------------------------------------


def test_the_readme_is_short_and_its_first_screen_says_how_to_start():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    first = "\n".join(lines[:FIRST_SCREEN])
    assert CLI_SMOKE in first and SMOKE in first
    assert first.index(CLI_SMOKE) < first.index(SMOKE), "slotbench run is the first way"
    assert re.search(rf"^{re.escape(DEFAULT)}\s*$", first, re.M), "default command"
    for needed in ("config/ollama.yaml", "config/openai.yaml", "results/", "llama-server"):
        assert needed in first, needed
    assert first.index(SMOKE) < first.index(DEFAULT + "\n"), "the smoke run comes first"


# --------------------------------------------------------------------------------------------
# Claims the docs make about the code
# --------------------------------------------------------------------------------------------


def abbreviated(record: dict) -> dict:
    """A verdict record as docs/report.md shows it: evidence's lists and mappings and all but
    two cells shortened to "…", floats to 4 places."""

    def num(v):
        return round(v, 4) if isinstance(v, float) else v

    out = {}
    for key, value in record.items():
        if key == "evidence":
            value = {k: "…" if isinstance(v, (list, dict)) else num(v) for k, v in value.items()}
        elif key == "cells":
            value = value[:2] + ["…"]
        out[key] = num(value)
    return out


def test_the_verdict_example_is_what_the_code_writes():
    import synthetic

    data = synthetic.run(synthetic.make_requests(reps=6))
    record = next(v for v in data.verdicts if v["trap"] == "rotation_bias")
    text = (REPO / "docs/report.md").read_text(encoding="utf-8")
    marker = text.index("<!-- verdict-example:")
    block = text[text.index("```json\n", marker) + 8 :]
    shown = json.loads(block[: block.index("```")])
    assert shown == abbreviated(record)


def test_the_documented_effects_checks_tables_and_bad_configs_are_the_codes():
    from slotbench.checks import trap_modules
    from slotbench.checks.base import EFFECTS

    report = (REPO / "docs/report.md").read_text(encoding="utf-8")
    effects = report[report.index("says what a verdict does to the headline"):]
    effects = effects[: effects.index("\n\n")]
    assert set(re.findall(r"`(\w+)` \(", effects)) == set(EFFECTS)
    outputs = next(line for line in report.splitlines()
                   if line.startswith("| `results/<experiment>/checks/`"))
    tables = {name for m in trap_modules() for name in m.TABLES}
    assert set(re.findall(r"`(\w+)\.csv`", outputs)) == tables
    import test_bad_configs

    repro = (REPO / "docs/reproducibility.md").read_text(encoding="utf-8")
    assert f"{len(test_bad_configs.CASES)} bad configs" in repro


def test_the_layout_names_every_module():
    layout = (REPO / "docs/architecture.md").read_text(encoding="utf-8")
    package = REPO / "scripts/slotbench"
    missing = [p.name for p in package.glob("*.py") if p.name not in layout]
    missing += [p.name for p in (REPO / "benchmarks").glob("*.py") if p.name not in layout]
    missing += [p.name for p in (REPO / "tests/doubles").glob("*.py")
                if p.name != "__init__.py" and p.name not in layout]
    assert not missing, missing


# --------------------------------------------------------------------------------------------
# (d) every command in the docs at least parses
# --------------------------------------------------------------------------------------------


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)


def shell_lines(body: str) -> list[str]:
    """Commands of a shell block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def named_yaml(text: str) -> dict[str, str]:
    """YAML blocks whose first line names their file (``# mybox.yaml: …``)."""
    out = {}
    for lang, body in code_blocks(text):
        match = re.match(r"#\s*([\w.-]+\.ya?ml)\b", body)
        if lang == "yaml" and match:
            out[match.group(1)] = body
    return out


def doc_commands() -> list[tuple[str, str]]:
    """(page, command) for every snakemake, slotbench and python -m slotbench command, once
    each."""
    seen, out = set(), []
    for page in DOC_PAGES:
        for lang, body in code_blocks((REPO / page).read_text(encoding="utf-8")):
            if lang not in ("", "bash", "sh", "console"):
                continue
            for line in shell_lines(body):
                for part in line.split("&&"):
                    part = part.strip()
                    if not COMMAND.match(part):
                        continue
                    words = shlex.split(part)
                    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                        words = words[1:]
                    if not words:
                        continue
                    tool = Path(words[0]).name
                    is_smk = tool == "snakemake"
                    is_cli = (tool == "slotbench"
                              or tool.startswith("python") and words[1:3] == ["-m", "slotbench"])
                    if (is_smk or is_cli) and part not in seen:
                        seen.add(part)
                        out.append((page, part))
    return out


def not_runnable(command: str, files: set[str], made: dict[str, str]) -> str | None:
    """Why a documented command cannot be dry-run here, or None."""
    words = shlex.split(command)
    if "--profile" in words:
        profile = words[words.index("--profile") + 1]
        plugins = (REPO / profile / "requirements.txt")
        needed = ["snakemake_executor_plugin_slurm"] if "slurm" in profile else []
        if plugins.is_file():
            needed = [re.split(r"[<>=\s]", line)[0].replace("-", "_")
                      for line in plugins.read_text().splitlines()
                      if line.strip() and not line.startswith("#")]
        needed = [n for n in needed if n.startswith("snakemake_")]  # the plugins themselves
        missing = [n for n in needed if importlib.util.find_spec(n) is None]
        if missing:
            return (f"profile {profile} needs {', '.join(missing)}, not installed in .venv "
                    "(tests/test_kubernetes_profile.py dry-runs it in a venv of its own)")
    if "--configfile" in words:
        i = words.index("--configfile") + 1
        while i < len(words) and not words[i].startswith("-"):
            name = words[i]
            if name not in files and name not in made:
                return f"--configfile {name}: a file the user or a finished run provides"
            i += 1
    if "--report" in words:
        return "snakemake --report renders a finished run's results"
    args = cli_args(words)
    if args[:1] == ["run"]:
        own = args[:args.index("--")] if "--" in args else args
        for name in (w for w in own[1:] if w.endswith((".yaml", ".yml"))):
            if name not in files and name not in made:
                return f"slotbench run {name}: a file the user provides"
    return None


def cli_args(words: list[str]) -> list[str]:
    """The arguments of a slotbench command (``slotbench …`` or ``python -m slotbench …``)."""
    return words[1:] if Path(words[0]).name == "slotbench" else words[3:]


def dry_run_argv(command: str) -> tuple[list[str], dict[str, str]]:
    words = shlex.split(command)
    env = {}
    while re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    tool = Path(words[0]).name
    if tool == "snakemake":
        return [str(SNAKEMAKE), *words[1:], "-n", "--quiet", "rules"], env
    args = cli_args(words)
    if args[:1] == ["run"] and "--url" not in args:  # Snakemake's dry run, through the command
        return [sys.executable, "-m", "slotbench", *args, *([] if "--" in args else ["--"]),
                "-n", "--quiet", "rules"], env
    sub = [w for w in args if not w.startswith("-")][:1]
    return [sys.executable, "-m", "slotbench", *sub, "--help"], env


COMMANDS = doc_commands()


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """Every runnable documented command, run once in one throw-away copy of the repository."""
    work = copy_repo(tmp_path_factory.mktemp("docs") / "repo")
    files = set(repo_files())
    made = {}
    for page in DOC_PAGES:
        made |= named_yaml((REPO / page).read_text(encoding="utf-8"))
    for name, body in made.items():
        if not (work / name).exists():
            (work / name).write_text(body, encoding="utf-8")
    env = os.environ | {"PYTHONPATH": str(work / "scripts")}

    def run(command):
        reason = not_runnable(command, files, made)
        if reason:
            return command, ("skip", reason)
        argv, extra = dry_run_argv(command)
        done = subprocess.run(argv, cwd=work, env=env | extra, capture_output=True, text=True,
                              timeout=120)
        return command, ("ran", done)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(run, [c for _, c in COMMANDS]))


@pytest.mark.slow  # a Snakemake dry run for each
@pytest.mark.parametrize("page,command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_every_documented_command_parses(dry_runs, page, command):
    kind, result = dry_runs[command]
    if kind == "skip":
        pytest.skip(f"not runnable here: {result}")
    assert result.returncode == 0, f"{page}: {command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"


def test_the_docs_show_commands_of_both_kinds():
    kinds = {Path(shlex.split(c)[0]).name for _, c in COMMANDS}
    assert {"snakemake", "slotbench"} <= kinds and any(k.startswith("python") for k in kinds)
    assert any(SMOKE == c for _, c in COMMANDS) and any(DEFAULT == c for _, c in COMMANDS)


# --------------------------------------------------------------------------------------------
# (e) the generated docs (config/README.md, report/<figure>.rst, marked sections): what
#     `python -m slotbench docs` writes
# --------------------------------------------------------------------------------------------


def test_the_generated_docs_are_what_the_docs_command_writes():
    from slotbench.report import docs

    stale = docs.out_of_date(REPO)
    assert not stale, (
        f"out of date: {', '.join(stale)}; run `.venv/bin/python -m slotbench docs`\n"
        + "\n".join(stale.values())
    )


def test_the_docs_command_rewrites_a_marked_section_and_its_check_changes_nothing(tmp_path,
                                                                                  capsys):
    from slotbench.report import docs

    page = tmp_path / "docs/page.md"
    page.parent.mkdir()
    begin = docs.BEGIN.format(name="numbers")
    page.write_text(f"# Page\n\nBy hand.\n\n{begin}\nold\n{docs.END}\n\nMore by hand.\n")
    registry = {"docs/page.md": docs.Section("numbers", lambda: "1\n2"),
                "whole.txt": lambda: "all of it\n"}
    before = page.read_text()
    assert docs.main_docs(["--check"], tmp_path, registry) == 1
    assert page.read_text() == before and not (tmp_path / "whole.txt").exists()
    err = capsys.readouterr().err
    assert "out of date: docs/page.md" in err and "out of date: whole.txt" in err
    assert docs.main_docs([], tmp_path, registry) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["wrote docs/page.md", "wrote whole.txt"]
    assert page.read_text() == before.replace("\nold\n", "\n1\n2\n")
    assert docs.main_docs(["--check"], tmp_path, registry) == 0
    assert docs.main_docs([], tmp_path, registry) == 0
    assert "wrote" not in capsys.readouterr().out
    page.write_text("# Page\n\nNo markers.\n")
    assert docs.main_docs([], tmp_path, registry) == 2
    assert f"docs/page.md needs the line {begin}" in capsys.readouterr().err
    assert page.read_text() == "# Page\n\nNo markers.\n"
