"""The `slotbench` command: every command's --help shows an example, a wrong argument is one
line and exit 2, --version names the commit; `init` writes starter configs that validate and
never overwrites; `run --url` finds the backend of the scripted servers of tests/doubles/ as it
would a real one's, and writes the config that reproduces the run; `archive` finds an
experiment's config.

Nothing here starts Snakemake: `run` and `archive` are given a stand-in for the start that
records the Snakemake arguments and the directory it would run in (tests/test_e2e_front_door.py
runs `slotbench run --url` end to end on a real llama-server).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest
import yaml

from doubles.fault_server import FaultServer
from doubles.ollama_double import OllamaDouble
from doubles.openai_double import OpenAIDouble
from e2e_helpers import REPO
from slotbench import __version__
from slotbench.__main__ import COMMANDS, main
from slotbench.core.cli import CommandError
from slotbench.measure.detect import DetectError, detect, pick_model
from slotbench.workflow import experiment as exp
from slotbench.workflow import launch

# a command's positionals, so that only the wrong flag is wrong
POSITIONALS = {"compare": ["a", "b"], "archive-verify": ["x.tar.gz"],
               "archive-render": ["x.tar.gz", "--out", "o"], "init": ["--backend", "ollama"]}


def run_cli(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command as a user starts it (`python -m slotbench` is what .venv/bin/slotbench runs),
    this checkout's package first on the path, as the editable install of its own venv puts it."""
    env = env or os.environ | {"PYTHONPATH": str(REPO / "scripts")}
    return subprocess.run([sys.executable, "-m", "slotbench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Started:
    """Stands in for launch.start: records what Snakemake would have been given."""

    def __init__(self):
        self.calls: list[tuple[list[str], Path]] = []

    def __call__(self, args: list[str], repo: Path) -> int:
        self.calls.append((args, repo))
        return 0


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A checkout's config/ in a directory of its own, for the files `run` writes (the user's
    own files go in tmp_path, outside it)."""
    shutil.copytree(REPO / "config", tmp_path / "checkout" / "config")
    return tmp_path / "checkout"


def snakemakes_merge(*paths: Path, then: dict) -> dict:
    """The config Snakemake makes of config files given in order: its own loader and merge."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config

    config = {}
    for path in paths:
        update_config(config, load_configfile(str(path)))
    update_config(config, then)
    return config


# --- the command and its parsers ---------------------------------------------------------------


def test_pyproject_declares_the_slotbench_command():
    """setup.sh's editable install puts .venv/bin/slotbench in place from this entry point."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["slotbench"] == "slotbench.__main__:main"


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_commands_help_says_what_it_does_and_shows_an_example(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"] if command else ["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "Example" in out and ".venv/bin/slotbench" in out
    assert f"usage: slotbench{' ' + command if command else ''} " in out
    if command is None:  # the listing names every command
        assert all(name in out for name in COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_wrong_flag_is_one_line_and_exit_2(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, *POSITIONALS.get(command, []), "--no-such-flag"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"slotbench {command}: unrecognized argument --no-such-flag "), err


def test_wrong_words_through_the_real_command():
    """As typed: one line each, exit 2, nothing else printed."""
    for args, first in [(["run", "--foo"], "slotbench run: unrecognized argument --foo"),
                        (["--foo"], "slotbench: "),
                        (["frobnicate"], "slotbench: argument COMMAND: invalid choice")]:
        proc = run_cli(*args)
        assert proc.returncode == 2, proc
        assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(first), proc.stderr


def test_version_names_the_package_and_the_checkouts_commit():
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                check=True).stdout.strip())
    assert proc.stdout.startswith(
        f"slotbench {__version__}, commit {head}{'+dirty' if dirty else ''} (checkout {REPO})")


def test_version_outside_git_says_unknown(tmp_path):
    shutil.copytree(REPO / "scripts" / "slotbench", tmp_path / "scripts" / "slotbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = os.environ | {"PYTHONPATH": str(tmp_path / "scripts"),
                        "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    proc = run_cli("--version", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        f"slotbench {__version__}, commit unknown (checkout {tmp_path.resolve()})")


# --- init --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["llamacpp", "ollama", "openai"])
def test_init_writes_a_starter_that_validates_and_never_overwrites(backend, tmp_path, capsys):
    out = tmp_path / "my box.yaml"
    assert main(["init", "--backend", backend, "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert str(out) in printed and f"run {out}" in printed
    written = yaml.safe_load(out.read_text())
    [target] = written["targets"]
    assert (target["backend"], target["managed"]) == (backend, False)
    assert written["experiment"] == "my-box"
    assert ("model" in target) == (backend != "llamacpp")  # llama-server reports its own
    resolved = exp.validate(exp.build([out], {}))
    assert resolved["targets"][0]["url"] == target["url"]
    before = out.read_bytes()
    assert main(["init", "--backend", backend, "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err
    assert out.read_bytes() == before


def test_init_takes_the_url_and_model_given(tmp_path, capsys):
    out = tmp_path / "vllm.yaml"
    assert main(["init", "--backend", "openai", "--url", "http://[::1]:8001/v1",
                 "--model", "org/model: 7B", "--output", str(out)]) == 0
    [target] = yaml.safe_load(out.read_text())["targets"]
    assert (target["url"], target["model"]) == ("http://[::1]:8001/v1", "org/model: 7B")
    exp.validate(exp.build([out], {}))
    assert main(["init", "--backend", "ollama", "--url", "http://h:99999",
                 "--output", str(tmp_path / "x.yaml")]) == 1
    assert "port 99999" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()


# --- detection ---------------------------------------------------------------------------------


def test_a_llama_server_is_found_by_props_with_or_without_v1():
    with FaultServer() as server:
        for url in (server.url, server.url + "/", server.url + "/v1", server.url + "/v1/"):
            found = detect(url)
            assert (found.backend, found.url) == ("llamacpp", server.url)
        assert pick_model("llamacpp", server.url, None) == (None, None)
        assert server.hits.get("/api/version") == 4 and "/v1/models" not in server.hits


def test_ollama_is_found_first_though_it_has_v1_too():
    with OllamaDouble() as server:
        found = detect(server.url + "/v1")
        assert (found.backend, found.url) == ("ollama", server.url)
        model, why = pick_model("ollama", server.url, None)
        assert model == server.model and "the one model" in why and "/api/tags" in why
        assert pick_model("ollama", server.url, "other:1b") == ("other:1b", None)


def test_an_openai_server_is_found_by_its_model_list():
    with OpenAIDouble(models=["google/gemma-3-270m"]) as server:
        found = detect(server.url)
        assert (found.backend, found.url) == ("openai", server.url)
        assert server.paths == ["GET /api/version", "GET /props", "GET /v1/models"]
        assert pick_model("openai", server.url, None)[0] == "google/gemma-3-270m"


def test_a_server_listing_several_models_or_none_wants_model():
    with OpenAIDouble(models=["a/one", "b/two"]) as server:
        with pytest.raises(DetectError, match=r"lists 2 models \(a/one, b/two\); pick one with "
                                              r"--model"):
            pick_model("openai", server.url, None)
        assert pick_model("openai", server.url, "b/two") == ("b/two", None)
    with OpenAIDouble(models=[]) as server:
        with pytest.raises(DetectError, match="lists no model"):
            pick_model("openai", server.url, None)


def test_nothing_answering_or_the_wrong_thing_is_one_line():
    port = closed_port()
    with pytest.raises(DetectError) as err:
        detect(f"http://127.0.0.1:{port}")
    assert str(err.value).startswith(
        f"nothing answers at http://127.0.0.1:{port} (tried GET /api/version: connection refused)")
    with FaultServer() as server:
        server.web_page = True  # a web site: HTML 200 everywhere
        with pytest.raises(DetectError, match="answers, but not as Ollama, llama-server or an "
                                              "OpenAI-compatible server"):
            detect(server.url)
    with pytest.raises(DetectError, match="does not start with http"):
        detect("127.0.0.1:8080")


def test_run_with_nothing_at_the_url_says_so_in_one_line(capsys):
    port = closed_port()
    assert main(["run", "--url", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"slotbench run: nothing answers at http://127.0.0.1:{port} (tried "
                          "GET /api/version")


# --- run: the config it writes and the Snakemake it starts -------------------------------------


def test_run_url_smoke_writes_the_config_snakemake_reruns(checkout, capsys):
    started = Started()
    with FaultServer() as server:
        assert launch.main_run(["--url", server.url + "/v1", "--smoke"], checkout, started) == 0
    port = server.url.rsplit(":", 1)[1]
    name = f"llamacpp-127-0-0-1-{port}-smoke"
    saved = f"{exp.results_dir(name)}/config.yaml"
    assert started.calls == [(["--cores", "1", "--configfile", saved], checkout)]
    target = {"name": f"llamacpp-127-0-0-1-{port}", "backend": "llamacpp", "managed": False,
              "url": server.url}
    expected = snakemakes_merge(checkout / "config/config.yaml", checkout / "config/smoke.yaml",
                                then={"experiment": name, "targets": [target]})
    text = (checkout / saved).read_text()
    assert yaml.safe_load(text) == expected
    assert f"snakemake --cores 1 --configfile {saved}" in text  # says how to rerun it
    assert "is llamacpp" in capsys.readouterr().err


def test_run_url_with_config_files_experiment_and_snakemake_args(checkout, capsys, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("reps: 4\narms: [1, 2]\ntargets: [{name: x, backend: llamacpp, "
                    "managed: true}]\n")
    started = Started()
    with OllamaDouble() as server:
        code = launch.main_run([str(mine), "--url", server.url, "--experiment", "home",
                                "--", "--dry-run", "-j2", "report"], checkout, started)
    assert code == 0
    saved = f"{exp.results_dir('home')}/config.yaml"
    assert started.calls == [(["--dry-run", "-j2", "report", "--configfile", saved], checkout)]
    cfg = yaml.safe_load((checkout / saved).read_text())
    assert (cfg["reps"], cfg["arms"], cfg["experiment"]) == (4, [1, 2], "home")
    [target] = cfg["targets"]  # the detected one replaces the file's
    assert (target["backend"], target["model"], target["url"]) == ("ollama", server.model,
                                                                   server.url)
    assert f"model {server.model}, the one model" in capsys.readouterr().err


def test_run_url_on_an_openai_compatible_server_writes_its_backend_and_model(checkout, capsys):
    started = Started()
    with OpenAIDouble(models=["google/gemma-3-270m"]) as server:
        assert launch.main_run(["--url", server.url + "/v1", "--smoke"], checkout, started) == 0
    [(args, _)] = started.calls
    cfg = yaml.safe_load((checkout / args[-1]).read_text())
    [target] = cfg["targets"]
    assert (target["backend"], target["model"], target["managed"]) == (
        "openai", "google/gemma-3-270m", False)
    assert target["url"].rstrip("/").removesuffix("/v1") == server.url
    assert cfg["experiment"].startswith("openai-127-0-0-1-") and cfg["experiment"].endswith(
        "-smoke")
    assert "is openai" in capsys.readouterr().err


def test_run_url_refuses_a_bad_config_before_snakemake(checkout, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("reps: 0\n")
    started = Started()
    with FaultServer() as server:
        with pytest.raises(CommandError) as err:
            launch.main_run([str(bad), "--url", server.url], checkout, started)
    assert "config key `reps`: 0 is less than the minimum of 1" in str(err.value)
    assert started.calls == [] and not (checkout / "results").exists()


def test_run_url_refuses_a_target_matrix_that_would_replace_its_server(checkout):
    started = Started()
    with FaultServer() as server:
        with pytest.raises(CommandError, match="has a target matrix"):
            launch.main_run([str(REPO / "config/smoke-matrix.yaml"), "--url", server.url],
                            checkout, started)
    assert started.calls == [] and not (checkout / "results").exists()


def test_run_without_url_runs_the_configs_as_snakemake_would(checkout, tmp_path):
    started = Started()
    assert launch.main_run([], checkout, started) == 0
    assert launch.main_run(["--smoke"], checkout, started) == 0
    mine = tmp_path / "mine.yaml"
    mine.write_text("reps: 4\n")
    assert launch.main_run(["--smoke", str(mine), "--", "--cores=2", "-n"], checkout, started) == 0
    assert started.calls == [
        (["--cores", "1"], checkout),
        (["--cores", "1", "--configfile", "config/smoke.yaml"], checkout),
        (["--cores=2", "-n", "--configfile", "config/smoke.yaml", str(mine)], checkout),
    ]
    assert not (checkout / "results").exists()


def test_a_config_naming_its_experiment_at_the_smoke_size_measures_beside_it(checkout, tmp_path):
    """`slotbench run mine.yaml --smoke` then `slotbench run mine.yaml`: the smoke run goes to
    results/remote-smoke/, so the full run measures its own reps in results/remote/."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("experiment: remote\nreps: 4\n")
    started = Started()
    assert launch.main_run([str(mine), "--smoke"], checkout, started) == 0
    assert launch.main_run([str(mine)], checkout, started) == 0
    assert launch.main_run([str(mine), "--smoke", "--experiment", "try"], checkout, started) == 0
    assert [args for args, _ in started.calls] == [
        ["--cores", "1", "--config", "experiment=remote-smoke", "--configfile",
         "config/smoke.yaml", str(mine)],
        ["--cores", "1", "--configfile", str(mine)],
        ["--cores", "1", "--config", "experiment=try", "--configfile", "config/smoke.yaml",
         str(mine)],
    ]


@pytest.mark.parametrize("args,said", [
    (["--model", "m"], "--model and --backend describe the server of --url"),
    (["--experiment", "a/b"], "experiment name 'a/b' is not"),
    (["--", "--configfile", "x.yaml"], "give config files as CONFIG arguments"),
])
def test_run_refuses_what_it_cannot_do_in_one_line(args, said, capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", *args])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err


def test_a_missing_config_file_is_one_line(capsys):
    assert main(["run", "no-such.yaml"]) == 1
    err = capsys.readouterr().err
    assert err == "slotbench run: config file no-such.yaml does not exist\n"


def test_the_config_of_a_bad_file_is_refused_before_snakemake(checkout, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("reps: 0\n")
    with pytest.raises(CommandError, match="config key `reps`"):
        launch.main_run([str(bad)], checkout, Started())


def test_start_runs_the_venvs_snakemake_in_the_checkout_and_says_so(monkeypatch, capsys,
                                                                    tmp_path):
    seen = {}

    class Process:
        def __init__(self, cmd, cwd):
            seen.update(cmd=cmd, cwd=cwd)

        def wait(self):
            return 3

    monkeypatch.setattr(launch, "subprocess", types.SimpleNamespace(Popen=Process))
    assert launch.start(["--cores", "1", "--configfile", "a b.yaml"], tmp_path) == 3
    assert seen == {"cmd": [str(Path(sys.executable).parent / "snakemake"), "--cores", "1",
                            "--configfile", "a b.yaml"], "cwd": tmp_path}
    assert capsys.readouterr().err == (
        f"slotbench: snakemake --cores 1 --configfile 'a b.yaml'   (in {tmp_path})\n")


# --- archive -----------------------------------------------------------------------------------


def test_archive_finds_the_experiments_config(checkout, capsys):
    for name, file in [("a", "config.resolved.yaml"), ("b", "config.yaml")]:
        (checkout / exp.results_dir(name)).mkdir(parents=True)
        (checkout / exp.results_dir(name) / file).write_text("reps: 3\n")
    (checkout / exp.results_dir("c")).mkdir()  # a folder without a config: not an experiment
    started = Started()
    assert launch.main_archive(["a"], checkout, started) == 0
    assert launch.main_archive(["b", "--", "--cores", "2"], checkout, started) == 0
    assert started.calls == [
        (["archive", "--cores", "1", "--configfile",
          f"{exp.results_dir('a')}/config.resolved.yaml"], checkout),
        (["archive", "--cores", "2", "--configfile", f"{exp.results_dir('b')}/config.yaml"],
         checkout),
    ]
    for args, folder in [(["nope"], "nope"), ([], exp.default_experiment()), (["c"], "c")]:
        with pytest.raises(CommandError) as err:
            launch.main_archive(args, checkout, started)
        assert str(err.value).startswith(f"{exp.results_dir(folder)} ")
        assert str(err.value).endswith("experiments with results: a, b")
    assert len(started.calls) == 2


def test_archive_with_no_results_at_all_says_so(tmp_path):
    with pytest.raises(CommandError, match="no experiment has results yet"):
        launch.main_archive(["x"], tmp_path, Started())
