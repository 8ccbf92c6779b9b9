"""The config is validated, with defaults filled, before anything is sent."""

import copy
import re

import pytest
import yaml

from slotbench.workflow.config import REPO_CONFIG, ConfigError, canonical, resolve, run_ids


def base():
    return yaml.safe_load(REPO_CONFIG.read_text())


def test_defaults_reproduce_the_article():
    cfg = resolve(base())
    assert cfg["arms"] == [1, 2, 4]
    assert cfg["requests_per_cell"] == 4 and cfg["reps"] == 10 and cfg["runs"] == 2
    assert cfg["num_predict"] == 200
    assert cfg["checks"]["rotation_threshold"] == 0.10
    assert cfg["checks"]["deviance_threshold"] == 0.05
    assert cfg["checks"]["precision"] == 0.05
    assert cfg["control_arm"] is False and cfg["prompt"]["nonces"] is True
    assert "{nonce}" in cfg["prompt"]["template"][:20]
    [target] = cfg["targets"]
    assert target["name"] == "embedded" and target["managed"] and target["backend"] == "llamacpp"
    assert run_ids(cfg) == ["run1", "run2"]


def test_empty_config_gets_the_embedded_default():
    cfg = resolve({})
    assert cfg["targets"][0]["server"]["parallel"] == 4


@pytest.mark.parametrize(
    "change, key",
    [
        ({"reps": 0}, "`reps`"),
        ({"arms": [2, 4]}, "`arms`"),
        ({"arms": [1, 2, 2]}, "`arms`"),
        ({"requests_per_cell": 2}, "`requests_per_cell`"),
        ({"num_predict": "many"}, "`num_predict`"),
        ({"checks": {"rotation_treshold": 0.2}}, "`checks`"),
        ({"targets": [{"name": "x", "backend": "llamacpp"}]}, "`targets[0].url`"),
        ({"targets": [{"name": "x y", "backend": "llamacpp", "managed": True}]},
         "`targets[0].name`"),
        ({"targets": [{"name": "x", "backend": "vllm", "url": "http://h"}]},
         "`targets[0].backend`"),
    ],
)
def test_errors_name_the_key(change, key):
    with pytest.raises(ConfigError) as err:
        resolve(base() | change)
    assert key in str(err.value)
    assert "nothing was sent" in str(err.value)


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as err:
        resolve(base() | {"reps": 0, "runs": 0})
    assert "`reps`" in str(err.value) and "`runs`" in str(err.value)


def test_smoke_config_is_small():
    smoke = yaml.safe_load((REPO_CONFIG.parent / "smoke.yaml").read_text())
    cfg = resolve(base() | smoke)
    assert cfg["runs"] == 1 and cfg["reps"] == 3 and cfg["num_predict"] <= 64


def test_key_order_does_not_change_the_resolved_target():
    a = {"targets": [{"name": "x", "backend": "llamacpp", "managed": True,
                      "server": {"threads": 2, "parallel": 4}}]}
    b = {"targets": [{"server": {"parallel": 4, "threads": 2}, "managed": True,
                      "backend": "llamacpp", "name": "x"}]}
    assert repr(resolve(a)["targets"]) == repr(resolve(b)["targets"])


def test_backend_specific_defaults_and_refusals():
    ollama = resolve({"targets": [{"name": "o", "backend": "ollama", "managed": True,
                                   "model": "gemma3:270m"}]})["targets"][0]
    assert ollama["num_ctx"] == 4096 and ollama["server"]["kv_cache_type"] == "f16"
    assert "threads" not in ollama["server"]
    external = resolve({"targets": [{"name": "o", "backend": "ollama", "model": "gemma3:270m",
                                     "url": "http://127.0.0.1:11434"}]})["targets"][0]
    assert "server" not in external
    for bad, key in [
        ({"backend": "ollama", "url": "http://h", "ignore_eos": True, "model": "m"}, "ignore_eos"),
        ({"backend": "llamacpp", "url": "http://h", "num_ctx": 2048}, "num_ctx"),
        ({"backend": "openai", "managed": True, "model": "m"}, "managed"),
        ({"backend": "ollama", "url": "http://h", "server": {"parallel": 2}, "model": "m"},
         "server"),
        ({"backend": "ollama", "url": "http://h"}, "model"),
        ({"backend": "openai", "url": "http://h"}, "model"),
    ]:
        with pytest.raises(ConfigError, match=f"targets\\[0\\].{key}"):
            resolve({"targets": [{"name": "t", **bad}]})


def test_runs_as_a_list_of_ids():
    runs = yaml.safe_load("runs: [run1, run2, 2026-12-01, baseline_b]")["runs"]
    cfg = resolve(base() | {"runs": runs})
    # an unquoted date is what the user typed, not a datetime
    assert run_ids(cfg) == ["run1", "run2", "2026-12-01", "baseline_b"]
    assert run_ids(resolve(base() | {"runs": 3})) == ["run1", "run2", "run3"]


@pytest.mark.parametrize(
    "runs, needle",
    [
        (["run1", "run1"], "'run1' is listed twice"),
        (["run1", "a/b"], "`runs[1]`"),
        (["has space"], "`runs[0]`"),
        ([], "`runs`"),
        ([7], "`runs[0]`: 7 is not text"),
        (0, "`runs`: 0 is less than the minimum of 1"),
        ("run1", "`runs`: 'run1' is not a whole number or a list"),
    ],
)
def test_run_id_errors_name_the_key(runs, needle):
    with pytest.raises(ConfigError) as err:
        resolve(base() | {"runs": runs})
    assert needle in str(err.value)
    assert "list of unique run ids" in str(err.value)  # the hint says what is allowed


def test_archive_name_has_a_default_and_is_checked():
    assert resolve(base())["archive"] == {"name": resolve(base())["experiment"]}
    with pytest.raises(ConfigError) as err:
        resolve(base() | {"archive": {"name": "../x"}})
    assert "`archive.name`" in str(err.value)


def test_canonical_config_ignores_key_order():
    a = resolve({"reps": 3, "runs": ["b", "a"], "checks": {"deviance_threshold": 0.1}})
    b = resolve({"checks": {"deviance_threshold": 0.1}, "runs": ["b", "a"], "reps": 3})
    assert repr(canonical(a)) == repr(canonical(b))
    assert canonical(a)["runs"] == ["b", "a"]  # lists keep their order


def test_the_resolved_config_is_the_same_whatever_order_its_keys_came_in():
    """Snakemake compares params by repr: a prompt written template-first and the same prompt
    read back from the sorted config.resolved.yaml (what `slotbench archive` gives Snakemake)
    must resolve alike, or the plan and every rep would run again."""
    prompt = {"template": "Request {nonce}. Hi.", "nonces": True, "nonce_digits": 6}
    a = resolve({"prompt": prompt, "reps": 3})
    b = resolve({"reps": 3, "prompt": dict(reversed(prompt.items()))})
    assert repr(a) == repr(b) and list(a) == sorted(a)
    assert repr(resolve(yaml.safe_load(yaml.safe_dump(a, sort_keys=True)))) == repr(a)


def test_configfile_args_are_found_in_every_spelling():
    from slotbench.workflow.configfile import configfile_args

    argv = ["--cores", "1", "--configfile", "a.yaml", "b.yaml", "-n", "--configfiles=c.yaml",
            "--configfile", "d.yaml", "all"]
    # like Snakemake's own parser (nargs="+"), a target right after the files is taken for one:
    # the user is told "config file all does not exist" rather than have it silently dropped
    assert configfile_args(argv) == ["a.yaml", "b.yaml", "c.yaml", "d.yaml", "all"]
    assert configfile_args(["--cores", "1"]) == []


def test_a_configfile_that_cannot_be_a_config_is_named_with_its_line(tmp_path):
    from slotbench.workflow.configfile import configfile_problem

    good = tmp_path / "good.yaml"
    good.write_text("reps: 3\n")
    assert configfile_problem(str(good)) is None
    assert configfile_problem(str(tmp_path / "nope.yaml")) == (
        f"config file {tmp_path / 'nope.yaml'} does not exist")
    bad = tmp_path / "bad.yaml"
    bad.write_text("reps: 3\ntargets:\n  - name: x\n   backend: llamacpp\n")
    said = configfile_problem(str(bad))
    assert said.startswith(f"config file {bad}, line 4, column 4: not valid YAML (")
    assert configfile_problem(str(tmp_path)).endswith("cannot be read: Is a directory")


def test_a_managed_servers_slots_follow_the_largest_arm_unless_set():
    """Arms may go past the slot count (the server then queues, and the report says so); unset,
    the slots follow the largest arm and the context gives each slot 1024 tokens."""
    target = {"name": "e", "backend": "llamacpp", "managed": True}
    sweep = resolve({"targets": [target], "arms": [1, 2, 4, 8, 16], "requests_per_cell": 16})
    server = sweep["targets"][0]["server"]
    assert (server["parallel"], server["ctx_size"]) == (16, 16384)
    fewer = resolve({"targets": [target | {"server": {"parallel": 2}}], "arms": [1, 2, 4]})
    assert fewer["targets"][0]["server"]["parallel"] == 2
    assert fewer["targets"][0]["server"]["ctx_size"] == 4096


def test_every_default_comes_from_the_schema():
    """The backend's defaults and the derived ones' constants are read from the schema: change
    them there and the resolved targets follow; drop them and nothing is filled in."""
    from slotbench.workflow.config import load_schema

    schema = load_schema()
    item = schema["properties"]["targets"]["items"]
    server = item["properties"]["server"]["properties"]
    server["ctx_size"]["x-default"] |= {"per_slot": 2000, "at_least": 5000}
    server["threads"]["x-default"] |= {"without_cpus": 7}
    other = {"model": "other", "num_ctx": 512, "keep_alive": "1m", "endpoint": "chat",
             "flash_attention": True, "kv_cache_type": "q8_0"}
    for branch in item["allOf"]:
        then = branch["then"]["properties"]
        for key, sub in then.items():
            if "default" in sub:
                sub["default"] = other[key]
        for key, sub in then.get("server", {}).get("properties", {}).items():
            if sub["default"] is not None:  # null: derived, by the x-default rule
                sub["default"] = "2m" if key == "keep_alive" else other[key]
    targets = [{"name": "l", "backend": "llamacpp", "managed": True},
               {"name": "o", "backend": "ollama", "managed": True, "model": "m"},
               {"name": "a", "backend": "openai", "url": "http://h", "model": "m"}]
    l, o, a = resolve({"targets": targets}, schema)["targets"]
    assert (l["model"], l["server"]["threads"], l["server"]["ctx_size"]) == ("other", 7, 8000)
    assert (o["num_ctx"], o["keep_alive"]) == (512, "1m")
    assert {k: o["server"][k] for k in ("flash_attention", "kv_cache_type", "keep_alive")} == {
        "flash_attention": True, "kv_cache_type": "q8_0", "keep_alive": "2m"}
    assert a["endpoint"] == "chat"
    two = resolve({"targets": targets[:1], "arms": [1, 2], "requests_per_cell": 2}, schema)
    assert two["targets"][0]["server"]["ctx_size"] == 5000  # more than 2 slots of 2000
    del item["allOf"]
    bare = resolve({"targets": targets[1:]}, schema)["targets"]
    assert not {"num_ctx", "keep_alive", "endpoint"} & {k for t in bare for k in t}
    assert not {"flash_attention", "kv_cache_type", "keep_alive"} & set(bare[0]["server"])


def test_the_schema_says_every_backend_and_derived_default_in_words():
    """config/README.md shows a key's description; where a default depends on the backend or
    on other keys, the description states the schema's value, so the two cannot drift."""
    from slotbench.workflow.config import load_schema

    item = load_schema()["properties"]["targets"]["items"]
    props, server = item["properties"], item["properties"]["server"]["properties"]
    said = []
    for branch in item["allOf"]:
        then = branch["then"]["properties"]
        said += [(props[k], v["default"]) for k, v in then.items() if "default" in v]
        managed = then.get("server", {}).get("properties", {})
        said += [(server[k], v["default"]) for k, v in managed.items() if v["default"] is not None]
    said += [(sub, v) for sub in server.values() for k, v in sub.get("x-default", {}).items()
             if k != "rule"]
    assert len(said) == 10
    for key, value in said:
        words = " ".join(key["description"].split())
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        assert re.search(rf"\b{re.escape(shown)}\b", words), (shown, words)
    for key in ("parallel", "ctx_size", "threads"):  # a rule in words, then its constants
        rule = server[key]["x-default"]
        assert isinstance(rule["rule"], str) and rule["rule"]
        assert all(isinstance(v, int) for k, v in rule.items() if k != "rule"), rule
        # null by default, so that the code derives it only when it is not given
        defaults = [server[key].get("default", "absent")] + [
            b["then"]["properties"].get("server", {}).get("properties", {}).get(key, {}).get(
                "default", "absent") for b in item["allOf"]]
        assert None in defaults and set(defaults) <= {None, "absent"}, (key, defaults)
        assert "null (the default) is derived" in " ".join(server[key]["description"].split())


def test_auto_client_processes_follow_the_streams_one_process_is_given():
    """client.processes auto: one process per client.streams_per_process streams of the widest
    arm, at most one per CPU the client may use."""
    from slotbench.workflow.config import client_settings

    arms = {"arms": [1, 2, 8], "requests_per_cell": 8, "client": {"cpus": [0, 1, 2]}}
    assert resolve(arms)["client"]["streams_per_process"] == 128
    assert client_settings(resolve(arms))["processes"] == 1
    three = arms | {"client": {"cpus": [0, 1, 2], "streams_per_process": 3}}
    assert client_settings(resolve(three))["processes"] == 3  # 8 streams: 3, at most 3 CPUs
    two = arms | {"client": {"cpus": [0, 1, 2], "streams_per_process": 4}}
    assert client_settings(resolve(two)) == {"processes": 2, "cpus": [0, 1, 2]}


def test_a_default_is_read_from_the_schema_by_its_key():
    """config.default reads one default by its dotted key (a backend's with that backend), and
    defaults.value takes the settings' own value when they give it: what code that meets a
    setting without the resolved config reads instead of a literal of its own."""
    from slotbench.core import defaults
    from slotbench.workflow.config import default, load_schema

    props = load_schema()["properties"]
    assert default("analysis.bootstrap") == props["analysis"]["properties"]["bootstrap"]["default"]
    assert default("seed") == props["seed"]["default"] == resolve({})["seed"]
    assert default("arms[].arrival") == "poisson" and default("arms[].burstiness") == 1.0
    assert default("targets[].endpoint", backend="openai") == resolve(
        {"targets": [{"name": "a", "backend": "openai", "url": "http://h", "model": "m"}]}
    )["targets"][0]["endpoint"]
    assert default("targets[].server.parallel") is None  # derived when it is not given
    assert defaults.value({"ci": 0.5}, "analysis.ci") == 0.5
    assert defaults.value(None, "analysis.ci") == defaults.value({}, "analysis.ci") == 0.95
    with pytest.raises(KeyError):
        default("slo.user_tps_min")  # unset: no default to read


def test_telemetry_settings_measure_nothing_again():
    """Where telemetry is scraped and what a token costs are evidence about a rep, not part of
    what it measures: adding them changes none of the rep's params (the measured target, the
    measurement settings, what every raw file records as its experiment), so Snakemake reruns
    no rep; the rep reads them from the config."""
    from slotbench.workflow import config as sbconfig

    plain = {"targets": [{"name": "ext", "backend": "openai", "url": "http://127.0.0.1:9/v1",
                          "model": "m"}]}
    told = copy.deepcopy(plain)
    told["targets"][0] |= {"metrics_url": "http://127.0.0.1:9/metrics",
                           "exporters": ["http://127.0.0.1:9400/metrics"], "usd_per_hour": 2.5}
    told["telemetry"] = {"interval_s": 0.1}
    a, b = resolve(plain), resolve(told)
    assert sbconfig.target_by_name(a, "ext") == sbconfig.target_by_name(b, "ext")
    assert sbconfig.measurement_settings(a) == sbconfig.measurement_settings(b)
    assert sbconfig.experiment(a, "ext") == sbconfig.experiment(b, "ext")
    assert sbconfig.telemetry_settings(b, "ext") == {
        "interval_s": 0.1, "metrics_url": "http://127.0.0.1:9/metrics",
        "exporters": ["http://127.0.0.1:9400/metrics"]}
    assert sbconfig.telemetry_settings(a, "ext")["metrics_url"] is None
    assert sbconfig.prices(b) == {"ext": 2.5} and sbconfig.prices(a) == {"ext": None}
