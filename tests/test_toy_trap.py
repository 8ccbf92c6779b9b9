"""Adding a trap means one check module and, optionally, one detail renderer: a copy of the
package with a toy trap added (and nothing else changed) shows it in the checks' files, the
traps table and the headline decision."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two fresh interpreters render a report: about 5 s

REPO = Path(__file__).resolve().parents[1]

TOY_CHECK = '''
"""Trap: a toy that fires when any cell produced more than a set number of tokens."""

from slotbench.checks.base import Tables, Verdict, records

TRAP = "toy"
TITLE = "Toy trap (too many tokens)"
ORDER = 1
TABLES = ("toy",)


def check(tables: Tables, settings: dict):
    big = tables.cells[tables.cells["tokens_out"] > 250]
    verdicts = []
    for target in tables.targets:
        mine = big[big["target"] == target]
        cells = [f"{t}/{r}/rep{p}/arm{a}" for t, r, p, a in
                 mine[["target", "run", "rep", "arm"]].itertuples(index=False)]
        verdicts.append(Verdict(
            TRAP, TITLE, target, assessable=True, fired=bool(len(mine)),
            verdict="yes" if len(mine) else "no", summary=f"{len(mine)} big cells",
            sentence=f"Toy: {len(mine)} cells produced more than 250 tokens.", threshold=250,
            evidence={"rows": records(mine[["run", "rep", "arm", "tokens_out"]])}, cells=cells,
            effect="refuse",
        ))
    return verdicts, {"toy": big[["target", "run", "rep", "arm", "tokens_out"]]}
'''

TOY_RENDERER = '''
"""Details of the toy trap: its cells as bullets."""

from slotbench.report.blocks import Bullets, Heading

TRAP = "toy"


def render(verdict, ctx):
    return [Heading(4, "Toy details"), Bullets([f"toy cell {c}" for c in verdict["cells"]])]
'''

DRIVER = """
import json, sys
import slotbench
# PYTHONPATH puts the copied package first: the toy trap is found there or nowhere
assert slotbench.__file__.startswith(sys.argv[1]), slotbench.__file__
import synthetic as syn
from slotbench.checks import run_checks, trap_modules, write_checks
from slotbench.report import render

requests = syn.make_requests(tokens=lambda rep, arm: 70 if (rep, arm) == (2, 4) else 60)
data = syn.run(requests)
tables = syn.tables(requests)
from slotbench.workflow.config import check_settings
verdicts, details = run_checks(tables, check_settings(data.config))
decision = write_checks(sys.argv[2], verdicts, details)
md, page, record = render(data)
print(json.dumps({"traps": [m.TRAP for m in trap_modules()], "md": md,
                  "status": decision["embedded"]["status"]}))
"""


def test_a_toy_trap_needs_one_module_and_an_optional_renderer(tmp_path):
    scripts = tmp_path / "scripts"
    shutil.copytree(REPO / "scripts", scripts, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "config", tmp_path / "config")
    shutil.copytree(REPO / "report" / "html", tmp_path / "report" / "html")  # the page's templates
    (scripts / "slotbench/checks/toy.py").write_text(textwrap.dedent(TOY_CHECK))
    (scripts / "slotbench/report/details/toy.py").write_text(textwrap.dedent(TOY_RENDERER))
    (tmp_path / "driver.py").write_text(DRIVER)
    out = tmp_path / "checks"
    # the copied package first, then tests/ for the synthetic run (tests/synthetic.py)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(scripts), str(REPO / "tests")])}
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(scripts), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["traps"][0] == "toy"  # ORDER 1: first in the table
    records = json.loads((out / "toy.json").read_text())
    assert [r["trap"] for r in records] == ["toy"] and records[0]["fired"] is True
    assert records[0]["cells"] == ["embedded/run1/rep2/arm4"]
    assert "embedded,run1,2,4,280" in (out / "toy.csv").read_text()
    assert result["status"] == "refused"  # its effect reaches the headline decision
    md = result["md"]
    assert "| Toy trap (too many tokens) | yes | 250 | 1 big cells | — |" in md
    assert "Toy: 1 cells produced more than 250 tokens." in md  # the refusal's reason
    assert "#### Toy details" in md and "- toy cell embedded/run1/rep2/arm4" in md
    # without its renderer, the trap still gets its row and the generic details
    (scripts / "slotbench/report/details/toy.py").unlink()
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(scripts), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    md = json.loads(proc.stdout.splitlines()[-1])["md"]
    assert "#### Toy trap (too many tokens)" in md and "integrity/embedded/toy" in md
    assert "Toy details" not in md
