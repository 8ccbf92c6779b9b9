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

import csv
import importlib.util
import io
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


# --------------------------------------------------------------------------------------------
# (f) documented configs validate; the docs made from finished runs: README.md's example output
#     and docs/run-times.md, through their records
# --------------------------------------------------------------------------------------------


def documented_configs() -> list[tuple[str, str, str]]:
    """(page, file name, YAML) of every config file the docs show (a YAML block whose first line
    names its file)."""
    return [(page, name, body) for page in DOC_PAGES
            for name, body in named_yaml((REPO / page).read_text(encoding="utf-8")).items()]


def test_every_documented_config_validates_alone_and_at_the_smoke_size():
    import yaml

    from slotbench.workflow.configfile import merged
    from slotbench.workflow import config as sbconfig

    shown = documented_configs()
    names = {name for _, name, _ in shown}
    assert {"remote-ollama.yaml", "vllm.yaml", "mybox.yaml"} <= names, names
    base = yaml.safe_load((REPO / "config/config.yaml").read_text())
    smoke = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    for page, name, body in shown:
        for over in ({}, smoke):
            try:
                sbconfig.resolve(merged(merged(base, over), yaml.safe_load(body)))
            except sbconfig.ConfigError as exc:
                pytest.fail(f"{page}: {name} does not validate: {exc}")


def test_the_quick_starts_name_the_settings_a_remote_server_needs():
    import yaml

    targets = (REPO / "docs/targets.md").read_text(encoding="utf-8")
    quick = targets[targets.index("## Quick starts"):]
    configs = named_yaml(quick)
    ollama = yaml.safe_load(configs["remote-ollama.yaml"])["targets"][0]
    vllm = yaml.safe_load(configs["vllm.yaml"])["targets"][0]
    assert ollama["backend"] == "ollama" and "OLLAMA_NUM_PARALLEL" in ollama["ollama_env"]
    assert "OLLAMA_HOST=" in quick and "127.0.0.1" not in ollama["url"]
    assert vllm["backend"] == "openai" and vllm["url"].endswith(":8000/v1")
    assert vllm["model"] and vllm["api_key_env"]
    for name in ("remote-ollama.yaml", "vllm.yaml"):  # the smoke size first, in its own folder
        experiment = yaml.safe_load(configs[name])["experiment"]
        smoke = re.search(rf"slotbench run {name} --smoke +# .*results/{experiment}-smoke/", quick)
        full = re.search(rf"slotbench run {name} +# .*results/{experiment}/", quick)
        assert smoke and full and smoke.start() < full.start(), name
    assert "run-times.md" in quick


def readme_example_text() -> str:
    from slotbench.report import docs

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    begin = docs.BEGIN.format(name="readme-example")
    assert readme.count(begin) == 1, "the README's example output needs its marker once"
    return readme[readme.index(begin) + len(begin): readme.index(docs.END, readme.index(begin))]


def test_the_readme_example_is_the_codes_wording_of_a_recorded_shipped_run():
    from slotbench.checks import trap_modules
    from slotbench.core.fmt import way
    from slotbench.report import example, headline
    from slotbench.report import results_dir as rd

    record = json.loads((REPO / example.RECORD).read_text(encoding="utf-8"))
    text = readme_example_text()
    # its source: a shipped config, the machine, the date, and the command that wrote it
    assert record["config"] is not None, "the README's example must come from a shipped config"
    assert all((REPO / f).is_file() for f in record["config"])
    source = " ".join(text.split("\n\n")[0].split())
    assert source == example.source_line(record)
    for said in (rd.command(tuple(record["config"])), rd.machine_text(record["machine"]),
                 record["measured_utc"], example.COMMAND):
        assert said in source, said
    # every sentence is one the code writes now from that run's numbers and verdicts
    assert text.strip("\n") == example.markdown(record).strip("\n")
    quoted = " ".join(line[2:] for line in text.splitlines() if line.startswith("> "))
    decision = record["decision"]
    if decision["status"] == "refused":
        assert "Refused: no headline for" in quoted
    else:
        arms = {int(r["arm"]) for r in csv.DictReader(io.StringIO(record["summary_csv"]))}
        assert any(f"{way(a).capitalize()} concurrency " in quoted for a in arms if a > 1)
    if decision["status"] == "provisional":
        assert f"{headline.PROVISIONAL}" in quoted
        traps = {m.TRAP for m in trap_modules()}
        assert {p["trap"] for p in decision["provisional"]} <= traps


def test_the_readme_example_wraps_without_starting_a_new_block():
    from slotbench.report.example import quoted, wrap

    words = "x" * 90 + " 2. y - z"
    assert wrap(words, "> ", "> ", width=94) == ["> " + "x" * 90 + " 2.", "> y - z"]
    assert quoted("- a\n- b") == ["> - a", "> - b"]
    assert quoted("> ⚠ **w**") == ["> ⚠ **w**"]


def test_run_times_are_stated_once_in_the_generated_page():
    """No other page, config comment or the README states how long a shipped config takes."""
    from slotbench.report import results_dir as rd

    pages = ["README.md", *(p for p in DOC_PAGES if p != "docs/run-times.md"),
             *(f"config/{p.name}" for p in (REPO / "config").glob("*.yaml"))]
    stated = re.compile(r"\b(?:about|roughly|took|takes)\s+[\d.–-]+\s*(?:min|minutes)\b"
                        r"|\b\d+ min \d+ s\b")
    config_names = [Path(f).name for f in rd.shipped_files()] + ["default"]
    found = []
    for page in pages:
        for number, line in enumerate((REPO / page).read_text(encoding="utf-8").splitlines(), 1):
            if stated.search(line) and any(n in line for n in config_names) \
                    and "pytest" not in line:
                found.append(f"{page}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
    page = (REPO / "docs/run-times.md").read_text(encoding="utf-8")
    assert "Measured on " in page or "Machine 1: " in page


def synthetic_repo(tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the repository's configs and a README with the example's markers, and the
    registry of the two pages made from finished runs, rooted there."""
    import shutil
    from functools import partial

    from slotbench.report import docs

    root = tmp_path / "repo"
    shutil.copytree(REPO / "config", root / "config")
    (root / "docs").mkdir()
    begin = docs.BEGIN.format(name="readme-example")
    (root / "README.md").write_text(f"# R\n\n{begin}\n{docs.END}\n\nMore.\n")
    registry = {"README.md": docs.Section("readme-example", partial(docs.readme_example, root)),
                "docs/run-times.md": partial(docs.run_times, root)}
    return root, registry


def smoke_config() -> dict:
    import yaml

    from slotbench.workflow.configfile import merged
    from slotbench.workflow import config as sbconfig

    base = yaml.safe_load((REPO / "config/config.yaml").read_text())
    return sbconfig.canonical(sbconfig.resolve(merged(
        base, yaml.safe_load((REPO / "config/smoke.yaml").read_text()))))


def test_the_docs_command_records_a_finished_run_and_its_check_holds_the_pages_to_it(tmp_path,
                                                                                     capsys):
    import synthetic

    from slotbench.report import docs

    root, registry = synthetic_repo(tmp_path)
    results = tmp_path / "work/results"
    synthetic.results_dir(synthetic.make_requests(reps=6), results, cfg=smoke_config(),
                          wall_s=75.4)
    argv = ["--readme-example", str(results), "--run-times", str(results)]
    assert docs.main_docs(argv, root, registry) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "recorded docs/readme-example.json" in out and "wrote docs/run-times.md" in out
    readme = (root / "README.md").read_text()
    report = (results / "report.md").read_text()
    headline = next(line for line in report.splitlines() if line.startswith("**Four-way"))
    unquoted = " ".join(line[2:] for line in readme.splitlines() if line.startswith("> "))
    assert headline in unquoted
    assert "`.venv/bin/snakemake --cores 1 --configfile config/smoke.yaml`" in readme
    assert "Synthetic CPU 9000 (2 CPUs, 7.5 GB memory, x86_64)" in readme
    assert "2026-12-06 00:21 UTC" in readme
    page = (root / "docs/run-times.md").read_text()
    row = next(line for line in page.splitlines() if "config/smoke.yaml` |" in line)
    # 75.4 s from the first job's start to the report; 6 reps of 8 s measured
    assert "| 1 min 15 s | 48 s |" in row and "72 requests" in row, row
    assert "Measured on Synthetic CPU 9000" in page
    assert "No run recorded yet:" in page and "`.venv/bin/snakemake --cores 1`" in page
    assert docs.main_docs(["--check"], root, registry) == 0
    # the page follows its record: a changed record is an out-of-date page
    times = json.loads((root / "docs/run-times.json").read_text())
    times[0]["wall_s"] = 3600.0
    (root / "docs/run-times.json").write_text(json.dumps(times))
    assert docs.main_docs(["--check"], root, registry) == 1
    assert "out of date: docs/run-times.md" in capsys.readouterr().err
    assert docs.main_docs([], root, registry) == 0
    assert "| 60 min 0 s |" in (root / "docs/run-times.md").read_text()


def test_a_sequential_run_s_time_says_why_its_reps_stopped(tmp_path):
    """With reps: auto the data set the count, so the page says where the run stopped."""
    import pandas as pd

    from slotbench.checks.stopping import COLUMNS
    from slotbench.report import results_dir as rd
    from slotbench.report import runtimes

    assert runtimes.stopped(tmp_path) is None  # a fixed count keeps no trail
    (tmp_path / "analysis").mkdir()
    trail = tmp_path / "analysis/stopping.csv"
    pd.DataFrame(columns=COLUMNS).to_csv(trail, index=False)
    with pytest.raises(rd.ResultsDirError, match="has no look"):
        runtimes.stopped(tmp_path)
    rows = [dict.fromkeys(COLUMNS, "") | {"look": look, "look_decision": decision}
            for look, decision in ((10, "max_reps"), (2, "continue"), (9, "continue"))]
    pd.DataFrame(rows, columns=COLUMNS).to_csv(trail, index=False)
    assert runtimes.stopped(tmp_path) == "max_reps"  # the last look's, not the last row's
    t = {"targets": 1, "runs": 2, "reps": 60, "arms": [1, 2, 4], "requests": 720,
         "num_predict": 200}
    assert runtimes.what(t).startswith("2 runs, 60 reps; ")
    assert runtimes.what(t | {"stopped": "max_reps"}).startswith(
        "2 runs, 60 reps (reps: auto, stopped max_reps); serial-1")


def test_the_docs_command_refuses_a_run_it_cannot_read_in_one_line(tmp_path, capsys):
    import synthetic

    from slotbench.report import docs

    root, registry = synthetic_repo(tmp_path)
    assert docs.main_docs(["--readme-example", str(tmp_path / "none")], root, registry) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "has no checks/headline.json" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    results = tmp_path / "work/results"
    cfg = smoke_config() | {"reps": 7}  # no shipped config has 7 reps
    synthetic.results_dir(synthetic.make_requests(reps=6), results, cfg=cfg)
    assert docs.main_docs(["--run-times", str(results)], root, registry) == 2
    err = capsys.readouterr().err
    assert "none of the shipped configs" in err and len(err.strip().splitlines()) == 1
    # a report.md that does not say what the code says of the run is refused
    report = results / "report.md"
    report.write_text(report.read_text().replace("Four-way concurrency", "Four-way load"))
    assert docs.main_docs(["--readme-example", str(results)], root, registry) == 2
    assert "does not say what the code says" in capsys.readouterr().err
    assert not (root / "docs/readme-example.json").exists()


def test_a_shipped_config_is_known_under_any_experiment_name():
    """`slotbench run config/paired.yaml --smoke` measures into paired-smoke what
    `snakemake --configfile config/smoke.yaml config/paired.yaml` measures into paired: one
    shipped way to run, whose run time is recorded alike; a changed setting is none."""
    import yaml

    from slotbench.report import results_dir as rd
    from slotbench.workflow import config as sbconfig
    from slotbench.workflow.configfile import merged

    def resolved(*files, **over):
        cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
        for f in files:
            cfg = merged(cfg, yaml.safe_load((REPO / f).read_text()))
        return sbconfig.resolve(merged(cfg, over))

    pair = ("config/smoke.yaml", "config/paired.yaml")
    assert rd.shipped_config(resolved(*pair)) == pair
    assert rd.shipped_config(resolved(*pair, experiment="paired-smoke")) == pair
    assert rd.shipped_config(resolved(experiment="mine")) == ()
    assert rd.shipped_config(resolved(*pair, reps=5)) is None
