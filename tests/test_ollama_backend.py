"""The ollama backend against a scripted Ollama (tests/doubles/ollama_double.py): wire, errors,
slots."""

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import requests

from doubles.ollama_double import OllamaDouble
from slotbench.measure.backends import BackendError, make_backend
from slotbench.measure.backends.ollama import OllamaBackend
from slotbench.measure.servers.llamacpp import ServerError
from slotbench.measure.servers.ollama import NOT_INSTALLED, ManagedOllama, managed_env
from slotbench.measure.servers.supervisor import managed_class

MODEL = "gemma3:270m"
FAST = {"token_s": 0.004, "prompt_token_s": 0.0002, "load_s": 0.01}
# slot tests need a service time well above thread start-up jitter
PACED = {"token_s": 0.02, "prompt_token_s": 0.0002, "load_s": 0.01}
PROMPT = "Request nonce-1. Tell me a story about a lighthouse keeper"


def target(**extra) -> dict:
    return {"name": "o", "backend": "ollama", "managed": False, "url": "", "model": MODEL,
            "num_ctx": 2048, "keep_alive": "30m", **extra}


@pytest.fixture
def double():
    with OllamaDouble(slots=1, **FAST) as d:
        yield d


def backend_for(d: OllamaDouble, **extra) -> OllamaBackend:
    return OllamaBackend(d.url, target=target(url=d.url, **extra), timeout_s=10)


# -- wire format ------------------------------------------------------------------------------


def test_generate_sends_exactly_the_documented_body(double):
    backend = backend_for(double)
    backend.generate(PROMPT, num_predict=3, temperature=0.0, seed=42)
    assert double.bodies() == [{
        "model": MODEL, "prompt": PROMPT, "stream": True, "think": False, "keep_alive": "30m",
        "options": {"num_predict": 3, "num_ctx": 2048, "seed": 42, "temperature": 0.0},
    }]


def test_load_sends_no_prompt_and_the_measured_num_ctx(double):
    backend = backend_for(double)
    backend.load()
    assert double.bodies() == [
        {"model": MODEL, "stream": False, "keep_alive": "30m", "options": {"num_ctx": 2048}}
    ]
    backend.generate(PROMPT, 2, 0.0, 1)
    assert double.loads == 1  # the measured request did not reload the model


def test_make_backend_finds_the_ollama_backend(double):
    assert isinstance(make_backend(target(url=double.url), double.url, 5), OllamaBackend)


def test_double_speaks_ndjson_with_omitted_zero_metrics(double):
    """The double itself: the shape a real Ollama stream has (api/types.go, routes.go)."""
    body = {"model": MODEL, "prompt": "a b c [stop:0]", "options": {"num_predict": 2}}
    resp = requests.post(double.url + "/api/generate", json=body, stream=True, timeout=5)
    assert resp.headers["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in resp.iter_lines() if line]
    assert len(lines) == 1  # no tokens: only the final chunk
    final = lines[0]
    assert list(final)[:5] == ["model", "created_at", "response", "done", "done_reason"]
    assert final["response"] == "" and final["done"] is True and final["done_reason"] == "stop"
    assert "eval_count" not in final and "eval_duration" not in final
    assert isinstance(final["total_duration"], int) and final["created_at"].endswith("Z")

    resp = requests.post(double.url + "/api/generate", json={"model": MODEL}, timeout=5)
    load = resp.json()
    assert set(load) == {"model", "created_at", "response", "done", "done_reason"}
    assert load["done_reason"] == "load" and load["response"] == ""


def test_record_converts_nanoseconds_and_keeps_server_fields(double):
    rec = backend_for(double).generate(PROMPT, num_predict=4, temperature=0.0, seed=1)
    s = rec.server
    assert set(s) == {"eval_count", "eval_duration_ns", "prompt_eval_count",
                      "prompt_eval_duration_ns", "load_duration_ns", "total_duration_ns",
                      "done_reason"}
    assert rec.output_tokens == s["eval_count"] == 4 and rec.chunks == 4
    assert rec.gen_s == pytest.approx(s["eval_duration_ns"] / 1e9)
    assert 4 * FAST["token_s"] * 0.9 < rec.gen_s < 1.0
    assert rec.prompt_tokens == s["prompt_eval_count"] == len(PROMPT.split())
    assert rec.done_reason == s["done_reason"] == "length"
    assert all(isinstance(s[k], int) for k in s if k.endswith("_ns"))
    assert rec.t_sent < rec.t_first < rec.t_done
    assert rec.timing_source == "server"


def test_early_stop_is_reported_as_stop(double):
    rec = backend_for(double).generate(PROMPT + " [stop:2]", num_predict=6, temperature=0, seed=1)
    assert (rec.output_tokens, rec.done_reason) == (2, "stop")


def test_omitted_zero_metrics_stay_none(double):
    double.prompt_cache = True
    backend = backend_for(double)
    backend.generate(PROMPT, 2, 0.0, 1)
    rec = backend.generate(PROMPT, 2, 0.0, 1)  # fully cached prompt: Ollama omits the zeros
    assert rec.prompt_tokens is None
    assert rec.server["prompt_eval_count"] is None
    assert rec.server["prompt_eval_duration_ns"] is None
    assert rec.output_tokens == 2

    rec = backend.generate("fresh words [stop:0]", 5, 0.0, 1)  # no tokens at all
    assert rec.output_tokens == 0 and isinstance(rec.output_tokens, int)
    assert rec.gen_s is None and rec.server["eval_count"] is None
    assert rec.server["eval_duration_ns"] is None
    assert rec.t_first is None


# -- errors -----------------------------------------------------------------------------------


def test_unknown_model_tells_the_user_to_pull_it(double):
    double.model = "llama3.2:1b"
    backend = backend_for(double)
    with pytest.raises(BackendError) as err:
        backend.generate(PROMPT, 2, 0.0, 1)
    assert "ollama pull gemma3:270m" in str(err.value) and "404" in str(err.value)
    with pytest.raises(BackendError, match="ollama pull gemma3:270m"):
        backend.load()


def test_busy_server_names_the_queue_limit(double):
    double.fail = "busy"
    with pytest.raises(BackendError) as err:
        backend_for(double).generate(PROMPT, 2, 0.0, 1)
    msg = str(err.value)
    assert "503" in msg and "OLLAMA_MAX_QUEUE" in msg and "maximum pending requests" in msg


def test_error_line_under_http_200_is_an_error(double):
    double.fail, double.fail_after = "error_mid_stream", 2
    with pytest.raises(BackendError, match="mid-stream after 2 chunks: an error was encountered"):
        backend_for(double).generate(PROMPT, 5, 0.0, 1)


@pytest.mark.parametrize("mode", ["truncate", "disconnect"])
def test_stream_without_done_is_an_error(double, mode):
    double.fail, double.fail_after = mode, 1
    with pytest.raises(BackendError, match="after 1 chunks"):
        backend_for(double).generate(PROMPT, 5, 0.0, 1)


def test_other_http_errors_carry_their_body(double):
    double.fail = "internal"
    with pytest.raises(BackendError, match="HTTP 500: llama runner process has terminated"):
        backend_for(double).generate(PROMPT, 2, 0.0, 1)


def test_connection_refused_asks_whether_ollama_runs():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed
    backend = OllamaBackend(url, target=target(url=url), timeout_s=2)
    with pytest.raises(BackendError, match=f"cannot reach Ollama at {url}; is Ollama running"):
        backend.generate(PROMPT, 2, 0.0, 1)
    with pytest.raises(BackendError, match="cannot reach Ollama"):
        backend.load()


# -- slots ------------------------------------------------------------------------------------


def four_at_once(d: OllamaDouble) -> list:
    backend = backend_for(d)
    backend.load()
    records = [None] * 4
    start = threading.Barrier(4)

    def one(i):
        start.wait()
        records[i] = backend.generate(f"Request nonce-{i}. Go on now", 5, 0.0, i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def queue_gap(rec) -> float:
    s = rec.server
    parts = ("load_duration_ns", "prompt_eval_duration_ns", "eval_duration_ns")
    return (s["total_duration_ns"] - sum(s[k] or 0 for k in parts)) / 1e9


def test_one_slot_serialises_generation_and_queues_the_rest():
    with OllamaDouble(slots=1, **PACED) as d:
        records = sorted(four_at_once(d), key=lambda r: r.t_first)
    for prev, nxt in zip(records, records[1:]):
        assert nxt.t_first >= prev.t_done - 0.002  # generation windows do not overlap
    gaps = [queue_gap(r) for r in records]
    service = 5 * PACED["token_s"]
    assert gaps[0] < service / 2
    for k in range(1, 4):
        assert gaps[k] > gaps[k - 1] + 0.7 * service  # each waits for everyone before it
    assert d.max_active == 1


def test_four_slots_generate_together():
    with OllamaDouble(slots=4, **PACED) as d:
        records = four_at_once(d)
    assert max(r.t_first for r in records) < min(r.t_done for r in records)
    assert all(queue_gap(r) < 5 * PACED["token_s"] / 2 for r in records)
    assert d.max_active == 4
    # batching costs each stream some speed, but far less than serialising would
    solo = 5 * PACED["token_s"]
    assert all(solo < r.gen_s < 2.5 * solo for r in records)


# -- description ------------------------------------------------------------------------------


def test_describe_and_model_facts(double):
    backend = backend_for(double, ollama_env={"OLLAMA_NUM_PARALLEL": "1"})
    before = backend.describe()
    assert before["ps"] == []
    backend.load()
    described = backend.describe()
    assert set(described) == {"version", "model_tag", "show", "ps", "requested_num_ctx",
                              "ollama_env"}
    assert described["version"] == double.version
    assert described["model_tag"] == {k: double.tag[k] for k in ("name", "digest", "size",
                                                                  "modified_at")}
    assert described["show"]["details"]["quantization_level"] == "Q4_K_M"
    assert described["show"]["model_info"] == {
        "general.architecture": "gemma3", "general.parameter_count": 268098176,
        "gemma3.context_length": 32768,
    }
    (ps,) = described["ps"]
    assert set(ps) == {"name", "model", "size", "size_vram", "context_length", "expires_at"}
    assert ps["context_length"] == 2048 and ps["size_vram"] == 0
    assert described["requested_num_ctx"] == 2048
    assert described["ollama_env"] == {"OLLAMA_NUM_PARALLEL": "1"}
    assert double.bodies("/api/show") == [{"model": MODEL}] * 2
    assert backend.model_facts(described) == {
        "quantisation": "Q4_K_M", "digest": double.tag["digest"], "size_bytes": 291554930,
        "parameter_size": "268.10M", "family": "gemma3",
    }


def test_describe_matches_latest_tags_and_survives_missing_show(double):
    double.model = double.tag["name"] = double.tag["model"] = "gemma3:latest"
    described = OllamaBackend(double.url, target(model="gemma3"), 5).describe()
    assert described["model_tag"]["name"] == "gemma3:latest"

    described = OllamaBackend(double.url, target(model="qwen3:0.6b"), 5).describe()
    assert described["model_tag"] is None
    assert "ollama pull qwen3:0.6b" in described["show"]["unavailable"]
    assert described["ollama_env"] == {}
    facts = OllamaBackend(double.url, target(model="qwen3:0.6b"), 5).model_facts(described)
    assert facts == dict.fromkeys(["quantisation", "digest", "size_bytes", "parameter_size",
                                   "family"])


# -- managed ollama serve ---------------------------------------------------------------------

SETTINGS = {"parallel": 2, "ctx_size": 4096, "startup_timeout_s": 20, "flash_attention": False,
            "kv_cache_type": "f16", "keep_alive": "30m"}


def test_managed_ollama_is_registered():
    assert managed_class("ollama") is ManagedOllama


def test_managed_ollama_without_ollama_on_path_says_so(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ServerError) as err:
        ManagedOllama(SETTINGS, tmp_path / "log.txt").start()
    assert str(err.value) == NOT_INSTALLED
    assert "ollama is not installed (no `ollama` on PATH)" in str(err.value)


def fake_ollama(bin_dir: Path) -> None:
    """An `ollama` that logs a server config line and serves the double on OLLAMA_HOST."""
    double = Path(__file__).parent / "doubles" / "ollama_double.py"
    script = bin_dir / "ollama"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys
        assert sys.argv[1:] == ["serve"], sys.argv
        env = {{k: v for k, v in os.environ.items() if k.startswith("OLLAMA_")}}
        print('level=INFO source=routes.go msg="server config" env="map%s"' % sorted(env.items()),
              flush=True)
        port = os.environ["OLLAMA_HOST"].rsplit(":", 1)[1]
        os.execv(sys.executable, [sys.executable, {str(double)!r}, "--port", port,
                 "--slots", os.environ["OLLAMA_NUM_PARALLEL"], "--token-ms", "2"])
        """))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_managed_ollama_starts_describes_and_stops(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_ollama(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OLLAMA_MAX_QUEUE", "7")
    log = tmp_path / "logs" / "server.log"
    with ManagedOllama(SETTINGS, log) as server:
        assert server.alive() and server.url.startswith("http://127.0.0.1:")
        assert server.model_path is None and server.command[1:] == ["serve"]
        info = server.describe()
        env = info["ollama_env"]
        assert env["OLLAMA_HOST"] == server.url.removeprefix("http://")
        assert env["OLLAMA_NUM_PARALLEL"] == "2" and env["OLLAMA_CONTEXT_LENGTH"] == "4096"
        assert env["OLLAMA_FLASH_ATTENTION"] == "0" and env["OLLAMA_KV_CACHE_TYPE"] == "f16"
        assert env["OLLAMA_KEEP_ALIVE"] == "30m" and env["OLLAMA_MAX_QUEUE"] == "7"
        assert "server config" in info["server_config_line"]
        assert "OLLAMA_NUM_PARALLEL', '2'" in info["server_config_line"]
        # the backend of a managed target records the same env the server was started with
        managed = target(managed=True, server=SETTINGS)
        backend = OllamaBackend(server.url, managed, 10)
        assert backend.describe()["ollama_env"] == env == managed_env(SETTINGS, env["OLLAMA_HOST"])
        assert backend.generate(PROMPT, 3, 0.0, 1).output_tokens == 3
        proc = server.proc
    assert proc.poll() is not None and not server.alive()
    assert "$ OLLAMA_" in log.read_text()


def test_double_runs_standalone_and_prints_its_url():
    script = Path(__file__).parent / "doubles" / "ollama_double.py"
    proc = subprocess.Popen([sys.executable, str(script), "--port", "0", "--slots", "2",
                             "--token-ms", "1", "--load-ms", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert requests.get(url + "/", timeout=5).text == "Ollama is running"
        rec = OllamaBackend(url, target(url=url), 5).generate(PROMPT, 2, 0.0, 1)
        assert rec.output_tokens == 2
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_server_that_is_not_ollama_is_named(double):
    backend = OllamaBackend(double.url + "/nope", target(url=double.url), 5)
    with pytest.raises(BackendError, match="HTTP 404: 404 page not found; is this an Ollama"):
        backend.describe()


def test_managed_ollama_target_runs_a_rep_through_connect(tmp_path, monkeypatch):
    """Config → connect → fingerprint → run_rep, with `ollama serve` played by the double."""
    from slotbench.workflow.config import resolve
    from slotbench.measure.execute import run_rep
    from slotbench.measure.fingerprint import fingerprint
    from slotbench.measure.plan import make_rep_plan, run_plan
    from slotbench.measure.targets import connect

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_ollama(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cfg = resolve({"arms": [1, 2], "targets": [{"name": "o", "backend": "ollama",
                   "managed": True, "model": MODEL, "server": {"parallel": 2}}]})
    tgt = cfg["targets"][0]
    settings = {"arms": [1, 2], "requests_per_cell": 2, "num_predict": 3, "temperature": 0.0,
                "warmup_predict": 2, "request_timeout_s": 10, "cooldown_s": 0,
                "thermal_interval_s": 1.0}
    plan = run_plan("o", "run1", [1, 2], 2, 1, "Request {nonce}. Go.", 6, nonces=True,
                    control_arm=False)
    with connect(tgt, tmp_path / "server.log", 10) as conn:
        fp = fingerprint(conn, "o", "run1", cfg)
        raw = run_rep(conn, plan, make_rep_plan(plan, 1, client_processes=1), settings,
                      {"commit": "x", "dirty": False})
    assert fp["model"] == {"name": MODEL, "quantisation": "Q4_K_M",
                           "digest": fp["server"]["model_tag"]["digest"], "size_bytes": 291554930,
                           "parameter_size": "268.10M", "family": "gemma3"}
    server = fp["server"]
    assert server["backend"] == "ollama" and server["managed"] is True
    assert server["ollama_env"]["OLLAMA_NUM_PARALLEL"] == "2"
    assert "server config" in server["server_config_line"]
    assert raw["server"]["ps"][0]["context_length"] == 4096  # /api/ps after the rep
    for cell in raw["cells"]:
        assert [r["output_tokens"] for r in cell["requests"]] == [3, 3]
        assert all(r["server"]["load_duration_ns"] for r in cell["requests"])
