"""Fault injection on the real pipeline: a scripted llama-server that misbehaves on purpose
(tests/doubles/fault_server.py), interrupts, a full disk, and raw files that were deleted or
changed.

Every case runs the workflow (Snakefile, rules, scripts, consolidation, checks, report) in a
throw-away copy of the repository against the scripted server, and asserts what the user sees
(the message), that the reps measured before stay byte-identical, that the next plain
``snakemake --cores 1`` does exactly the missing work, and that no process is left behind.
The real embedded llama-server is exercised by the e2e tests; here the server must misbehave
on cue, which a real one does not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from doubles.fault_server import ERROR_PAGE, ERROR_PAGE_TITLE, FaultServer
from doubles.wait import wait_for
from e2e_helpers import (
    DEFAULT_EXPERIMENT, copy_repo, fill, interruptible, jobs_run, results_dir, small_filesystem,
    wait_for_no_processes,
)

pytestmark = pytest.mark.slow  # the real pipeline (Snakemake) against scripted servers

NUM_PREDICT = 8
CONFIG = """\
targets:
  - name: fault
    backend: llamacpp
    url: {url}
arms: [1, 2]
requests_per_cell: 4
reps: {reps}
runs: 1
num_predict: {num_predict}
warmup_predict: 2
request_timeout_s: 3
analysis:
  bootstrap: 100
"""
RAW = results_dir(Path(), DEFAULT_EXPERIMENT) / "raw/fault/run1"  # fault.yaml names none
REQUESTS_PER_REP = 2 * 4  # arms × requests_per_cell


def write_config(work: Path, server: FaultServer, reps: int) -> None:
    text = CONFIG.format(url=server.url, reps=reps, num_predict=NUM_PREDICT)
    (work / "fault.yaml").write_text(text)


def command(*args: str) -> list[str]:
    # targets and flags before --configfile, whose list would take them as more files
    return [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--configfile", "fault.yaml"]


ENV = os.environ | {"PYTHONUNBUFFERED": "1"}


def run(work: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """A plain run (no PYTHONPATH: the workflow imports its own checkout's package)."""
    return subprocess.run(command(*args), cwd=work, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def output(proc) -> str:
    return (proc.stdout or "") + (proc.stderr or "")


def measured(server: FaultServer) -> int:
    """Measured /completion requests the server has received since its counts were reset."""
    with server.lock:
        return sum(1 for b in server.bodies if b.get("n_predict") == NUM_PREDICT)


def snapshot(work: Path, reps) -> dict[str, bytes]:
    return {name: (work / RAW / name).read_bytes()
            for rep in reps for name in (f"rep{rep}.json", f"rep{rep}.json.sha256")}


def raw_exists(work: Path, rep: int) -> bool:
    return (work / RAW / f"rep{rep}.json").exists()


def strict_json(path: Path) -> dict:
    def refuse(name):
        raise ValueError(f"{path} holds a bare {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def error_line(proc, pattern: str) -> str:
    """The one ERROR line of a failed run; it must match ``pattern``."""
    lines = [line for line in output(proc).splitlines() if line.startswith("ERROR: ")]
    assert lines, f"no ERROR line in:\n{output(proc)[-3000:]}"
    assert len(set(lines)) == 1, lines
    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


@dataclass
class Case:
    work: Path
    server: FaultServer
    kept: dict[str, bytes]  # the raw files measured before the fault, as they were

    def assert_kept(self) -> None:
        assert snapshot(self.work, self.reps_kept()) == self.kept, "a measured rep changed"

    def reps_kept(self) -> list[int]:
        return sorted({int(re.match(r"rep(\d+)", n).group(1)) for n in self.kept})

    def assert_no_processes(self) -> None:
        left = wait_for_no_processes(str(self.work))
        assert not left, f"left behind: {left}"

    def resume(self, reps_to_measure: int, *, expect_measured: int | None = None,
               report: bool = True) -> str:
        """The next plain run: it measures exactly ``reps_to_measure`` reps, renders the
        report, and leaves the reps kept as they were. Without ``report`` the run asks for the
        failed rep's raw file alone: what resumes is the same, and the tests that keep the
        report check that the plain run finishes it too (a render costs seconds a case)."""
        self.server.arm(None)
        self.server.token_s = 0.002
        self.server.reset_counts()
        proc = run(self.work) if report else run(self.work, str(RAW / "rep2.json"))
        assert proc.returncode == 0, output(proc)[-4000:]
        assert jobs_run(proc).count("rep") == reps_to_measure, jobs_run(proc)
        want = REQUESTS_PER_REP * reps_to_measure if expect_measured is None else expect_measured
        assert measured(self.server) == want
        self.assert_kept()
        if report:
            assert (results_dir(self.work, DEFAULT_EXPERIMENT) / "report.md").exists()
        else:
            assert raw_exists(self.work, 2)
        self.assert_no_processes()
        return output(proc)


# --- fixtures: one scripted server, a work copy with rep 1 measured, a fresh copy per case --


@pytest.fixture(scope="module")
def server():
    srv = FaultServer(slots=4, measured_predict=NUM_PREDICT).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def base(tmp_path_factory, server) -> Path:
    """A work copy with rep 1 of 2 measured, analysed and reported."""
    work = copy_repo(tmp_path_factory.mktemp("faults") / "base")
    write_config(work, server, reps=1)
    proc = run(work)
    assert proc.returncode == 0, output(proc)[-4000:]
    write_config(work, server, reps=2)
    return work


@pytest.fixture(scope="module")
def base2(tmp_path_factory, base, server) -> Path:
    """A work copy with both reps measured, analysed and reported."""
    work = tmp_path_factory.mktemp("faults") / "base2"
    shutil.copytree(base, work, symlinks=True)
    proc = run(work)
    assert proc.returncode == 0, output(proc)[-4000:]
    return work


def _case(src: Path, server: FaultServer, tmp_path: Path, reps_kept) -> Case:
    if server._httpd is None:
        server.start()
    server.arm(None)
    server.web_page = False
    server.tokenize_fault = None
    server.token_s = 0.002
    server.reset_counts()
    work = tmp_path / "work"
    shutil.copytree(src, work, symlinks=True)
    return Case(work, server, snapshot(work, reps_kept))


@pytest.fixture
def case(base, server, tmp_path) -> Case:
    return _case(base, server, tmp_path, [1])


@pytest.fixture
def case2(base2, server, tmp_path) -> Case:
    return _case(base2, server, tmp_path, [1, 2])


# --- a server that fails a request --------------------------------------------------------

FAILURES = {
    "die": r"stream broke after 2 tokens",
    "silence": r"took longer than request_timeout_s \(3 s\) after 0 chunks",
    "trickle": r"took longer than request_timeout_s \(3 s\)",
    "malformed": r"not a llama-server stream event after 2 tokens",
    "error_event": r"server error mid-stream after 2 tokens: slot 0 failed",
    "http404": r"POST /completion: HTTP 404: File Not Found",
    "http500": r"POST /completion: HTTP 500: llama_decode failed: out of memory",
    "http503": r"POST /completion: HTTP 503: Loading model",
}


@pytest.mark.parametrize("fault", sorted(FAILURES))
def test_a_failed_request_fails_its_rep_by_name_and_the_next_run_resumes(case, fault):
    case.server.arm(fault, skip=1)  # rep 2's first measured request succeeds, the next fails
    t0 = time.monotonic()
    proc = run(case.work)
    took = time.monotonic() - t0
    assert proc.returncode != 0
    error_line(proc, r"^ERROR: target fault, run run1, rep 2, arm [12] \(position [01]\), "
                     r"request [0-3]: (.* )?" + FAILURES[fault])
    assert "Traceback" not in output(proc)
    assert not raw_exists(case.work, 2) and not (case.work / RAW / "rep2.json.sha256").exists()
    case.assert_kept()
    case.assert_no_processes()
    # request_timeout_s bounds the whole request: a trickle (one byte a second, the whole
    # stream would take minutes) or silence fails the rep in seconds
    assert took < 60
    case.resume(1, report=False)


def test_refused_connections_fail_the_rep_before_any_request(case):
    case.server.stop()
    proc = run(case.work)
    assert proc.returncode != 0
    # the rep's first look at the server: the slot's context (GET /props)
    error_line(proc, r"^ERROR: target fault, run run1, rep 2: GET /props failed: .*"
                     r"(Connection refused|Failed to establish)")
    assert "Traceback" not in output(proc)
    case.assert_kept()
    case.assert_no_processes()
    case.server.start()  # the same port: the config is unchanged
    case.resume(1, report=False)


def test_a_web_page_instead_of_llama_server_is_named_not_a_traceback(case, tmp_path):
    case.server.web_page = True
    proc = run(case.work)
    assert proc.returncode != 0
    error_line(
        proc,
        r"^ERROR: target fault, run run1, rep 2: GET /props: "
        r"http://127\.0\.0\.1:\d+ answered an HTML page titled \"Welcome to nginx!\", not "
        r"llama-server's JSON; is the target's url a llama-server",
    )
    assert "Traceback" not in output(proc)
    case.assert_kept()
    # a fresh work copy meets it first in the fingerprint: one line there too
    fresh = copy_repo(tmp_path / "fresh")
    write_config(fresh, case.server, reps=1)
    proc = run(fresh)
    assert proc.returncode != 0
    error_line(proc, r"^ERROR: target fault, run run1, (plan|fingerprint): .*answered an "
                     r"HTML page titled \"Welcome to nginx!\", not llama-server's .*; is the "
                     r"target's url a llama-server \(backend llamacpp\)\?")
    assert "Traceback" not in output(proc)
    assert wait_for_no_processes(str(fresh)) == []
    case.server.web_page = False
    case.resume(1, report=False)


def page_in_the_log_only(proc, work: Path, line: str) -> None:
    """The terminal has one line of the server's HTML error page, no tag of it and no
    traceback; the log that line names holds the whole page."""
    out = output(proc)
    assert [text for text in out.splitlines() if "HTTP 501" in text] == [line], out[-3000:]
    assert not re.search(r"<(!doctype|/?[a-z]+[ >/])", out, re.I), out[-3000:]
    assert "Traceback" not in out
    log = re.search(r"the server's full answer is in (\S+)\)$", line).group(1)
    assert ERROR_PAGE.decode() in (work / log).read_text()


def test_an_html_error_page_is_one_line_and_the_log_holds_it(server, tmp_path):
    """A proxy in front of the server answers 501 with an HTML page: first /tokenize (the
    plan's request), then /completion during a rep. Each time the terminal gets one line with
    the status and the page's title, naming the job's log, which holds the whole page."""
    work = copy_repo(tmp_path / "work")
    write_config(work, server, reps=1)
    server.arm(None)
    server.web_page = False
    server.tokenize_fault = "http501_html"
    said = (rf'HTTP 501: an HTML page titled "{ERROR_PAGE_TITLE}" '
            r"\(the server's full answer is in ")
    try:
        proc = run(work)
        assert proc.returncode != 0
        line = error_line(proc, r"^ERROR: target fault, run run1, plan: POST /tokenize: " + said
                          + r"results/article/logs/plan/fault/run1\.log\)$")
        page_in_the_log_only(proc, work, line)
        server.tokenize_fault = None
        server.arm("http501_html")  # the rep's first measured request
        proc = run(work)
        assert proc.returncode != 0
        line = error_line(proc, r"^ERROR: target fault, run run1, rep 1, arm [12] \(position 0\), "
                                r"request [0-3]: POST /completion: " + said
                          + r"results/article/logs/rep/fault/run1/rep1\.log\)$")
        page_in_the_log_only(proc, work, line)
    finally:
        server.tokenize_fault = None
        server.arm(None)
    assert wait_for_no_processes(str(work)) == []


# --- a server whose numbers disagree with the stream --------------------------------------

NUMBERS = {
    "counts": "the server reported 800 output tokens, more than the 8 asked for",
    "negative_timings": "the server reported a generation time of -",
    "zero_timings": "the server reported a generation time of 0 s for 8 tokens",
    "nan_timings": "the server sent numbers that are not finite (predicted_ms=nan",
}


@pytest.mark.parametrize("fault", sorted(NUMBERS))
def test_server_numbers_that_disagree_with_the_client_never_reach_the_headline(case, fault):
    case.server.arm(fault, skip=0)
    proc = run(case.work)
    assert proc.returncode == 0, output(proc)[-4000:]
    raw = strict_json(case.work / RAW / "rep2.json")  # valid JSON, even for NaN timings
    assert raw["rep"] == 2
    req = pd.read_parquet(results_dir(case.work, DEFAULT_EXPERIMENT) / "requests.parquet")
    rep2 = req[req["rep"] == 2]
    assert len(rep2) == REQUESTS_PER_REP
    assert rep2["suspect_reason"].notna().all()
    assert rep2["suspect_reason"].str.contains(NUMBERS[fault], regex=False).all()
    assert req[req["rep"] == 1]["suspect_reason"].isna().all()
    # the headline is built from rep 1 alone; the report names the rep-2 cells and why
    ratios = pd.read_parquet(results_dir(case.work, DEFAULT_EXPERIMENT) / "analysis/ratios.parquet")
    assert set(ratios["rep"]) == {1}
    report = (results_dir(case.work, DEFAULT_EXPERIMENT) / "report.md").read_text()
    assert "kept out of the headline" in report
    assert "fault/run1/rep2/arm1" in report and "fault/run1/rep2/arm2" in report
    assert NUMBERS[fault] in report
    case.assert_kept()
    case.assert_no_processes()
    # nothing is missing: the next plain run measures nothing
    case.resume(0)


# --- interrupts -----------------------------------------------------------------------------


def start_slow_run(case: Case) -> subprocess.Popen:
    """Start the run that measures rep 2, slowly (0.1 s a token: about 5 s for the rep), and
    return once rep 2's measured requests are streaming."""
    case.server.token_s = 0.1
    proc = subprocess.Popen(command(), cwd=case.work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ENV,
                            start_new_session=True, preexec_fn=interruptible)
    def streaming() -> bool:
        assert proc.poll() is None, proc.stdout.read()
        return measured(case.server) >= 2

    wait_for(streaming, 120, "rep 2's measured requests to stream")
    return proc


def rep_log(case: Case) -> str:
    return (results_dir(case.work, DEFAULT_EXPERIMENT) / "logs/rep/fault/run1/rep2.log").read_text()


def test_ctrl_c_discards_the_rep_in_flight_with_one_line_and_the_next_run_resumes(case):
    proc = start_slow_run(case)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole process group
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 20  # streams in flight are ended, not waited for
    said = [line for line in out.splitlines() if line.startswith("INTERRUPTED")]
    assert said == ["INTERRUPTED (interrupted): rep 2 of fault/run1 was discarded (no raw file "
                    "written) and its server stopped; the 1 reps already measured are kept; the "
                    "next snakemake run resumes"], out[-3000:]
    assert "Traceback" not in out
    assert not raw_exists(case.work, 2)
    case.assert_kept()
    case.assert_no_processes()
    case.resume(1)


def test_sigint_to_snakemake_alone_keeps_or_discards_the_rep_whole(case):
    proc = start_slow_run(case)
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=180)
    assert "Traceback" not in out
    case.assert_kept()
    case.assert_no_processes()
    if raw_exists(case.work, 2):  # Snakemake let the rep finish: whole, and kept
        strict_json(case.work / RAW / "rep2.json")
        said = case.resume(0, expect_measured=0)
        assert f"slotbench: kept {RAW}/rep2.json" in said
    else:
        assert "INTERRUPTED" in rep_log(case)
        case.resume(1)


def test_kill_9_of_snakemake_stops_the_rep_and_the_next_plain_run_resumes(case):
    proc = start_slow_run(case)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    case.assert_no_processes()  # the rep job saw Snakemake go and stopped
    assert "INTERRUPTED (hung up): rep 2 of fault/run1 was discarded" in rep_log(case)
    assert not raw_exists(case.work, 2)
    assert any((case.work / ".snakemake/locks").iterdir())  # what a killed Snakemake leaves
    case.assert_kept()
    said = case.resume(1)  # no --unlock, no --rerun-incomplete
    assert "slotbench: removed the lock left by a Snakemake that is no longer running" in said


# --- a full disk ----------------------------------------------------------------------------


@pytest.fixture
def small_disk(case):
    """The raw directory of the case on its own 120 MB file system (tmpfs), rep 1 in it."""
    with small_filesystem(case.work / RAW) as raw_dir:
        if raw_dir is None:
            pytest.skip("cannot mount a small file system here")
        try:
            yield raw_dir
        finally:
            wait_for_no_processes(str(case.work))


def test_a_full_disk_loses_no_measured_rep(case, small_disk):
    # too little space before the rep starts: nothing is sent
    filler = fill(small_disk, leave_bytes=60 << 20)
    proc = run(case.work)
    assert proc.returncode != 0
    error_line(
        proc,
        r"^ERROR: target fault, run run1, rep 2: only \d+ MB are free on the disk "
        r"of results/article/raw/fault/run1 \(100 MB are needed .*\); nothing was measured",
    )
    assert measured(case.server) == 0
    assert "Traceback" not in output(proc)
    filler.unlink()

    # the disk fills while the rep measures: the measured rep is kept elsewhere, by name
    proc = start_slow_run(case)
    filler = fill(small_disk)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode != 0
    assert "Traceback" not in out
    kept = results_dir(case.work, DEFAULT_EXPERIMENT) / "logs/rep/fault/run1/rep2.json.unsaved"
    line = error_line(subprocess.CompletedProcess([], 1, out, ""),
                      r"^ERROR: target fault, run run1, rep 2: the raw file "
                      r"results/article/raw/fault/run1/rep2.json could not be written \(No space left "
                      r"on device\); the measured rep was kept in ")
    assert str(kept.relative_to(case.work)) in line or str(kept) in line
    assert kept.exists() and not raw_exists(case.work, 2)
    sent = measured(case.server)
    assert sent == REQUESTS_PER_REP
    case.assert_kept()
    case.assert_no_processes()

    # space again: the next plain run puts the kept rep in place and measures nothing
    filler.unlink()
    kept_bytes = kept.read_bytes()
    said = case.resume(1, expect_measured=0)
    assert (case.work / RAW / "rep2.json").read_bytes() == kept_bytes
    assert not kept.exists()
    assert "nothing was measured again" in said


# --- raw files deleted or changed after they were written ------------------------------------


def test_a_deleted_raw_file_is_measured_again_and_the_report_cites_the_new_one(case2):
    old = (case2.work / RAW / "rep1.json.sha256").read_text().split()[0]
    (case2.work / RAW / "rep1.json").unlink()
    (case2.work / RAW / "rep1.json.sha256").unlink()
    case2.kept = snapshot(case2.work, [2])
    case2.resume(1)
    new = (case2.work / RAW / "rep1.json.sha256").read_text().split()[0]
    assert new != old
    report = (results_dir(case2.work, DEFAULT_EXPERIMENT) / "report.md").read_text()
    provenance = (results_dir(case2.work, DEFAULT_EXPERIMENT) / "provenance.json").read_text()
    assert old not in report and old not in provenance
    assert new in provenance


def _tamper_then_settle(case2: Case, change) -> None:
    """``change`` alters rep 1; the next plain run refuses it by name and withdraws the
    report; deleting it as the message says, the run after measures exactly rep 1 again."""
    raw = case2.work / RAW / "rep1.json"
    change(raw)
    case2.kept = snapshot(case2.work, [2])
    for _ in range(2):  # refused again on every run until it is settled
        proc = run(case2.work)
        assert proc.returncode != 0
        error_line(proc, r"^ERROR: consolidate: raw file results/article/raw/fault/run1/rep1.json has "
                         r"SHA-256 \w+, but .* recorded \w+ when it was written: the raw file "
                         r"changed after it was written\. Restore it from an archive, or delete "
                         r"it and its \.sha256 to re-measure that rep\.")
        assert "Traceback" not in output(proc)
        assert not (results_dir(case2.work, DEFAULT_EXPERIMENT) / "report.md").exists()
        case2.assert_kept()
    raw.unlink()
    (case2.work / RAW / "rep1.json.sha256").unlink()
    case2.resume(1)


def test_a_truncated_raw_file_is_refused_by_name(case2):
    def truncate(raw: Path) -> None:
        data = raw.read_bytes()
        raw.write_bytes(data[: len(data) // 2])

    _tamper_then_settle(case2, truncate)


def test_a_raw_file_edited_with_its_mtime_restored_is_refused(case2):
    def edit(raw: Path) -> None:
        st = raw.stat()
        text = raw.read_text()
        edited = re.sub(r'"output_tokens": 8\b', '"output_tokens": 9', text, count=1)
        assert edited != text and len(edited) == len(text)
        raw.write_text(edited)
        os.utime(raw, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert raw.stat().st_mtime_ns == st.st_mtime_ns and raw.stat().st_size == st.st_size

    _tamper_then_settle(case2, edit)


def test_a_lost_sha256_is_refused_before_anything_runs(case2):
    (case2.work / RAW / "rep1.json.sha256").unlink()
    case2.kept = snapshot(case2.work, [2])
    proc = run(case2.work)
    assert proc.returncode != 0
    out = output(proc)
    assert (
        "raw file results/article/raw/fault/run1/rep1.json has no rep1.json.sha256 (the hash "
        "recorded when it was written), so it cannot be verified"
    ) in out
    assert "nothing was run" in out and "Traceback" not in out
    assert case2.server.requests_received() == 0
    assert jobs_run(proc) == []
    case2.assert_kept()
    (case2.work / RAW / "rep1.json").unlink()
    case2.resume(1)
