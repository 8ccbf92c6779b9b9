"""Experiments kept apart (slotbench.core.experiments): every output of a config lands under
results/<experiment>/, a result is found by its name or its folder, and a results/ from before
experiments had their own folders is recognised and left as it is."""

from __future__ import annotations

import copy

import pytest
import yaml

from slotbench.core import experiments
from slotbench.workflow.config import REPO_CONFIG, ConfigError, resolve

ARTICLE = yaml.safe_load(open(REPO_CONFIG))


def test_the_experiments_folder_is_named_by_its_config():
    assert experiments.results_dir(resolve(copy.deepcopy(ARTICLE))) == "results/article"
    assert experiments.results_dir(resolve(ARTICLE | {"experiment": "np4"})) == "results/np4"
    assert experiments.results_dir("smoke") == "results/smoke"
    assert resolve({})["experiment"] == "article"  # the schema's default, as config.yaml says


@pytest.mark.parametrize("config, name", [
    ("config.yaml", "article"), ("smoke.yaml", "smoke"), ("capacity.yaml", "capacity"),
    ("openloop.yaml", "openloop"), ("paired.yaml", "paired"), ("matrix.yaml", "matrix"),
    ("smoke-matrix.yaml", "smoke-matrix"), ("ollama.yaml", "ollama"), ("openai.yaml", "openai"),
])
def test_every_shipped_config_names_its_experiment(config, name):
    assert yaml.safe_load(open(REPO_CONFIG.parent / config))["experiment"] == name


def test_the_archive_is_named_after_the_experiment_unless_the_config_says():
    assert resolve(ARTICLE | {"experiment": "np4"})["archive"]["name"] == "np4"
    assert resolve(ARTICLE | {"archive": {"name": "mine"}})["archive"]["name"] == "mine"


@pytest.mark.parametrize("name", ["raw", "logs", "checks", "report.md", "archive", "compare"])
def test_a_name_of_what_an_experiments_folder_holds_is_refused_in_one_line(name):
    with pytest.raises(ConfigError) as err:
        resolve(ARTICLE | {"experiment": name})
    message = str(err.value)
    assert "\n" not in message and "config key `experiment`" in message
    assert f"'{name}' names what a result's folder holds" in message


@pytest.mark.parametrize("path, split", [
    ("results/smoke/raw/t/run1/rep1.json", ("results/smoke", "raw/t/run1/rep1.json")),
    ("results/a.b-1/report.md", ("results/a.b-1", "report.md")),
    ("results/raw/t/run1/rep1.json", ("results", "raw/t/run1/rep1.json")),  # from before
    ("results/report.md", ("results", "report.md")),
    ("elsewhere/raw/x.json", ("", "elsewhere/raw/x.json")),
])
def test_a_path_splits_into_its_results_folder_and_the_path_below(path, split):
    assert experiments.split(path) == split


def old_results(root):
    """A results/ as slotbench wrote it before experiments had their own folders."""
    (root / "raw/embedded/run1").mkdir(parents=True)
    (root / "raw/embedded/run1/rep1.json").write_text("{}")
    (root / "plan/embedded").mkdir(parents=True)
    (root / "report.md").write_text("# report\n")
    (root / "cells.parquet").write_bytes(b"PAR1")
    return root


def test_a_result_from_before_experiments_is_one_note_with_the_command_that_keeps_it(tmp_path):
    root = old_results(tmp_path / "results")
    (root / ".gitkeep").write_text("")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    note = experiments.old_layout_note(root)
    assert "\n" not in note and note.startswith("slotbench: note: ")
    assert "holds a result from before experiments had their own folders" in note
    assert "left untouched" in note
    assert note.endswith(f"mkdir {root}/article && mv {root}/raw {root}/plan {root}/cells.parquet "
                         f"{root}/report.md {root}/article/")
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # untouched
    # named by its resolved config when that names one; never onto an experiment that exists
    (root / "config.resolved.yaml").write_text("experiment: np4\nreps: 3\n")
    assert f"keep it as the experiment np4: mkdir {root}/np4 && " in (
        experiments.old_layout_note(root))
    (root / "np4").mkdir()
    assert f"mkdir {root}/np4-old && " in experiments.old_layout_note(root)
    (root / "config.resolved.yaml").write_text("reps: [\n")  # broken: the default name
    assert f"mkdir {root}/article && " in experiments.old_layout_note(root)


def test_experiments_folders_alone_are_no_old_result(tmp_path):
    root = tmp_path / "results"
    for name in ("smoke", "article"):
        (root / name / "raw").mkdir(parents=True)
    (root / ".measuring").mkdir()
    assert experiments.old_layout_note(root) is None
    assert experiments.old_layout_note(tmp_path / "nowhere") is None
    assert experiments.names(root) == ["article", "smoke"]


def test_a_result_is_found_by_its_folder_or_the_directory_above(tmp_path):
    old = old_results(tmp_path / "before/results")
    assert experiments.folder_of(old) == old
    assert experiments.folder_of(tmp_path / "before") == old  # the checkout above it
    new = tmp_path / "after/results/smoke"
    (new / "raw").mkdir(parents=True)
    assert experiments.folder_of(tmp_path / "after") == new  # its one experiment
    assert experiments.folder_of(new) == new
    (tmp_path / "after/results/other/raw").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"holds the experiments other, smoke; name one"):
        experiments.folder_of(tmp_path / "after")
    assert experiments.locate("smoke", tmp_path / "after") == new
    with pytest.raises(ValueError, match=r"^nope: neither a path nor an experiment in .*after/"
                                         r"results \(experiments there: other, smoke\)$"):
        experiments.locate("nope", tmp_path / "after")


def test_an_archives_result_is_found_by_its_resolved_config():
    assert experiments.prefix_in(["ARCHIVE.json", "results/smoke/config.resolved.yaml",
                                  "results/smoke/raw/t/run1/rep1.json"]) == "results/smoke/"
    assert experiments.prefix_in(["results/config.resolved.yaml", "results/raw/x"]) == "results/"
