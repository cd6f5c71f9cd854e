"""The sandbox: a hang, a segfault or a fork bomb costs only that candidate; no secrets, no
network, no writes outside the scratch folder; a trusted phase's result needs the per-run
HMAC, an untrusted phase's result is only data."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

import harness
from harness import Verdict
from harness.config import Limits
from harness.sandbox import ChildStatus, run_child
from harness.sandbox.parent import _malformed, _ResultReader, _verify
from harness.sandbox.process import BACKGROUND_NICE
from harness.tests.conftest import fresh, run_fixture


def _honest_still_passes():
    ev = run_fixture("honest_torch_matmul")
    assert ev.verdict is Verdict.PASSED, ev.error


def _no_candidate_process_left() -> bool:
    """Fork-bomb survivors would still sit in an untrusted child's workdir (spares wait in
    /tmp; other tests' live sandboxes, under pytest -n, are in the middle of their work)."""
    from harness.sandbox import spares

    spares.pool.shutdown()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd == "/tmp/work":
                return False
    return True


def test_it_kills_a_hung_candidate_at_the_wall_clock_limit_and_carries_on():
    start = time.monotonic()
    ev = run_fixture("exploit_hang", limits=Limits(wall_s=20))
    assert ev.verdict is Verdict.TIMEOUT
    assert time.monotonic() - start < 60
    _honest_still_passes()


def test_it_reports_a_segfault_as_a_crash():
    ev = run_fixture("exploit_segfault")
    assert ev.verdict is Verdict.CRASH
    assert "SIGSEGV" in ev.error


def test_it_contains_a_fork_bomb():
    ev = run_fixture(
        "x", source_text=fresh("exploit_fork_bomb"), limits=Limits(wall_s=15, max_pids=64)
    )
    assert ev.verdict in (Verdict.TIMEOUT, Verdict.CRASH)
    assert ev.isolation.get("cgroup") in ("v1", "v2"), ev.isolation
    time.sleep(0.5)
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # other workers' sandboxes are live then
        assert _no_candidate_process_left()
    _honest_still_passes()


def test_a_forked_copy_of_the_candidate_never_reports():
    # Its copy runs the rest of the recording and returns through the phase, as the process
    # the parent started does; only that process's message reaches the parent.
    ev = run_fixture("x", source_text=fresh("exploit_fork_return"))
    assert "FORKED copy recorded its call" in ev.stdout_tail, ev.stdout_tail
    assert ev.verdict is Verdict.PASSED, ev.error


def test_it_forbids_writes_outside_the_scratch_folder():
    markers = [Path(harness.__file__).parent / "kf_pwned_marker", Path("/tmp/kf_pwned_marker")]
    for m in markers:
        m.unlink(missing_ok=True)
    ev = run_fixture("x", source_text=fresh("exploit_write_outside"))
    assert ev.verdict is not Verdict.PASSED
    # Landlock refuses (EACCES), and under it the mount view is read-only (EROFS).
    assert any(w in ev.error for w in ("Permission denied", "PermissionError", "Read-only"))
    assert not any(m.exists() for m in markers)
    assert ev.isolation["filesystem"].startswith("landlock")


def test_it_passes_no_secrets_to_the_candidate(secret_env):
    ev = run_fixture("x", source_text=fresh("exploit_env_secrets"))
    assert ev.verdict is Verdict.PASSED, ev.error
    assert "ENV NAMES" in ev.stdout_tail
    for value in secret_env.values():
        assert value not in ev.stdout_tail
    assert "LEAK" not in ev.stdout_tail


def test_it_cuts_the_candidate_off_the_network():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    got: list[bytes] = []

    def accept():
        end = time.monotonic() + 30
        while time.monotonic() < end and not got:
            try:
                conn, _ = listener.accept()
                got.append(conn.recv(100) or b"connected")
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    ev = run_fixture("exploit_network", source_text=fresh("exploit_network", PORT=port))
    listener.close()
    thread.join(timeout=5)
    assert not got
    assert "NET blocked" in ev.stdout_tail
    assert ev.isolation["network"] == "netns"


def test_it_caps_captured_output():
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child(
            "selftest_flood",
            {"bytes": 5_000_000},
            workdir,
            limits=Limits(output_cap_bytes=4096),
            cuda=False,
        )
    assert res.status is ChildStatus.OK, res.error
    assert len(res.output) < 6000
    assert "bytes dropped" in res.output


def test_it_refuses_a_result_without_the_right_hmac():
    key = b"k" * 32
    import hashlib
    import hmac
    import json

    body = json.dumps({"nonce": "n1", "status": "ok"}).encode()
    good = hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b"\n" + body
    assert _verify(good, key, "n1")[0] is not None
    assert _verify(good, key, "other-run")[0] is None
    assert _verify(b"0" * 64 + b"\n" + body, key, "n1") == (
        None,
        "result message failed HMAC verification",
    )
    assert _verify(b"", key, "n1") == (None, "")
    # Without a key (an untrusted phase) a message is data, taken as it is and checked later.
    assert _verify(b"-\n" + body, b"", "")[0] == {"nonce": "n1", "status": "ok"}


def test_a_malformed_result_says_where_its_json_broke():
    # Two messages back to back (something wrote its own after the runner's) read as intact at
    # both ends; the error names the parser's complaint and the bytes where it stopped.
    one = b'-\n{"status": "ok", "nonce": ""}'
    why = _malformed(one + one)
    assert why.startswith(f"{2 * len(one)} bytes, ")
    assert f"Extra data: line 1 column {len(one) - 1}" in why, why
    assert "around it: " in why and why.split("around it: ")[1].count('}-\\n{"status"') == 1, why


@pytest.mark.parametrize("phase", ["selftest_env"])
def test_it_starts_children_with_an_allow_listed_environment(phase, secret_env):
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child("selftest_env", {}, workdir, limits=Limits(), cuda=False)
    assert res.status is ChildStatus.OK, res.error
    names = set(res.result["names"])
    assert not names & set(secret_env)
    assert res.result["cwd"] == os.path.realpath(workdir)
    assert res.result["home"] == workdir


def test_compile_ahead_children_run_below_the_timing_children():
    # A background child (precompile, the screen's compile pool) must not compete for the CPU
    # with one that times kernels: its nvcc and ptxas inherit the niceness.
    with tempfile.TemporaryDirectory() as workdir:
        timing = run_child("selftest_env", {}, workdir, limits=Limits(), cuda=False)
        ahead = run_child("selftest_env", {}, workdir, limits=Limits(), cuda=False, background=True)
    assert timing.status is ChildStatus.OK and ahead.status is ChildStatus.OK
    base = os.nice(0)  # a test run may itself run niced
    assert timing.result["nice"] == base
    assert ahead.result["nice"] == min(19, base + BACKGROUND_NICE)
    assert ahead.result["nice"] > base or base == 19


def test_it_hands_settings_to_a_wrapped_child_through_a_private_file():
    # ncu wraps the child when profiling and may not forward stdin or extra fds.
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child("selftest_env", {}, workdir, limits=Limits(), cuda=False, wrapper=["env"])
    assert res.status is ChildStatus.OK, (res.error, res.output[-2000:])
    assert "KF_SETTINGS_FILE" not in res.result["names"]


STDIN_PROBE = """
import os, stat

_mode = os.fstat(0).st_mode  # EBADF here if the sandbox closed fd 0
_fd = os.open(os.devnull, os.O_RDONLY)  # with fd 0 closed, this file would have become it
print("STDIN", "chr" if stat.S_ISCHR(_mode) else "other", repr(os.read(0, 16)), _fd > 2, flush=True)
os.close(_fd)
"""


def test_a_candidate_gets_an_empty_stdin_not_a_closed_fd_0():
    """With fd 0 closed, the next file a child opened took it, and nvcc's host compiler (a CUDA
    library built inside the sandbox) wrote into the wrong descriptor: "Bad file descriptor"."""
    src = fresh("honest_torch_matmul") + STDIN_PROBE
    ev = run_fixture("honest_torch_matmul", source_text=src)
    assert ev.verdict is Verdict.PASSED, ev.error
    assert "STDIN chr b'' True" in ev.stdout_tail, ev.stdout_tail


def test_a_result_reader_stops_before_its_fd_is_closed_and_reused():
    # A writer that outlives the child (an escapee still holding the pipe) must not leave a
    # reader behind that takes the next child's message once the fd number is reused.
    stale_read, stale_write = os.pipe()
    reader = _ResultReader(stale_read)
    os.write(stale_write, b"first")
    start = time.monotonic()
    reader.finish(grace_s=0.5)  # the write end is still open: no EOF comes
    assert time.monotonic() - start < 3
    assert bytes(reader.message) == b"first"
    os.close(stale_read)
    fresh_read, fresh_write = os.pipe()  # most likely the same fd number as stale_read
    message = b"-\n" + b'{"status": "ok"}' * 1000
    os.write(fresh_write, message)
    os.close(fresh_write)
    with contextlib.suppress(BrokenPipeError):  # the escapee writes on: a stale reader wakes
        os.write(stale_write, b"more")
    time.sleep(0.5)  # and would have taken the next message's part by now
    nxt = _ResultReader(fresh_read)
    nxt.finish(grace_s=5)
    os.close(fresh_read)
    os.close(stale_write)
    assert bytes(nxt.message) == message


def test_a_child_whose_caller_wants_no_result_any_more_is_ended_then():
    # The screen's compile children once ran on to the run's deadline after the search ended.
    cancel = threading.Event()
    timer = threading.Timer(2.0, cancel.set)
    timer.start()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child(
            "selftest_sleep", {"seconds": 120}, workdir, limits=Limits(), wall_s=120,
            cuda=False, cancel=cancel,
        )  # fmt: skip
    assert res.status is ChildStatus.TIMEOUT and "cancelled" in res.error, res
    assert time.monotonic() - start < 30
    # Without a cancel the wall clock still ends it.
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child(
            "selftest_sleep", {"seconds": 120}, workdir, limits=Limits(), wall_s=3, cuda=False
        )
    assert res.status is ChildStatus.TIMEOUT and res.error == "killed after 3 s", res
