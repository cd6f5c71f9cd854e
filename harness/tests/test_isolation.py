"""The escapes of issue 15, each planted as a candidate (tests/exploits/) and shown blocked:
secrets read from other processes' /proc/<pid>/environ, host unix sockets, leftovers in
/dev/shm and /tmp, a thread started at import, temporary folders a run (or a killed parent)
left behind; and the sandbox undone from inside. Where this host cannot make namespaces the
namespace tests skip, saying why (the isolation record and the job page say it too)."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from harness import Verdict
from harness.config import Limits
from harness.sandbox import REPO_ROOT, ChildStatus, cgroups, run_child, scratch, spares
from harness.sandbox.scrub import REDACTED
from harness.tests.conftest import alive, needs_namespaces, run_fixture, source


def _worker(script: str, env: dict[str, str], **kwargs) -> subprocess.Popen:
    """A separate process standing in for a Celery worker, with `env` from its start (so in
    its /proc/<pid>/environ, as a worker's DATABASE_URL is)."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": REPO_ROOT, **env},
        cwd=REPO_ROOT,
        text=True,
        **kwargs,
    )


_EVALUATE = """
import json, os
from harness.tests.conftest import alive, needs_namespaces, run_fixture, source
src = source({name!r}, HOST_PID=os.getpid())
ev = run_fixture({name!r}, source_text=src)
print("RESULT " + json.dumps(ev.to_dict()))
"""


@needs_namespaces
def test_a_candidate_cannot_read_the_environment_of_the_process_that_evaluates_it(secret_env):
    worker = _worker(
        _EVALUATE.format(name="exploit_proc_environ"), secret_env, stdout=subprocess.PIPE
    )
    out, _ = worker.communicate(timeout=300)
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    ev = json.loads(line[len("RESULT ") :])
    tail = ev["stdout_tail"]
    assert ev["verdict"] == "passed", ev["error"]
    assert "PROC visible=1 me=1" in tail, tail  # its own PID namespace: only itself
    assert "LEAK" not in tail, tail
    for value in secret_env.values():
        assert value not in tail
    assert ev["isolation"]["pid"] == "pidns"


_EVALUATE_WITHOUT_NAMESPACES = """
import json, os
from harness import evaluation
from harness.sandbox import namespaces
from harness.tests.conftest import run_fixture, source
namespaces.support = lambda: namespaces.Support((), False, "switched off by the test")
run_child = evaluation.run_child  # and no Landlock, which also refuses ptrace-style access
evaluation.run_child = lambda *a, **k: run_child(*a, **{**k, "isolate_fs": False})
src = source("exploit_proc_environ", HOST_PID=os.getpid())
ev = run_fixture("exploit_proc_environ", source_text=src)
import ctypes
print("HOST " + str(os.getpid()))
print("DUMPABLE " + str(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)))  # PR_GET_DUMPABLE
print("RESULT " + json.dumps(ev.to_dict()))
"""


def test_without_a_pid_namespace_the_evaluating_process_environment_stays_unreadable(secret_env):
    # Where a child runs without its PID namespace (CUDA refusing them, a container without
    # CAP_SYS_ADMIN) and without Landlock (trusted screen compiles, tools that wrap a child),
    # /proc/<pid>/environ is refused, not merely scrubbed from the output: the child has no
    # capabilities (root's would otherwise pass), and the process holding the secrets is
    # non-dumpable, so a worker running as a plain user is covered too.
    worker = _worker(_EVALUATE_WITHOUT_NAMESPACES, secret_env, stdout=subprocess.PIPE)
    out, _ = worker.communicate(timeout=300)
    host = next(x for x in out.splitlines() if x.startswith("HOST ")).split()[1]
    ev = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT ") :])
    tail = ev["stdout_tail"]
    assert ev["verdict"] == "passed", ev["error"]
    assert ev["isolation"]["pid"].startswith("none"), ev["isolation"]
    assert ev["isolation"]["filesystem"].startswith("none"), ev["isolation"]
    assert f"PROC blocked pid={host} PermissionError" in tail, tail
    assert f"LEAK pid={host} " not in tail, tail
    assert "DUMPABLE 0" in out


class _Listener:
    """A host process's unix socket (pathname or abstract) that records what reaches it."""

    def __init__(self, address: str) -> None:
        self.got: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        end = time.monotonic() + 120
        while time.monotonic() < end and self.sock.fileno() >= 0:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.got.append(conn.recv(100) or b"connected")
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=5)


@needs_namespaces
def test_a_candidate_cannot_reach_host_unix_sockets(monkeypatch):
    tag = uuid.uuid4().hex[:8]
    # One where such sockets usually live (covered by a private tmpfs), one anywhere else
    # (masked: the parent lists it in /proc/net/unix), one in a folder under /tmp that the
    # child's view binds back (an import path, as a checkout under /tmp is: masked too; it was
    # reachable when only sockets outside the covered folders were listed), and an abstract one
    # (network namespace).
    outside = Path(tempfile.mkdtemp(prefix=".kf-sock-", dir=REPO_ROOT))
    bound_back = Path(tempfile.mkdtemp(prefix="kf-bound-"))
    monkeypatch.syspath_prepend(str(bound_back))
    paths = [
        os.path.join(tempfile.gettempdir(), f"kf-sock-{tag}"),
        str(outside / "s"),
        str(bound_back / "s"),
    ]
    abstract = f"kf-abstract-{tag}"
    listeners = [_Listener(p) for p in paths] + [_Listener("\0" + abstract)]
    try:
        src = source("exploit_unix_socket", PATHS=paths, ABSTRACT=abstract)
        ev = run_fixture("exploit_unix_socket", source_text=src)
    finally:
        for listener in listeners:
            listener.close()
        for p in paths:
            Path(p).unlink(missing_ok=True)
        outside.rmdir()
        bound_back.rmdir()
    assert ev.verdict is Verdict.PASSED, ev.error
    assert [listener.got for listener in listeners] == [[]] * len(listeners)
    assert "UNIX connected" not in ev.stdout_tail, ev.stdout_tail
    # Output shown to the user has this server's paths made relative (harness/redact.py).
    for shown in [paths[0], os.path.relpath(paths[1], REPO_ROOT), "@" + abstract]:
        assert f"UNIX blocked {shown}" in ev.stdout_tail, ev.stdout_tail
    assert ev.isolation["mounts"].startswith("private /tmp"), ev.isolation
    assert "masked" in ev.isolation["sockets"]


def _sysv_keys() -> set[int]:
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {int(line.split()[0]) for line in lines if line.split()}


@needs_namespaces
def test_nothing_a_candidate_leaves_in_shared_memory_or_tmp_outlives_it():
    mark = f"kf-leftover-{uuid.uuid4().hex[:8]}"
    key = random.randrange(1 << 20, 1 << 30)
    ev = run_fixture(
        "exploit_leftovers", source_text=source("exploit_leftovers", MARK=mark, KEY=key)
    )
    assert ev.verdict is Verdict.PASSED, ev.error
    assert f"WROTE /dev/shm/{mark}" in ev.stdout_tail, ev.stdout_tail  # it could, privately
    assert f"SHM segment key={key} id=-1" not in ev.stdout_tail, ev.stdout_tail
    for folder in ("/dev/shm", "/tmp", "/var/tmp"):
        assert not Path(folder, mark).exists(), folder
    assert key not in _sysv_keys()
    assert ev.isolation["ipc"] == "ipcns"


def test_it_rejects_a_thread_started_at_import():
    ev = run_fixture("exploit_import_thread")
    assert ev.verdict is Verdict.CHEAT, ev.error
    threads = [f for f in ev.findings if f.check == "thread"]
    assert any("at import" in f.detail and "import-worker" in f.detail for f in threads), threads


@needs_namespaces
def test_the_candidate_cannot_undo_the_sandbox_from_inside():
    ev = run_fixture("exploit_undo_view")
    assert ev.verdict is Verdict.PASSED, ev.error
    for what in ("umount /tmp", "remount / rw", "unshare user+mount", "ptrace attach"):
        assert f"UNDO refused {what}" in ev.stdout_tail, ev.stdout_tail
    iso = ev.isolation
    assert iso["capabilities"] == "dropped" and iso["no_new_privs"] is True, iso
    assert iso["seccomp"].endswith("refused") or iso["seccomp"].startswith("none ("), iso


@needs_namespaces
def test_the_isolation_record_lists_every_layer_and_none_missing():
    ev = run_fixture("honest_torch_matmul")
    iso = ev.isolation
    out = os.environ.get("KF_RESULTS_DIR")  # the GPU check keeps what it saw
    if out:
        seen = {"verdict": ev.verdict.value, "isolation": iso, "checks": ev.checks}
        Path(out, "isolation_record.json").write_text(json.dumps(seen, indent=1, default=str))
    assert iso["pid"] == "pidns" and iso["ipc"] == "ipcns", iso
    assert iso["network"] in ("netns", "userns+netns"), iso
    assert iso["mounts"].startswith("private /tmp") and "read-only" in iso["mounts"], iso
    assert iso["filesystem"].startswith("landlock"), iso
    assert iso["missing"] == [], iso


def test_a_secret_value_in_a_childs_output_is_scrubbed_before_anyone_sees_it(secret_env):
    # Defense in depth: even if a child got hold of a secret (here a tool wrapping it prints
    # one it was handed), its text comes back with the value replaced.
    value = secret_env["OPENAI_API_KEY"]
    shell = ["sh", "-c", 'echo "leaked $KF_PROBE"; exec "$@"', "sh"]
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child(
            "selftest_env",
            {},
            workdir,
            limits=Limits(),
            cuda=False,
            env_extra={"KF_PROBE": value},
            wrapper=shell,
        )
    assert res.status is ChildStatus.OK, (res.error, res.output)
    assert value not in res.output
    assert "leaked " + REDACTED.format(name="OPENAI_API_KEY") in res.output, res.output


def _owned(root: str, owner: str) -> list[str]:
    return [n for n in os.listdir(root) if n.startswith("kf-") and f"-{owner}-" in n]


def test_no_temporary_folder_outlives_an_evaluation(monkeypatch):
    monkeypatch.setenv("KF_SANDBOX_SPARES", "1")
    spares.pool.shutdown()
    root, me = tempfile.gettempdir(), scratch.owner()
    ev = run_fixture("honest_torch_matmul")
    assert ev.verdict is Verdict.PASSED, ev.error
    assert len(_owned(root, me)) <= 1  # the spare waiting for the next phase, nothing else
    spares.pool.shutdown()
    assert _owned(root, me) == []


def test_importing_the_ops_leaves_no_folder_behind(tmp_path):
    script = (
        "import kernels; kernels.all_ops()\n"
        "from kernels.candidate import load_module\n"
        "load_module('def run(*a, out):\\n    pass\\n')\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []


_HANG = """
from harness.config import Limits
from harness.tests.conftest import run_fixture
run_fixture("exploit_hang", limits=Limits(wall_s=120))
"""


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = {int(k) for k in (task / "children").read_text().split()}
            except OSError:
                continue
            todo += list(kids - found)
            found |= kids
    return found


@needs_namespaces
def test_a_killed_parent_leaves_no_child_folder_or_cgroup_behind(tmp_path):
    worker = _worker(_HANG, {"TMPDIR": str(tmp_path), "KF_SANDBOX_SPARES": "1"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # an evaluation with a sandbox child is under way
            started = any(n.startswith("kf-eval-") for n in os.listdir(tmp_path))
            if started and _descendants(worker.pid):
                break
            time.sleep(0.5)
        time.sleep(3)
        kids = _descendants(worker.pid)
        assert kids, "the worker started no sandbox child"
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(p) for p in kids):
        time.sleep(0.2)
    assert not any(alive(p) for p in kids)  # the sandbox died with the process that ran it
    assert os.listdir(tmp_path)  # the killed worker could not clean up ...
    scratch.sweep(str(tmp_path))  # ... the next process that makes a folder does
    assert os.listdir(tmp_path) == []
    cgroups.sweep(scratch.alive)
    tag = f"kernelforge-{worker.pid}-"
    assert not any(d.name.startswith(tag) for p in cgroups._parents() for d in p.iterdir())


def test_a_phase_cuda_refuses_the_namespaces_runs_without_them_and_later_ones_try_again(
    monkeypatch,
):
    from harness.sandbox import parent

    monkeypatch.setattr(parent, "_cuda_refusals", [])
    busy = "sandbox setup: CUDA would not start (pid+mount+ipc+net): CUDA error: out of memory"
    assert not parent._cuda_refuses_namespaces(busy)  # a busy GPU is the phase's failure
    assert parent._cuda_refusals == []
    refused = (
        "sandbox setup: CUDA would not start (pid+mount+ipc+net): Unexpected error from "
        "cudaGetDeviceCount(). Error 304: OS call failed or operation not supported on this OS"
    )
    assert parent._cuda_refuses_namespaces(refused)
    [why] = parent._cuda_refusals
    assert why.startswith("none (CUDA would not start inside them here")
    # One refusal: the next child still gets its namespaces (a CPU child here stands in for it).
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child("selftest_env", {}, workdir, limits=Limits(), cuda=False)
    assert res.status is ChildStatus.OK, res.error
    assert res.isolation.pid == "pidns"
    # The retried phase says why it ran without them, and the layers show as missing.
    with tempfile.TemporaryDirectory() as workdir:
        res = run_child(
            "selftest_env", {}, workdir, limits=Limits(), cuda=False, isolate_ns=False, ns_note=why
        )
    assert res.status is ChildStatus.OK, res.error
    assert res.isolation.pid == why
    assert f"pid: {why}" in res.isolation.missing()
    # Only refusals in a row give them up for CUDA children.
    for _ in range(parent.CUDA_REFUSALS_TO_GIVE_UP - 1):
        assert parent._cuda_refuses_namespaces(refused)
    assert len(parent._cuda_refusals) == parent.CUDA_REFUSALS_TO_GIVE_UP


def test_a_folder_both_readable_and_writable_is_bound_writable(tmp_path):
    from harness.sandbox import namespaces

    cache = tmp_path / "cache"  # under /tmp: covered, so bound back in
    cache.mkdir()
    plan = namespaces.plan(str(tmp_path / "w"), (str(cache),), (str(cache), str(tmp_path)), 0)
    assert str(cache) in plan.writable
    assert str(cache) not in plan.readable and str(tmp_path) in plan.readable
