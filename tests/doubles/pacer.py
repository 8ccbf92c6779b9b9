"""A deterministic pacing server: a fake LLM whose every timing is known.

Why: slotbench (and every peer benchmark tool) reports TTFT, inter-token gaps and tok/s measured
on the client side. To know how much of a reported number is the client's own error, the server
must be one whose true behaviour is recorded. This server emits one-word tokens (" tok", exactly
one token for any whitespace tokenizer) on a fixed schedule, speaks the three wire formats
slotbench measures (llama.cpp ``/completion``, Ollama ``/api/generate``, OpenAI ``/v1/…``), and
writes a *truth log*: for each request the moment (CLOCK_MONOTONIC seconds, the clock of Python's
``time.monotonic()``, system-wide on Linux, so comparable with a client process on the same
machine) the last byte of its body arrived in the socket (the kernel's receive timestamp), the
moment the server had read it, and the moment each token's bytes were handed to the kernel (its
``send`` returned with every byte taken).

The server is ``pacer.c`` beside this file, a single-threaded epoll server in C (a Python
server tops out at a few thousand tokens/s; this one is meant to grade a client streaming
100,000 tokens/s across 256 streams on one core: ``benchmarks/pacer_capacity.py`` measures
what it sustains). This module compiles it on first use (``cc -O2``, cached by the source's
hash under ``$XDG_CACHE_HOME`` or ``~/.cache``, ``slotbench/pacer-<sha256[:16]>``) and runs it.

The nominal schedule is not the truth: on 2 shared cores a gap is sometimes written late, so
compare clients with the truth log, never with ``--ttft-ms``/``--gap-ms``. Every duration the
server reports on the wire (llama.cpp ``timings``, Ollama ``*_duration``) is taken from the same
truth-log timestamps.

Schedule, per request: body read → wait for a slot (``--slots``, unlimited by default; a FIFO
queue) → ``--ttft-ms`` → first token → then one token every gap, where
``gap = gap_ms * (1 + alpha * (active - 1))`` and ``active`` is the number of requests holding a
slot at that step. Deadlines are absolute (no drift): token k is due at due(k-1) + gap. The
server sleeps on a timerfd armed at the earliest due time (absolute CLOCK_MONOTONIC, no timer
slack) and writes every token with its own ``send`` (never two tokens in one write; a token a
slow client cannot take at once is kept and finished, still alone, when the socket is
writable; its time is when its last byte was taken).

Wire: a hand-written HTTP/1.1 subset (keep-alive unless the request says ``Connection: close``,
request bodies with Content-Length or chunked, chunked responses, ``Server: slotbench-pacer``)
with TCP_NODELAY on every connection (``--no-nodelay`` to study Nagle), so a token is one
segment on the wire, immediately. Routes: generation on ``/completion`` (and ``/completions``,
llama.cpp SSE ending with a ``timings`` event), ``/api/generate`` (Ollama NDJSON, durations in
ns, zero-valued metrics omitted; an empty non-streamed prompt is a model load, answered at once
and not logged), ``/v1/completions`` and ``/v1/chat/completions`` (OpenAI SSE, finish_reason on
the last token's chunk, a usage chunk with ``stream_options.include_usage``, ``data: [DONE]``),
each also non-streamed with ``"stream": false``; and the info routes the backends fingerprint:
``/health``, ``/props``, ``/slots``, ``/tokenize`` (one token per word), ``/v1/models``,
``/api/version``, ``/api/tags``, ``/api/show``, ``/api/ps``.

Truth log: one JSON line per generation request, written (and flushed) right after its last
bytes: id (the prompt's nonce, ``Request <nonce>``, or ``#seq``), seq, nonce, x_request_id, api,
conn, client_port, stream, n_requested, n, prompt_tokens (words), t_body, t_arrive, t_slot,
t_final, t_tok (one time per token), n_written, completed, due (each token's due time), late_p50
and late_max (seconds a token's write came after its due time: median and maximum). A request
that ends early (client gone, server stopped) is logged with completed false and what was
written.

- ``t_body``: when the server had read the whole request (parsed it from its input buffer). The
  schedule counts from here. In a burst the single thread reads the requests one after another
  (and between token writes), so this can be milliseconds after the bytes arrived: 256 requests
  at once are read over ~3 ms on one core.
- ``t_arrive``: when the last byte of the body arrived in the socket: the kernel's software
  receive timestamp (``SO_TIMESTAMPING`` with ``SOF_TIMESTAMPING_RX_SOFTWARE``, else
  ``SO_TIMESTAMPNS``, on the listening and every accepted socket), read from ``recvmsg``'s
  control message. For TCP that is the stamp of the last segment the read that returned the
  byte took, so with more data behind it in the same read (pipelined requests) it can be a
  little late, never early. The kernel stamps CLOCK_REALTIME; it is converted with an offset
  measured on every epoll wake (monotonic, real, monotonic read back to back; the tighter of two
  reads). Clamped to at most ``t_body`` and at least the previous request's ``t_arrive`` on the
  connection; without a (plausible) kernel timestamp it is ``t_body``, and the summary line
  says for how many requests there was one. ``t_body - t_arrive`` is the server's own read
  delay (~0.01 ms idle on loopback): part of the true TTFT, not the client's error, so graders
  take the true TTFT as ``t_tok[0] - t_arrive``.

On SIGTERM/SIGINT the server logs what is in flight, prints a summary line on stderr (requests,
tokens written, tokens/s over the busy period, write lateness p50/p99/max, CPU seconds, epoll
wakeups, and ``kernel arrival time for K of N requests (SO_TIMESTAMPING)``) and exits 0.

    python tests/doubles/pacer.py --port 0 --ttft-ms 50 --gap-ms 10 --tokens 32 \\
        --slots 4 --alpha 0.1 --truth-log truth.jsonl [--cpu 0]

prints the bound URL (``http://127.0.0.1:PORT``) as its first stdout line. Importable too:
``start_subprocess([...])`` runs it and returns (process, URL); ``with PacerThread(cfg) as url``
runs it for the block (a subprocess too, whatever its historical name says).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("pacer.c")


@dataclasses.dataclass
class PacerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    ttft_ms: float = 50.0
    gap_ms: float = 10.0
    tokens: int | None = None  # fixed output count; None → the request's num_predict/max_tokens
    default_tokens: int = 16  # when the request names no count
    slots: int = 0  # 0 → unlimited (no queueing)
    alpha: float = 0.0  # gap grows by alpha per extra active sequence
    model: str = "pacer"
    truth_log: str | None = None
    nodelay: bool = True  # TCP_NODELAY on accepted sockets (--no-nodelay to study Nagle)
    n_ctx: int = 4096
    cpu: int | None = None  # pin the server to this CPU

    def args(self) -> list[str]:
        """The command-line arguments that run this configuration."""
        out = ["--host", self.host, "--port", str(self.port), "--ttft-ms", repr(self.ttft_ms),
               "--gap-ms", repr(self.gap_ms), "--default-tokens", str(self.default_tokens),
               "--slots", str(self.slots), "--alpha", repr(self.alpha), "--model", self.model,
               "--n-ctx", str(self.n_ctx)]
        if self.tokens is not None:
            out += ["--tokens", str(self.tokens)]
        if self.truth_log is not None:
            out += ["--truth-log", str(self.truth_log)]
        if not self.nodelay:
            out.append("--no-nodelay")
        if self.cpu is not None:
            out += ["--cpu", str(self.cpu)]
        return out


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slotbench"


def build(source: Path = SOURCE, name: str = "pacer") -> Path:
    """Compile ``source`` with ``cc -O2`` into the cache as ``<name>-<sha256[:16]>``, unless it is
    there already; compiled to a temporary name and renamed, so concurrent builds are safe."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    target = cache_dir() / f"{name}-{digest}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        cmd = [os.environ.get("CC", "cc"), "-O2", "-std=c11", "-o", tmp, str(source), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def start_subprocess(args: list[str]) -> tuple[subprocess.Popen, str]:
    """Run the server with these CLI arguments; returns (process, URL). Stop it with
    terminate() (SIGTERM: it logs what is in flight and exits 0)."""
    proc = subprocess.Popen([str(build()), *args], stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"pacer did not start (first line {url!r})")
    return proc, url


class PacerThread:
    """The pacer for a ``with`` block: ``with PacerThread(cfg) as url: ...``. Despite the name
    (kept for its callers) it is a subprocess running the C server, stopped at the block's end."""

    def __init__(self, config: PacerConfig):
        self.config = config
        self.url: str | None = None
        self.proc: subprocess.Popen | None = None

    def start(self) -> str:
        self.proc, self.url = start_subprocess(self.config.args())
        return self.url

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python tests/doubles/pacer.py ARGS``: build if needed, then exec the server."""
    argv = sys.argv[1:] if argv is None else argv
    binary = str(build())
    sys.stdout.flush()
    os.execv(binary, [binary, *argv])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
