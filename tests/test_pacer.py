"""tests/doubles/pacer.py speaks every backend's wire format and its truth log is the truth.

Fast (a few seconds). The server is tests/doubles/pacer.c (compiled on first use by pacer.py);
the backends are slotbench's own, so this also checks the streaming client against a known
schedule. The byte-level tests below pin the wire formats the earlier Python pacer produced.
"""

import http.client
import json
import re
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from doubles.pacer import PacerConfig, PacerThread, build
from doubles.wait import wait_for
from slotbench.measure.backends import make_backend

FORMATS = {
    "llamacpp": {"backend": "llamacpp"},
    "ollama": {"backend": "ollama"},
    "openai": {"backend": "openai", "endpoint": "completions"},
    "openai-chat": {"backend": "openai", "endpoint": "chat"},
}


@pytest.fixture
def pacer(tmp_path):
    log = tmp_path / "truth.jsonl"
    with PacerThread(PacerConfig(ttft_ms=20, gap_ms=4, slots=2, truth_log=str(log))) as url:
        yield url, log


def truth(log: Path, row: str | None = None) -> dict:
    """The truth log by request id, once it holds ``row``: the pacer writes a request's line
    just after its last bytes, so the client can be a moment ahead of it."""

    def rows():
        return {r["id"]: r for r in map(json.loads, log.read_text().splitlines())}

    if row is not None:
        wait_for(lambda: row in rows(), 2, f"the pacer's truth row {row}", interval=0.01)
    return rows()


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_streams_the_requested_tokens_and_logs_them(pacer, fmt):
    url, log = pacer
    backend = make_backend({"name": "p", "managed": False, "url": url, "model": "pacer",
                            **FORMATS[fmt]}, url, 10)
    backend.describe()  # the fingerprint endpoints answer
    rec = backend.generate("Request 004711 tell me a story", 6, 0.0, 1)
    assert (rec.output_tokens, rec.chunks, rec.prompt_tokens) == (6, 6, 6)
    assert rec.done_reason == "length"
    row = truth(log, "004711")["004711"]
    assert row["completed"] and row["n_written"] == 6
    assert row["t_tok"][0] - row["t_slot"] >= 0.020  # never early
    # the client saw every write after it happened, and in time order; the pacer stamps a token
    # when its write has drained, which a loaded machine can let the client see first
    assert rec.t_sent <= row["t_arrive"] <= row["t_body"] <= row["t_tok"][0] <= rec.t_first + 0.002
    assert rec.t_first <= rec.t_last <= rec.t_done
    if rec.timing_source == "server":  # llama.cpp and Ollama report the truth-log durations
        assert rec.gen_s == pytest.approx(row["t_tok"][-1] - row["t_tok"][0], abs=1e-6)


def test_slots_queue_requests_beyond_them(pacer):
    url, log = pacer
    backend = make_backend({"name": "p", "backend": "llamacpp", "managed": False, "url": url},
                           url, 10)
    with ThreadPoolExecutor(4) as pool:
        recs = list(pool.map(lambda i: backend.generate(f"Request 9{i:05d} x", 4, 0.0, 1),
                             range(4)))
    rows = truth(log)
    assert len(rows) == 4 and all(r.output_tokens == 4 for r in recs)
    waits = sorted(r["t_slot"] - r["t_body"] for r in rows.values())
    assert waits[1] < 0.01 < waits[2]  # two slots: the third and fourth request waited


# --- raw HTTP: the bytes themselves ---------------------------------------------------------

ROUTES = {"llamacpp": "/completion", "ollama": "/api/generate",
          "openai": "/v1/completions", "openai-chat": "/v1/chat/completions"}


def request_body(fmt: str, prompt: str, n: int) -> dict:
    if fmt == "llamacpp":
        return {"prompt": prompt, "n_predict": n, "stream": True}
    if fmt == "ollama":
        return {"model": "pacer", "prompt": prompt, "options": {"num_predict": n}}
    body = {"model": "pacer", "max_tokens": n, "stream": True,
            "stream_options": {"include_usage": True}}
    if fmt == "openai":
        return body | {"prompt": prompt}
    return body | {"messages": [{"role": "user", "content": prompt}]}


def raw_exchange(url: str, data: bytes, timeout: float = 5.0) -> tuple[bytes, list[bytes]]:
    """Send ``data`` on a fresh connection; return (response head, chunks of a chunked body),
    read up to the terminating zero-size chunk."""
    host, port = url.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += sock.recv(65536) or pytest.fail(f"closed before a response: {buf!r}")
        head, rest = buf.split(b"\r\n\r\n", 1)
        chunks = []
        while True:
            while b"\r\n" not in rest:
                rest += sock.recv(65536) or pytest.fail("closed inside the body")
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line, 16)
            while len(rest) < size + 2:
                rest += sock.recv(65536) or pytest.fail("closed inside a chunk")
            assert rest[size : size + 2] == b"\r\n"
            if size == 0:
                return head + b"\r\n\r\n", chunks
            chunks.append(rest[:size])
            rest = rest[size + 2 :]


def http_request(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: pacer\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


STREAM_HEAD = ("HTTP/1.1 200 OK\r\nContent-Type: {}\r\nTransfer-Encoding: chunked\r\n"
               "Cache-Control: no-cache\r\nServer: slotbench-pacer\r\nConnection: keep-alive"
               "\r\n\r\n")
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z"


def token_pattern(fmt: str, last: bool) -> str:
    """The exact bytes of one token event (regex for its id, creation time)."""
    if fmt == "llamacpp":
        return re.escape('data: {"content":" tok","tokens":[],"stop":false,"id_slot":0,'
                         '"index":0}\n\n')
    if fmt == "ollama":
        return (re.escape('{"model":"pacer","created_at":"') + ISO
                + re.escape('","response":" tok","done":false}\n'))
    fin = '"length"' if last else "null"
    if fmt == "openai":
        obj, choice = "text_completion", '{"index":0,"text":" tok","logprobs":null,'
    else:
        obj = "chat.completion.chunk"
        choice = '{"index":0,"delta":{"role":"assistant","content":" tok"},"logprobs":null,'
    return (re.escape('data: {"id":"cmpl-pacer-') + r"\d+"
            + re.escape(f'","object":"{obj}","created":') + r"\d+"
            + re.escape(f',"model":"pacer","choices":[{choice}"finish_reason":{fin}}}]}}\n\n'))


FINAL_KEYS = {
    "llamacpp": ["content", "stop", "model", "tokens_predicted", "tokens_evaluated", "stop_type",
                 "stopping_word", "tokens_cached", "truncated", "timings"],
    "ollama": ["model", "created_at", "response", "done", "done_reason", "total_duration",
               "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"],
}
TIMINGS_KEYS = ["cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_is_byte_exact_and_logged_with_its_lateness(pacer, fmt):
    """Each token is its own chunk with the bytes the Python pacer wrote; the truth row has
    every token's due time, and its lateness is t_tok - due."""
    url, log = pacer
    n, nonce = 5, f"L{fmt.replace('-', '')}"
    body = json.dumps(request_body(fmt, f"Request {nonce} count to five", n)).encode()
    head, chunks = raw_exchange(url, http_request(ROUTES[fmt], body))
    ctype = "application/x-ndjson" if fmt == "ollama" else "text/event-stream"
    assert head.decode() == STREAM_HEAD.format(ctype)
    assert len(chunks) == n + 1  # one chunk per token, then the final event(s)
    for k, chunk in enumerate(chunks[:n]):
        assert re.fullmatch(token_pattern(fmt, k == n - 1), chunk.decode()), chunk
    final = chunks[-1].decode()
    if fmt in FINAL_KEYS:
        obj = json.loads(final.removeprefix("data: "))
        assert final.endswith("\n\n" if fmt == "llamacpp" else "}\n")
        assert list(obj) == FINAL_KEYS[fmt]
        if fmt == "llamacpp":
            assert list(obj["timings"]) == TIMINGS_KEYS
            assert (obj["tokens_predicted"], obj["tokens_evaluated"]) == (n, 5)
        else:
            assert (obj["eval_count"], obj["prompt_eval_count"], obj["done_reason"]) == (
                n, 5, "length")
    else:
        usage, done = final.split("\n\n", 1)
        assert done == "data: [DONE]\n\n"
        obj = json.loads(usage.removeprefix("data: "))
        assert obj["choices"] == [] and obj["usage"] == {
            "prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
    row = truth(log, nonce)[nonce]
    assert row["completed"] and row["n_written"] == n == len(row["due"]) == len(row["t_tok"])
    assert row["due"][0] == pytest.approx(row["t_slot"] + 0.020, abs=2e-9)
    gaps = [b - a for a, b in zip(row["due"], row["due"][1:])]
    assert gaps == pytest.approx([0.004] * (n - 1), abs=2e-9)  # absolute deadlines: no drift
    late = sorted(t - d for t, d in zip(row["t_tok"], row["due"]))
    assert late[0] >= 0  # never early
    assert row["late_max"] == pytest.approx(late[-1], abs=2e-9)
    assert row["late_p50"] == pytest.approx(late[(n - 1) // 2], abs=2e-9)
    assert row["t_tok"][-1] <= row["t_final"]


def test_a_chunked_request_body_is_read(pacer):
    url, log = pacer
    body = json.dumps(request_body("openai-chat", "Request CHUNKY one two three", 3)).encode()
    parts = [body[:5], body[5:40], body[40:]]
    data = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: pacer\r\n"
        "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    ).encode()
    data += b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts)
    data += b"0\r\nX-Trailer: yes\r\n\r\n"
    head, chunks = raw_exchange(url, data)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert len(chunks) == 4 and chunks[-1].endswith(b"data: [DONE]\n\n")
    row = truth(log, "CHUNKY")["CHUNKY"]
    assert (row["completed"], row["n_written"], row["prompt_tokens"]) == (True, 3, 5)


def test_sigterm_logs_what_is_in_flight_and_summarises(tmp_path):
    log = tmp_path / "truth.jsonl"
    proc = subprocess.Popen([str(build()), "--ttft-ms", "5", "--gap-ms", "5", "--truth-log",
                             str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        host, port = url.split("//")[1].rsplit(":", 1)
        body = json.dumps(request_body("llamacpp", "Request LONG x", 100000)).encode()
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(http_request("/completion", body))
            got = b""
            while got.count(b"data: ") < 3:
                got += sock.recv(65536)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    row = truth(log, "LONG")["LONG"]
    assert row["completed"] is False and "t_final" not in row
    assert row["n_written"] >= 3 and len(row["due"]) == row["n_written"]
    assert re.search(r"1 requests .* tokens written, \d+ tok/s .* lateness p50 [\d.]+ p99 "
                     r"[\d.]+ max [\d.]+ ms; cpu [\d.]+ s", err), err


def read_responses(sock: socket.socket, n: int) -> bytes:
    """Read until ``n`` chunked responses have ended (their zero-size chunk)."""
    got = b""
    while got.count(b"\r\n0\r\n\r\n") < n:
        got += sock.recv(65536) or pytest.fail(f"closed after {got!r}")
    return got


def test_arrival_times_are_the_kernels_between_the_send_and_the_read(tmp_path):
    """t_arrive is when the body's last byte reached the pacer's socket (the kernel's receive
    timestamp): never before the client sent it (stamped right before its send), never after
    the pacer read it (t_body), in order on a connection; the summary line counts the requests
    that had a kernel time (on Linux loopback, all of them)."""
    log = tmp_path / "truth.jsonl"
    proc = subprocess.Popen([str(build()), "--ttft-ms", "1", "--gap-ms", "1", "--tokens", "2",
                             "--truth-log", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent: dict[str, float] = {}

    def message(nonce: str) -> bytes:
        body = json.dumps(request_body("llamacpp", f"Request {nonce} x", 2)).encode()
        return http_request("/completion", body)

    try:
        host, port = proc.stdout.readline().strip().split("//")[1].rsplit(":", 1)
        addr = (host, int(port))
        # a burst: 64 connections, each request sent right after the previous one (the pacer
        # reads them one after another, so t_body runs later than t_arrive)
        burst = [socket.create_connection(addr, timeout=5) for _ in range(64)]
        for i, sock in enumerate(burst):
            data = message(f"B{i:02d}")
            sent[f"B{i:02d}"] = time.monotonic()
            sock.sendall(data)
        # one keep-alive connection: requests one at a time, a body sent in two parts 20 ms
        # apart (its arrival is the last part's), then two pipelined in one send
        with socket.create_connection(addr, timeout=5) as sock:
            for i in range(5):
                data = message(f"S{i}")
                sent[f"S{i}"] = time.monotonic()
                sock.sendall(data)
                read_responses(sock, 1)
            data = message("SPLIT")
            sock.sendall(data[:-4])
            time.sleep(0.02)
            sent["SPLIT"] = time.monotonic()
            sock.sendall(data[-4:])
            read_responses(sock, 1)
            data = message("P1") + message("P2")
            sent["P1"] = sent["P2"] = time.monotonic()
            sock.sendall(data)
            read_responses(sock, 2)
        for sock in burst:
            read_responses(sock, 1)
            sock.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = truth(log)
    assert sorted(rows) == sorted(sent) and all(r["completed"] for r in rows.values())
    for rid, row in rows.items():
        assert sent[rid] <= row["t_arrive"] <= row["t_body"], (rid, row, sent[rid])
        assert list(row)[list(row).index("t_body") + 1] == "t_arrive"  # right after t_body
    by_conn: dict[int, list[dict]] = {}
    for row in rows.values():
        by_conn.setdefault(row["conn"], []).append(row)
    for conn_rows in by_conn.values():
        arrivals = [r["t_arrive"] for r in sorted(conn_rows, key=lambda r: r["seq"])]
        assert arrivals == sorted(arrivals)  # never before the connection's previous request
    # the second pipelined request arrived with the first but was read after it had finished
    assert rows["P2"]["t_arrive"] == rows["P1"]["t_arrive"]
    assert rows["P2"]["t_body"] >= rows["P1"]["t_final"]
    m = re.search(r"kernel arrival time for (\d+) of (\d+) requests \((SO_TIMESTAMP\w+)\)", err)
    assert m, err
    assert (int(m[1]), int(m[2])) == (len(sent), len(sent)), err


def test_a_slow_client_gets_every_token_and_its_wait_is_logged(tmp_path):
    """A client that does not read fills the socket: the pacer keeps the tokens (each still its
    own send, in order), stamps each when its last byte is taken, and serves others meanwhile."""
    log = tmp_path / "truth.jsonl"
    wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    n = 2 * wmem_max // 79 + 10000  # twice what the send buffer can hold (79-byte tokens)
    with PacerThread(PacerConfig(ttft_ms=0, gap_ms=0.001, truth_log=str(log))) as url:
        host, port = url.split("//")[1].rsplit(":", 1)
        body = json.dumps(request_body("llamacpp", "Request SLOW x", n)).encode()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        with sock:
            sock.sendall(http_request("/completion", body))
            time.sleep(0.3)
            conn = http.client.HTTPConnection(host, int(port), timeout=2)
            conn.request("GET", "/health")
            assert json.loads(conn.getresponse().read()) == {"status": "ok"}
            conn.close()
            got = bytearray()
            sock.settimeout(10)
            while not got.endswith(b"0\r\n\r\n"):
                got += sock.recv(1 << 16) or pytest.fail("closed early")
    assert got.count(b'data: {"content":" tok"') == n
    row = truth(log, "SLOW")["SLOW"]
    assert row["completed"] and row["n_written"] == n
    assert all(a <= b for a, b in zip(row["t_tok"], row["t_tok"][1:]))
    assert all(t >= d for t, d in zip(row["t_tok"], row["due"]))
    assert row["late_max"] > 0.1  # tokens waited for the client, and the log says so
