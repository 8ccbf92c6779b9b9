"""Bad input gets one clear line before anything is sent.

Each case is an override file a user could write. Every case must fail with one line that
names the key (or the file and line) and says what is allowed, and no traceback.

Every case goes through the code the command runs, in this process: the workflow profile's check
of the file (slotbench.workflow.configfile.configfile_problem), then the config Snakemake would hand the workflow
(config/config.yaml updated with the file by Snakemake's own loader and update_config) through
slotbench.workflow.config.resolve, its message printed as rules/common.smk prints it. A handful, one of
each kind of mistake (THROUGH_SNAKEMAKE), also go to the real command
(``.venv/bin/snakemake --cores 1 --configfile bad.yaml``, Snakemake's own entry point) in their
own copy of the repository, with their own scripted llama-server as the target: there not one
request may reach the server and nothing may be written. Each case is its own test.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from doubles.fault_server import FaultServer
from e2e_helpers import REPO, copy_repo

SNAKEMAKE = Path(sys.executable).parent / "snakemake"  # Snakemake's own entry point
NAN, INF = float("nan"), float("inf")
# one problem: on the Error line itself; several: one line each, under it
KEY = r"^(Error: invalid configuration \(nothing was sent to any server\): |  - )config key "


def target(**kw) -> dict:
    return {"targets": [{"name": "fault", "backend": "llamacpp", "url": "{url}"} | kw]}


# name → (override: a mapping merged over a valid config, or the file's text; the line expected)
CASES = {
    # whole numbers, finite numbers, bounds
    "reps is 2.0": ({"reps": 2.0}, KEY + r"`reps`: 2\.0 is not a whole number"),
    "reps is 0": ({"reps": 0}, KEY + r"`reps`: 0 is less than the minimum of 1"),
    "reps is text": ({"reps": "3"}, KEY + r"`reps`: '3' is not a whole number"),
    "reps beyond the nonce": (
        {"reps": 100000},
        KEY + r"`reps`: 100000 reps do not fit a 6-digit " r"nonce.*raise prompt\.nonce_digits",
    ),
    # reps: auto and its stopping block (arms [1, 2]: a rotation block is two reps)
    "min_reps above max_reps": (
        {"reps": "auto", "stopping": {"min_reps": 12, "max_reps": 8}},
        KEY + r"`stopping\.min_reps`: 12 is more than stopping\.max_reps \(8\)",
    ),
    "max_reps under one block": (
        {"reps": "auto", "stopping": {"max_reps": 1}},
        KEY + r"`stopping\.max_reps`: 1 is less than one rotation block \(2 reps, one per arm\)",
    ),
    "max_minutes 0": ({"reps": "auto", "stopping": {"max_minutes": 0}},
                      KEY + r"`stopping\.max_minutes`: 0 must be greater than 0"),
    "max_minutes negative": ({"reps": "auto", "stopping": {"max_minutes": -1}},
                             KEY + r"`stopping\.max_minutes`: -1 must be greater than 0"),
    "stopping with a fixed reps": (
        {"reps": 3, "stopping": {"max_reps": 9}},
        KEY + r"`stopping`: it applies only with reps: auto, and reps is 3",
    ),
    "runs is 0": ({"runs": 0}, KEY + r"`runs`: 0 is less than the minimum of 1"),
    "runs is a word": (
        {"runs": "two"},
        KEY + r"`runs`: 'two' is not a whole number or a list \(.*a count .* "
        r"or a list of unique run ids",
    ),
    "run id twice": ({"runs": ["a", "a"]}, KEY + r"`runs`: 'a' is listed twice"),
    "run id with a slash": ({"runs": ["a/b"]}, KEY + r"`runs\[0\]`: 'a/b' does not match"),
    "num_predict NaN": ({"num_predict": NAN}, KEY + r"`num_predict`: nan is not a whole number"),
    "num_predict infinite": ({"num_predict": INF}, KEY + r"`num_predict`: inf is not a whole"),
    "temperature negative": ({"temperature": -0.1}, KEY + r"`temperature`: -0\.1 is less than"),
    # absurd values the servers would have been sent
    "num_predict 1e9": ({"num_predict": 1e9}, KEY + r"`num_predict`: 1000000000\.0 is not a whole"),
    "num_predict 1000000000": (
        {"num_predict": 10**9},
        KEY + r"`num_predict`: 1000000000 is greater than the maximum of 131072",
    ),
    "num_predict: 1e9 as written": (  # YAML 1.1 reads an unquoted 1e9 as text
        "num_predict: 1e9\n",
        KEY + r"`num_predict`: '1e9' is not a whole number",
    ),
    "temperature 1e6": (
        {"temperature": 1e6},
        KEY + r"`temperature`: 1000000\.0 is greater than the maximum of 2 \(.*0 to 2",
    ),
    "temperature NaN": ({"temperature": NAN}, KEY + r"`temperature`: nan is not a finite number"),
    "seed negative": ({"seed": -5}, KEY + r"`seed`: -5 is less than the minimum of 0"),
    "requests_per_cell 0": ({"requests_per_cell": 0}, KEY + r"`requests_per_cell`: 0 is less"),
    # a key of two types, given a value of neither, crashed the error's wording
    "requests_per_cell 2.0": (
        {"requests_per_cell": 2.0},
        KEY + r"`requests_per_cell`: 2\.0 is not a whole number or a mapping of keys",
    ),
    "requests_per_cell 'four'": (
        {"requests_per_cell": "four"},
        KEY + r"`requests_per_cell`: 'four' is not a whole number or a mapping of keys",
    ),
    "requests_per_cell [4]": (
        {"requests_per_cell": [4]},
        KEY + r"`requests_per_cell`: \[4\] is not a whole number or a mapping of keys",
    ),
    "requests_per_cell true": (
        {"requests_per_cell": True},
        KEY + r"`requests_per_cell`: True is not a whole number or a mapping of keys",
    ),
    "warmup_predict 0": ({"warmup_predict": 0}, KEY + r"`warmup_predict`: 0 is less than"),
    "client processes 0": ({"client": {"processes": 0}}, KEY + r"`client\.processes`: 0 is "),
    "client cpus empty": ({"client": {"cpus": []}}, KEY + r"`client\.cpus`: \[\] "),
    "request_timeout_s 0": (
        {"request_timeout_s": 0},
        KEY + r"`request_timeout_s`: 0 must be " r"greater than 0",
    ),
    "request_timeout_s infinite": (
        {"request_timeout_s": INF},
        KEY + r"`request_timeout_s`: inf " r"is not a finite number",
    ),
    "cooldown negative": ({"cooldown_s": -1}, KEY + r"`cooldown_s`: -1 is less than"),
    "thermal interval 0": (
        {"thermal": {"interval_s": 0}},
        KEY + r"`thermal\.interval_s`: 0 " r"must be greater than 0",
    ),
    # arms
    "arms empty": ({"arms": []}, KEY + r"`arms`: \[\] is too short"),
    "arms twice": ({"arms": [1, 2, 2]}, KEY + r"`arms`: 2 is listed twice"),
    "arms without serial": ({"arms": [2, 4]}, KEY + r"`arms`: arms must include 1"),
    "arm 2.5": ({"arms": [1, 2.5]}, KEY + r"`arms\[1\]`: 2\.5 is not a whole number"),
    # empty keys in an override fall back to nothing, never to the defaults
    "targets empty": ({"targets": None}, KEY + r"`targets` is given without a value"),
    "targets an empty list": ({"targets": []}, KEY + r"`targets`: \[\] should be non-empty"),
    "reps empty": ({"reps": None}, KEY + r"`reps` is given without a value"),
    # the prompt template
    "template without nonce": (
        {"prompt": {"template": "no nonce here"}},
        KEY + r"`prompt\.template`: 'no nonce here' does not match",
    ),
    "template with another field": (
        {"prompt": {"template": "Request {nonce} {other}"}},
        KEY + r"`prompt\.template`: only \{nonce\} may stand in " r"braces, not \{other\}",
    ),
    "template unbalanced": (
        {"prompt": {"template": "Request {nonce} {"}},
        KEY + r"`prompt\.template`: Single '\{' encountered.*write a literal "
        r"brace as \{\{ or \}\}",
    ),
    "template with {{nonce}}": (
        {"prompt": {"template": "Request {{nonce}}"}},
        KEY + r"`prompt\.template`: it has no \{nonce\} field \(a doubled "
        r"\{\{nonce\}\} is the literal text",
    ),
    "nonce digits 3": (
        {"prompt": {"nonce_digits": 3}},
        KEY + r"`prompt\.nonce_digits`: 3 is " r"less than the minimum of 4",
    ),
    "nonce digits 13": (
        {"prompt": {"nonce_digits": 13}},
        KEY + r"`prompt\.nonce_digits`: 13 is " r"greater than the maximum of 12",
    ),
    # thresholds: above 1 would switch a refusal off
    "rotation threshold 1.5": (
        {"checks": {"rotation_threshold": 1.5}},
        KEY + r"`checks\.rotation_threshold`: 1\.5 is greater than the " r"maximum of 1",
    ),
    "deviance threshold 2": (
        {"checks": {"deviance_threshold": 2}},
        KEY + r"`checks\.deviance_threshold`: 2 is greater than",
    ),
    "drift threshold NaN": (
        {"checks": {"drift_threshold": NAN}},
        KEY + r"`checks\.drift_threshold`: nan is not a finite number",
    ),
    "host threshold negative": (
        {"checks": {"host_threshold": -0.1}},
        KEY + r"`checks\.host_threshold`: -0\.1 must be greater than 0",
    ),
    "send lag negative": (
        {"checks": {"send_lag_s": -1}},
        KEY + r"`checks\.send_lag_s`: -1 must be greater than 0",
    ),
    "misspelt check": (
        {"checks": {"rotation_treshold": 0.1}},
        KEY + r"`checks\.rotation_treshold` is not a slotbench key; allowed under "
        r"`checks`: .*rotation_threshold",
    ),
    "bootstrap 10": ({"analysis": {"bootstrap": 10}}, KEY + r"`analysis\.bootstrap`: 10 is less"),
    "ci 1.5": ({"analysis": {"ci": 1.5}}, KEY + r"`analysis\.ci`: 1\.5 must be less than 1"),
    "misspelt top-level key": (
        {"rep": 3},
        KEY + r"`rep` is not a slotbench key; allowed at the " r"top level: .*reps",
    ),
    # names that would not fit a file system
    "archive name with a slash": (
        {"archive": {"name": "a/b"}},
        KEY + r"`archive\.name`: 'a/b' " r"does not match",
    ),
    "archive name too long": (
        {"archive": {"name": "a" * 65}},
        KEY + r"`archive\.name`: 'a{65}' " r"is too long",
    ),
    "target name too long": (
        target(name="x" * 300),
        KEY + r"`targets\[0\]\.name`: 'x{300}' is " r"too long \(.*at most 64",
    ),
    "target name with a space": (
        target(name="my target"),
        KEY + r"`targets\[0\]\.name`: 'my " r"target' does not match",
    ),
    "run id too long": ({"runs": ["r" * 300]}, KEY + r"`runs\[0\]`: 'r{300}' is too long"),
    # targets
    "two targets, one name": (
        {"targets": target()["targets"] * 2},
        KEY + r"`targets`: the name 'fault' is used twice",
    ),
    "unknown backend": (
        target(backend="vllm"),
        KEY + r"`targets\[0\]\.backend`: 'vllm' is not "
        r"one of \['llamacpp', 'ollama', 'openai'\]",
    ),
    "ollama without a model": (
        target(backend="ollama"),
        KEY + r"`targets\[0\]\.model`: target "
        r"'fault' needs the model name the ollama server knows",
    ),
    "openai without a model": (
        target(backend="openai"),
        KEY + r"`targets\[0\]\.model`: target "
        r"'fault' needs the model name the openai server knows",
    ),
    "external without a url": (
        {"targets": [{"name": "x", "backend": "llamacpp"}]},
        KEY + r"`targets\[0\]\.url`: target 'x' is not managed, so it " r"needs the base URL",
    ),
    # URLs that once crashed urllib after validation
    "url port 99999": (
        target(url="http://127.0.0.1:99999"),
        KEY + r"`targets\[0\]\.url`: 'http://127\.0\.0\.1:99999' has port 99999, outside 1-65535$",
    ),
    "url port abc": (
        target(url="http://127.0.0.1:abc"),
        KEY + r"`targets\[0\]\.url`: 'http://127\.0\.0\.1:abc' has port 'abc', not a number",
    ),
    "url malformed IPv6": (
        target(url="http://[::1"),
        KEY + r"`targets\[0\]\.url`: 'http://\[::1' has a malformed IPv6 address",
    ),
    "url without a host": (
        target(url="http://"),
        KEY + r"`targets\[0\]\.url`: 'http://' has no host",
    ),
    "url not http": (
        target(url="ftp://x"),
        KEY + r"`targets\[0\]\.url`: 'ftp://x' does not " r"match '\^https\?://'",
    ),
    "managed openai": (
        target(backend="openai", model="m", managed=True),
        KEY + r"`targets\[0\]\.managed`: the pipeline can manage llamacpp and "
        r"ollama servers, not openai",
    ),
    "misspelt target key": (
        target(modle="x"),
        KEY + r"`targets\[0\]\.modle` is not a slotbench "
        r"key; allowed under `targets\[0\]`: .*model",
    ),
    "ignore_eos is text": (
        target(ignore_eos="yes"),
        KEY + r"`targets\[0\]\.ignore_eos`: 'yes' " r"is not true or false",
    ),
    "api key variable name": (
        target(backend="openai", model="m", api_key_env="1BAD"),
        KEY + r"`targets\[0\]\.api_key_env`: '1BAD' does not match",
    ),
    "openai endpoint": (
        target(backend="openai", model="m", endpoint="embeddings"),
        KEY + r"`targets\[0\]\.endpoint`: 'embeddings' is not one of",
    ),
    "managed parallel 0": (
        {
            "targets": [
                {"name": "m", "backend": "llamacpp", "managed": True, "server": {"parallel": 0}}
            ]
        },
        KEY + r"`targets\[0\]\.server\.parallel`: 0 is less than the minimum",
    ),
    "managed ctx 100": (
        {
            "targets": [
                {"name": "m", "backend": "llamacpp", "managed": True, "server": {"ctx_size": 100}}
            ]
        },
        KEY + r"`targets\[0\]\.server\.ctx_size`: 100 is less than the minimum",
    ),
    # the file itself
    "not YAML": (
        "reps: [1\nfoo: : bar\n",
        r"^Error: config file bad\.yaml, line 2, column \d+: not valid YAML \(.*\); "
        r"nothing was run\.$",
    ),
    "tab indentation": (
        "targets:\n\t- name: x\n",
        r"^Error: config file bad\.yaml, line 2, column 1: not valid YAML",
    ),
    "a list, not keys": (
        "- reps: 3\n",
        r"^Error: config file bad\.yaml must hold keys \(such as "
        r"`targets:`\), not a list; nothing was run\.$",
    ),
    "an empty file": (
        "",
        r"^Error: config file bad\.yaml is empty; give keys such as "
        r"`targets:` or `reps:`, or drop it; nothing was run\.$",
    ),
    "no such file": (None, r"^Error: config file bad\.yaml does not exist; nothing was run\.$"),
}

VALID = {"arms": [1, 2], "requests_per_cell": 4, "reps": 1, "runs": 1, "num_predict": 8,
         "warmup_predict": 2, "analysis": {"bootstrap": 100}} | target()


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


def _with_url(value, url: str):
    if isinstance(value, dict):
        return {k: _with_url(v, url) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_url(v, url) for v in value]
    return url if value == "{url}" else value


# One case of each kind of mistake through the real command (module docstring); the rest in
# this process, through the same code.
THROUGH_SNAKEMAKE = ("reps is 2.0", "num_predict NaN", "openai endpoint", "managed parallel 0",
                     "client processes 0", "not YAML", "a list, not keys", "no such file",
                     # both crashed in rules/common.smk with a traceback once
                     "requests_per_cell 2.0", "url port 99999", "min_reps above max_reps")


def _in_process(root: Path, name: str) -> dict:
    """What the command prints for a case, by the code it runs, without starting it."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config

    from slotbench.workflow import config as sbconfig
    from slotbench.workflow.configfile import configfile_problem

    override, _ = CASES[name]
    path = root / (re.sub(r"\W+", "_", name) + ".yaml")
    if isinstance(override, dict):
        path.write_text(yaml.safe_dump(_with_url(_merge(VALID, override), "http://127.0.0.1:9"),
                                       sort_keys=False))
    elif override is not None:
        path.write_text(override)
    problem = configfile_problem(str(path))
    if problem:  # the profile's check: one line, Snakemake reads no config (the file as given)
        problem = problem.replace(str(path), "bad.yaml")
        return {"returncode": 1, "output": f"Error: {problem}; nothing was run.\n",
                "requests": 0, "results": []}
    config = load_configfile(str(REPO / "config/config.yaml"))
    update_config(config, load_configfile(str(path)))
    try:
        sbconfig.resolve(config)
    except sbconfig.ConfigError as err:
        return {"returncode": 1, "output": f"Error: {err}\n", "requests": 0, "results": []}
    return {"returncode": 0, "output": "", "requests": 0, "results": []}


def _run_case(root: Path, name: str) -> dict:
    override, _ = CASES[name]
    work = copy_repo(root / re.sub(r"\W+", "_", name), git=False)
    with FaultServer() as server:
        if isinstance(override, dict):
            text = yaml.safe_dump(_with_url(_merge(VALID, override), server.url), sort_keys=False)
            (work / "bad.yaml").write_text(text)
        elif override is not None:
            (work / "bad.yaml").write_text(override)
        proc = subprocess.run(
            [str(SNAKEMAKE), "--cores", "1", "--configfile", "bad.yaml"], cwd=work,
            capture_output=True, text=True, timeout=300, env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )
        return {"returncode": proc.returncode, "output": proc.stdout + proc.stderr,
                "requests": server.requests_received(),
                "results": sorted(str(p.relative_to(work)) for p in (work / "results").rglob("*")
                                  if p.name != ".gitkeep")
                if (work / "results").exists() else []}


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("bad-configs")
    return {name: _in_process(root, name) for name in CASES}


@pytest.fixture(scope="module")
def through_snakemake(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("bad-configs-snakemake")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(_run_case, root, name) for name in THROUGH_SNAKEMAKE}
    return {f"{name} (snakemake)": f.result() for name, f in futures.items()}


def test_the_real_command_cases_are_cases():
    assert set(THROUGH_SNAKEMAKE) <= set(CASES)


def test_there_are_at_least_40_cases():
    assert len(CASES) >= 40


# every case by the code the command runs (fast); some also through the real command (slow)
@pytest.mark.parametrize("name", list(CASES) + [
    pytest.param(f"{n} (snakemake)", marks=pytest.mark.slow) for n in THROUGH_SNAKEMAKE])
def test_a_bad_config_gets_one_line_and_nothing_is_sent(request, name):
    snakemake = name.endswith(" (snakemake)")
    outcomes = request.getfixturevalue("through_snakemake" if snakemake else "in_process")
    result, expected = outcomes[name], CASES[name.removesuffix(" (snakemake)")][1]
    out = result["output"]
    assert result["returncode"] != 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    matching = [line for line in out.splitlines() if re.search(expected, line)]
    assert len(matching) == 1, f"expected one line matching {expected!r} in:\n{out[-3000:]}"
    assert result["requests"] == 0
    assert result["results"] == []  # nothing was measured, planned or written
