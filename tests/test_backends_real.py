"""Backends against the real embedded llama-server, and the OpenAI client against a fake one.

The real-server tests (marked e2e) start llama-server with Gemma 3 270M once per module and
send real requests; nothing is mocked. The client-side timing fallback and the error paths
need a server that behaves like vLLM or a broken proxy, which llama-server never does, so
those run against a tiny stdlib SSE server defined here.
"""

from __future__ import annotations

import importlib.util
import json
import secrets
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from slotbench.measure.backends import BackendError, make_backend
from slotbench.measure.backends.llamacpp import LlamaCppBackend
from slotbench.measure.backends.openai import OpenAIBackend, api_root
from slotbench.measure.servers.base import free_port
from slotbench.measure.servers.llamacpp import ManagedLlamaServer

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"parallel": 4, "ctx_size": 4096, "threads": 2, "startup_timeout_s": 120}
MODEL = "gemma-3-270m-q4_k_m"
PROMPT = "Request 418236. Summarise the following passage in two sentences.\n\nPassage: "
e2e = pytest.mark.e2e


def openai_target(**extra) -> dict:
    return {"name": "t", "backend": "openai", "managed": False, "model": MODEL} | extra


# --------------------------------------------------------------------------------------------
# A fake OpenAI-compatible server: streams a scripted SSE answer with HTTP/1.1 chunked encoding
# (as llama-server, vLLM and Ollama do), records every request it gets.
# --------------------------------------------------------------------------------------------


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def token_chunk(text: str, finish=None) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text,
                                                      "finish_reason": finish}]}


def usage_chunk(prompt: int, completion: int) -> dict:
    return {"object": "text_completion", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


class FakeServer:
    """``script`` is a list of (delay_s, bytes) events, or ``status`` + ``body`` for an error."""

    def __init__(self):
        self.requests: list[dict] = []
        self.script: list[tuple[float, bytes]] = []
        self.status = 200
        self.body = b""
        self.server_header = "FakeOpenAI/1.0"
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # small writes go out at once (else Nagle + delayed ACK hold a token ~40 ms)
            disable_nagle_algorithm = True

            def log_message(self, *args):  # keep pytest output clean
                pass

            def version_string(self):
                return fake.server_header

            def do_GET(self):
                fake.requests.append({"method": "GET", "path": self.path,
                                      "headers": dict(self.headers)})
                body = json.dumps({"object": "list", "data": [{"id": MODEL,
                                                               "owned_by": "fake"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                fake.requests.append({"method": "POST", "path": self.path,
                                      "headers": dict(self.headers),
                                      "body": json.loads(self.rfile.read(length))})
                if fake.status != 200:
                    self.send_response(fake.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(fake.body)))
                    self.end_headers()
                    self.wfile.write(fake.body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for delay, data in fake.script:
                    time.sleep(delay)
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def posts(self) -> list[dict]:
        return [r for r in self.requests if r["method"] == "POST"]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.close()


def test_base_url_may_or_may_not_end_in_v1():
    for url in ["http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1",
                "http://127.0.0.1:8000/v1/"]:
        assert api_root(url) == "http://127.0.0.1:8000"


def test_registry_builds_the_openai_backend():
    backend = make_backend(openai_target(endpoint="chat"), "http://127.0.0.1:9/v1", 5)
    assert isinstance(backend, OpenAIBackend)
    assert backend.path == "/v1/chat/completions"


def test_client_timing_when_the_server_sends_no_timings(fake, monkeypatch):
    """vLLM-style stream: 6 tokens 50 ms apart, usage in an extra chunk, no llama.cpp timings."""
    key = secrets.token_urlsafe(16)
    monkeypatch.setenv("FAKE_SERVER_KEY", key)
    fake.script = [(0.0 if i == 0 else 0.05, sse(token_chunk(f" t{i}"))) for i in range(6)]
    fake.script += [(0, sse(token_chunk("", "length"))), (0, sse(usage_chunk(7, 6))),
                    (0, sse(b"[DONE]"))]
    backend = OpenAIBackend(fake.url + "/v1", openai_target(api_key_env="FAKE_SERVER_KEY"))
    rec = backend.generate("hello", 6, 0.5, 11)

    assert rec.timing_source == "client"
    assert rec.output_tokens == 6 and rec.prompt_tokens == 7 and rec.chunks == 6
    assert rec.done_reason == "length"
    # 5 intervals of >= 50 ms between the first and the last token; gen_s is scaled so that
    # output_tokens / gen_s is the per-user rate (n-1)/(t_last - t_first); 10 ms of slack for
    # a first chunk that the client read a little late on a busy machine
    assert 0.24 * 6 / 5 <= rec.gen_s < 2.0, rec.gen_s
    assert rec.gen_s == pytest.approx((rec.t_last - rec.t_first) * 6 / 5)
    assert rec.t_sent <= rec.t_first < rec.t_done
    assert rec.server == {"finish_reason": "length", "usage_prompt_tokens": 7,
                          "usage_completion_tokens": 6, "ignore_eos": False}

    (req,) = fake.posts()
    assert req["path"] == "/v1/completions"
    assert req["headers"]["Authorization"] == f"Bearer {key}"
    assert req["body"] == {"model": MODEL, "prompt": "hello", "max_tokens": 6,
                           "temperature": 0.5, "seed": 11, "stream": True,
                           "stream_options": {"include_usage": True}}


def test_chat_first_token_is_the_first_content_not_the_role_chunk(fake):
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                         "finish_reason": None}]}
    fake.script = [(0, sse(role))]
    fake.script += [(0.3 if i == 0 else 0.02,
                     sse({"choices": [{"index": 0, "delta": {"content": f"w{i}"},
                                       "finish_reason": None}]})) for i in range(3)]
    fake.script += [(0, sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
                    (0, sse(usage_chunk(9, 3))), (0, sse(b"[DONE]"))]
    backend = OpenAIBackend(fake.url, openai_target(endpoint="chat", ignore_eos=True))
    rec = backend.generate("hi", 8, 0.0, 1)
    assert rec.t_first - rec.t_sent >= 0.3
    assert rec.chunks == 3 and rec.output_tokens == 3 and rec.done_reason == "stop"
    (req,) = fake.posts()
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert "prompt" not in req["body"] and req["body"]["ignore_eos"] is True
    assert "Authorization" not in req["headers"]


def test_llama_server_gets_cache_prompt_false(fake):
    """llama-server would serve a prompt it has seen from its KV cache (see openai.py)."""
    fake.server_header = "llama.cpp"
    fake.script = [(0, sse(token_chunk("a"))), (0, sse(usage_chunk(2, 1))), (0, sse(b"[DONE]"))]
    backend = OpenAIBackend(fake.url, openai_target())
    backend.generate("x", 1, 0.0, 1)
    backend.generate("y", 1, 0.0, 1)
    assert [r["method"] for r in fake.requests] == ["GET", "POST", "POST"]  # asked once
    assert all(r["body"]["cache_prompt"] is False for r in fake.posts())
    assert backend.describe()["llama_server_fields"] == {"cache_prompt": False}


def test_server_timings_win_over_client_timing(fake):
    final = token_chunk("", "length") | usage_chunk(5, 3) | {
        "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
        "timings": {"prompt_n": 5, "prompt_ms": 10.0, "predicted_n": 3, "predicted_ms": 250.0,
                    "cache_n": 0}}
    fake.script = [(0, sse(token_chunk("a"))), (0, sse(token_chunk("b"))),
                   (0, sse(token_chunk("c"))), (0, sse(final)), (0, sse(b"[DONE]"))]
    rec = OpenAIBackend(fake.url, openai_target()).generate("x", 3, 0.0, 1)
    assert rec.timing_source == "server" and rec.gen_s == pytest.approx(0.25)
    assert rec.server["predicted_ms"] == 250.0 and rec.server["cache_n"] == 0


@pytest.mark.parametrize(
    "script, needle",
    [
        ([sse(token_chunk("a"))], "without data: [DONE]"),
        ([sse(token_chunk("a", "stop")), sse(b"[DONE]")], "without usage"),
        ([sse(token_chunk("a")), sse({"error": {"code": 500, "message": "slot crashed",
                                                "type": "server_error"}})],
         "server error mid-stream after 1 chunks: slot crashed"),
        ([b"data: {not json\n\n"], "unreadable stream line"),
    ],
)
def test_broken_streams_fail_clearly(fake, script, needle):
    fake.script = [(0, data) for data in script]
    with pytest.raises(BackendError) as err:
        OpenAIBackend(fake.url, openai_target()).generate("x", 3, 0.0, 1)
    assert needle in str(err.value)


def test_rejected_key_is_named_by_variable_never_by_value(fake, monkeypatch):
    key = "sk-" + secrets.token_hex(16)
    monkeypatch.setenv("FAKE_SERVER_KEY", key)
    fake.status = 401
    # some servers echo the key they were given; our message must not
    fake.body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}",
                                      "type": "invalid_request_error"}}).encode()
    backend = OpenAIBackend(fake.url, openai_target(api_key_env="FAKE_SERVER_KEY"))
    with pytest.raises(BackendError) as err:
        backend.generate("x", 3, 0.0, 1)
    text = str(err.value)
    assert "API key rejected" in text and "check the variable named in api_key_env" in text
    assert "FAKE_SERVER_KEY" in text
    assert key not in text and key not in repr(err.value)
    assert err.value.__cause__ is None or key not in str(err.value.__cause__)
    for shown in (repr(backend), str(backend), str(vars(backend))):
        assert key not in shown


def test_unknown_model_and_server_errors_say_so(fake):
    fake.status = 404
    fake.body = json.dumps({"object": "error", "message": "The model `nope` does not exist.",
                            "type": "NotFoundError", "code": 404}).encode()
    with pytest.raises(BackendError) as err:
        OpenAIBackend(fake.url, openai_target(model="nope")).generate("x", 3, 0.0, 1)
    assert "does not exist" in str(err.value) and "'nope'" in str(err.value)
    assert "/v1/models" in str(err.value)
    fake.status, fake.body = 500, b"upstream exploded"
    with pytest.raises(BackendError, match="HTTP 500: upstream exploded"):
        OpenAIBackend(fake.url, openai_target()).generate("x", 3, 0.0, 1)


def test_unset_key_variable_and_refused_connection(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(BackendError, match="NO_SUCH_KEY_VAR, which is not set"):
        OpenAIBackend("http://127.0.0.1:9", openai_target(api_key_env="NO_SUCH_KEY_VAR"))
    monkeypatch.setenv("EMPTY_KEY_VAR", "")
    with pytest.raises(BackendError, match="EMPTY_KEY_VAR .* is empty"):
        OpenAIBackend("http://127.0.0.1:9", openai_target(api_key_env="EMPTY_KEY_VAR"))
    port = free_port()  # nothing listens there
    with pytest.raises(BackendError, match=f"cannot reach http://127.0.0.1:{port}"):
        OpenAIBackend(f"http://127.0.0.1:{port}/v1", openai_target()).generate("x", 3, 0.0, 1)


def test_describe_lists_models_and_no_secret(fake, monkeypatch):
    key = secrets.token_urlsafe(20)
    monkeypatch.setenv("FAKE_SERVER_KEY", key)
    backend = OpenAIBackend(fake.url, openai_target(api_key_env="FAKE_SERVER_KEY"))
    described = backend.describe()
    assert described["models"] == [MODEL]
    assert described["auth"] == "bearer key from $FAKE_SERVER_KEY"
    assert key not in json.dumps(described)
    assert backend.model_facts(described) == {"served_id": MODEL}
    assert fake.requests[0]["headers"]["Authorization"] == f"Bearer {key}"
    assert backend.tokenizer() is None


# --------------------------------------------------------------------------------------------
# The real embedded llama-server
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ManagedLlamaServer(SETTINGS, tmp_path_factory.mktemp("real") / "server.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """A second server that requires an API key (LLAMA_API_KEY in its environment)."""
    key = "sb-" + secrets.token_urlsafe(24)
    srv = ManagedLlamaServer(SETTINGS | {"api_key_env": "SLOTBENCH_SERVER_KEY"},
                        tmp_path_factory.mktemp("keyed") / "server.log")
    with pytest.MonkeyPatch.context() as mp:  # the server reads the variable only at start
        mp.setenv("SLOTBENCH_SERVER_KEY", key)
        srv.start()
    try:
        yield srv, key
    finally:
        srv.stop()


def eos_id(url: str) -> int:
    resp = requests.post(url + "/tokenize", json={"content": "<eos>", "add_special": False,
                                                   "parse_special": True}, timeout=10)
    (token,) = resp.json()["tokens"]
    return token


class EosLovingNative(LlamaCppBackend):
    """Adds a strong bias towards EOS, so that without ignore_eos the request stops at once."""

    eos = 1

    def payload(self, *args):
        return super().payload(*args) | {"logit_bias": [[self.eos, 30.0]]}


class EosLovingOpenAI(OpenAIBackend):
    eos = 1

    def payload(self, *args):
        return super().payload(*args) | {"logit_bias": {str(self.eos): 30.0}}


@e2e
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("suffix", ["", "/v1"])
def test_openai_endpoints_stream_tokens_and_report_usage(server, endpoint, suffix):
    backend = OpenAIBackend(server.url + suffix,
                            openai_target(endpoint=endpoint, ignore_eos=True))
    rec = backend.generate(PROMPT, 24, 0.7, 7)
    assert rec.output_tokens == 24 and rec.server["usage_completion_tokens"] == 24
    assert rec.done_reason == "length" and rec.server["finish_reason"] == "length"
    assert 18 <= rec.chunks <= 24, rec.chunks  # one chunk per token, bar split UTF-8
    assert rec.t_sent < rec.t_first < rec.t_done
    # llama-server attaches its own timings to the usage chunk: server-side generation time
    assert rec.timing_source == "server"
    assert rec.server["predicted_n"] == 24
    assert rec.gen_s == pytest.approx(rec.server["predicted_ms"] / 1000)
    assert 0 < rec.gen_s < rec.t_done - rec.t_sent
    assert rec.prompt_tokens == rec.server["usage_prompt_tokens"] > 0


@e2e
def test_openai_prompt_tokens_match_the_server_tokenizer(server):
    native = LlamaCppBackend(server.url, {"backend": "llamacpp"})
    rec = OpenAIBackend(server.url, openai_target()).generate(PROMPT, 4, 0.7, 3)
    assert rec.prompt_tokens == native.count_tokens(PROMPT)


@e2e
def test_openai_never_reuses_llama_servers_prompt_cache(server):
    prompt = PROMPT + "(cache probe)"
    backend = OpenAIBackend(server.url, openai_target())
    backend.generate(prompt, 4, 0.7, 1)
    again = backend.generate(prompt, 4, 0.7, 1)
    assert again.server["cache_n"] == 0 and again.server["prompt_n"] == again.prompt_tokens
    # what cache_prompt: false prevents: by default llama-server reuses a prompt it has seen
    default = requests.post(server.url + "/v1/completions",
                            json={"prompt": prompt, "max_tokens": 4}, timeout=60).json()
    assert default["timings"]["cache_n"] > default["usage"]["prompt_tokens"] // 2, default


@e2e
def test_describe_and_model_facts_from_v1_models(server):
    backend = OpenAIBackend(server.url + "/v1", openai_target())
    described = backend.describe()
    assert len(described["models"]) == 1 and described["auth"] == "none"
    facts = backend.model_facts(described)
    assert "Q4_K" in facts["quantisation"] and facts["n_params"] > 2e8


@e2e
def test_ignore_eos_pins_output_length_on_both_backends(server):
    eos = eos_id(server.url)
    EosLovingNative.eos = EosLovingOpenAI.eos = eos
    cases = {
        "llamacpp": lambda ignore: EosLovingNative(
            server.url, {"backend": "llamacpp", "ignore_eos": ignore}),
        "openai": lambda ignore: EosLovingOpenAI(
            server.url, openai_target(ignore_eos=ignore)),
    }
    for name, make in cases.items():
        stopped = make(False).generate(PROMPT, 20, 0.7, 5)
        assert stopped.done_reason == "stop" and stopped.output_tokens < 20, (name, stopped)
        pinned = make(True).generate(PROMPT, 20, 0.7, 5)
        assert pinned.done_reason == "length" and pinned.output_tokens == 20, (name, pinned)
        assert pinned.server["ignore_eos"] is True and stopped.server["ignore_eos"] is False


def load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "openai_vs_native", REPO / "benchmarks" / "openai_vs_native.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@e2e
def test_openai_throughput_is_within_10_percent_of_native(server):
    """A small version of benchmarks/openai_vs_native.py: interleaved native and openai cells
    at concurrency 4 with identical token counts; the median ratio within 10%.

    Sequential, in two stages: 5 rounds decide when their median is within 10%; otherwise 6
    more rounds are measured and the median of all 11 decides. A burst of outside load moves
    single rounds (a loaded CI machine once gave 3 of 5 rounds below 0.9 at half the quiet
    machine's speed); a real difference between the paths moves every round, and fails both
    stages."""
    bench = load_benchmark()
    rounds = bench.compare(server.url, rounds=5, num_predict=64, concurrency=4)
    if abs(statistics.median(r["ratio"] for r in rounds) - 1) > 0.10:
        # fresh prompts (another plan seed): none of the first stage's comes back
        rounds += bench.compare(server.url, rounds=6, num_predict=64, concurrency=4,
                                seed=20261202)
    for r in rounds:
        assert r["native"]["tokens"] == r["openai"]["tokens"] == 4 * 64
        assert r["openai"]["timing_sources"] == ["server"]
        # neither path may reuse another request's prompt cache (see openai.py)
        assert set(r["native"]["cache_n"]) == set(r["openai"]["cache_n"]) == {0}
    ratio = statistics.median(r["ratio"] for r in rounds)
    assert abs(ratio - 1) <= 0.10, [round(r["ratio"], 3) for r in rounds]


@e2e
def test_api_key_required_sent_and_never_shown(keyed, monkeypatch):
    srv, key = keyed
    assert key not in " ".join(srv.command) and key not in json.dumps(srv.describe())

    # no key configured: the server refuses, and says what to configure
    with pytest.raises(BackendError) as err:
        OpenAIBackend(srv.url, openai_target()).generate(PROMPT, 4, 0.7, 1)
    assert "API key rejected" in str(err.value) and "api_key_env" in str(err.value)

    # a wrong key: named by its variable, the value appears nowhere
    wrong = "sb-" + secrets.token_urlsafe(24)
    monkeypatch.setenv("SLOTBENCH_WRONG_KEY", wrong)
    backend = OpenAIBackend(srv.url, openai_target(api_key_env="SLOTBENCH_WRONG_KEY"))
    for call in (lambda: backend.generate(PROMPT, 4, 0.7, 1), backend.describe):
        with pytest.raises(BackendError) as err:
            call()
        text = str(err.value)
        assert "API key rejected" in text
        assert "check the variable named in api_key_env (SLOTBENCH_WRONG_KEY)" in text
        assert wrong not in text and key not in text

    # the right key works, on both the stream and /v1/models
    monkeypatch.setenv("SLOTBENCH_REAL_TEST_KEY", key)
    good = OpenAIBackend(srv.url + "/v1", openai_target(api_key_env="SLOTBENCH_REAL_TEST_KEY",
                                                        ignore_eos=True))
    rec = good.generate(PROMPT, 8, 0.7, 1)
    assert rec.output_tokens == 8 and rec.timing_source == "server"
    described = good.describe()
    assert described["models"] and key not in json.dumps(described)
    for shown in (repr(good), str(vars(good)), json.dumps(rec.server)):
        assert key not in shown
    assert key not in srv.log_path.read_text(errors="replace")


@e2e
def test_short_requests_in_a_row_never_meet_a_closed_connection(server):
    """llama-server closes the connection after every streamed response (while its headers say
    Keep-Alive), so a request sent at once after another can meet a closed socket; none of
    these may fail, on either backend, with plain requests between them."""
    for backend in (LlamaCppBackend(server.url, {"model": MODEL}, 60),
                    make_backend(openai_target(url=server.url), server.url, 60)):
        for i in range(16):
            rec = backend.generate(f"{PROMPT}Request {i}.", 2, 0.0, i)
            assert rec.chunks >= 1
            backend.describe()
