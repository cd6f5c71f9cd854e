"""The escapes of issues 15 and 23, each planted as a candidate (tests/exploits/) and shown
blocked: secrets read from other processes' /proc/<pid>/environ, host unix sockets, leftovers
in /dev/shm and /tmp, temporary folders a run (or a killed parent) left behind, the sandbox
undone from inside; and what bubblewrap's view holds (harness/sandbox/view.py). An untrusted
phase never runs without that view: where bubblewrap is missing it refuses to start."""

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
from harness.tests.conftest import alive, fresh, run_fixture


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
from harness.tests.conftest import alive, fresh, run_fixture, source
src = source({name!r}, HOST_PID=os.getpid())
ev = run_fixture({name!r}, source_text=src)
print("RESULT " + json.dumps(ev.to_dict()))
"""


def test_a_candidate_cannot_read_the_environment_of_the_process_that_evaluates_it(secret_env):
    worker = _worker(
        _EVALUATE.format(name="exploit_proc_environ"), secret_env, stdout=subprocess.PIPE
    )
    out, _ = worker.communicate(timeout=300)
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    ev = json.loads(line[len("RESULT ") :])
    tail = ev["stdout_tail"]
    assert ev["verdict"] == "passed", ev["error"]
    # Its own PID namespace: itself and bubblewrap's init (pid 1), nothing of the host.
    line = next(x for x in tail.splitlines() if x.startswith("PROC visible="))
    assert int(line.split("visible=")[1].split()[0]) <= 2, line
    assert "LEAK" not in tail, tail
    for value in secret_env.values():
        assert value not in tail
    assert ev["isolation"]["pid"] == "pidns"


def test_without_bubblewrap_an_untrusted_phase_refuses_to_start(monkeypatch):
    from harness.sandbox import view

    monkeypatch.setattr(view, "find_bwrap", lambda: None)
    monkeypatch.setenv("KF_SANDBOX_SPARES", "0")  # a spare started earlier has its view already
    spares.pool.shutdown()
    ev = run_fixture("x", source_text=fresh("honest_triton_matmul"))
    assert ev.verdict is Verdict.INFRA_ERROR, ev.error
    assert "only inside bubblewrap" in ev.error


def test_the_process_that_evaluates_is_not_dumpable():
    # Behind the PID namespace, a second barrier: /proc/<pid>/environ and mem of the process
    # holding the worker's secrets need CAP_SYS_PTRACE even for its own uid.
    import ctypes

    with tempfile.TemporaryDirectory() as workdir:
        run_child("selftest_env", {}, workdir, limits=Limits(), cuda=False)
    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


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


def test_a_candidate_cannot_reach_host_unix_sockets(monkeypatch, tmp_path):
    tag = uuid.uuid4().hex[:8]
    # One where such sockets usually live (/tmp: not in the view), one in the checkout (not
    # bound: only its code is), one inside a folder the view does bind (this checkout's
    # harness/: masked with /dev/null), and an abstract one (network namespace).
    outside = Path(tempfile.mkdtemp(prefix=".kf-sock-", dir=REPO_ROOT))
    inside = Path(tempfile.mkdtemp(prefix=".kf-sock-", dir=os.path.join(REPO_ROOT, "harness")))
    paths = [
        os.path.join(tempfile.gettempdir(), f"kf-sock-{tag}"),
        str(outside / "s"),
        str(inside / "s"),
    ]
    abstract = f"kf-abstract-{tag}"
    listeners = [_Listener(p) for p in paths] + [_Listener("\0" + abstract)]
    try:
        src = fresh("exploit_unix_socket", PATHS=paths, ABSTRACT=abstract)
        ev = run_fixture("exploit_unix_socket", source_text=src)
    finally:
        for listener in listeners:
            listener.close()
        for p in paths:
            Path(p).unlink(missing_ok=True)
        outside.rmdir()
        inside.rmdir()
    assert ev.verdict is Verdict.PASSED, ev.error
    assert [listener.got for listener in listeners] == [[]] * len(listeners)
    assert "UNIX connected" not in ev.stdout_tail, ev.stdout_tail
    for shown in [paths[0], os.path.relpath(paths[1], REPO_ROOT), "@" + abstract]:
        assert f"UNIX blocked {shown}" in ev.stdout_tail, ev.stdout_tail
    assert ev.isolation["mounts"].startswith("bwrap view"), ev.isolation


def _sysv_keys() -> set[int]:
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {int(line.split()[0]) for line in lines if line.split()}


def test_nothing_a_candidate_leaves_in_shared_memory_or_tmp_outlives_it():
    mark = f"kf-leftover-{uuid.uuid4().hex[:8]}"
    key = random.randrange(1 << 20, 1 << 30)
    ev = run_fixture(
        "exploit_leftovers", source_text=fresh("exploit_leftovers", MARK=mark, KEY=key)
    )
    assert ev.verdict is Verdict.PASSED, ev.error
    assert f"WROTE /dev/shm/{mark}" in ev.stdout_tail, ev.stdout_tail  # it could, privately
    assert f"SHM segment key={key} id=-1" not in ev.stdout_tail, ev.stdout_tail
    for folder in ("/dev/shm", "/tmp", "/var/tmp"):
        assert not Path(folder, mark).exists(), folder
    assert key not in _sysv_keys()
    assert ev.isolation["ipc"] == "ipcns"


def test_a_thread_started_at_import_cannot_do_the_work():
    # Its thread lives in the recording sandbox; what the judge runs is the plan, and run()
    # itself launched nothing: there is nothing to replay.
    ev = run_fixture("exploit_import_thread")
    assert ev.verdict in (Verdict.CHEAT, Verdict.COMPILE_ERROR), ev.error
    assert "launched nothing the judge can replay" in ev.error


def test_the_candidate_cannot_undo_the_sandbox_from_inside():
    ev = run_fixture("x", source_text=fresh("exploit_undo_view"))
    assert ev.verdict is Verdict.PASSED, ev.error
    for what in ("umount /tmp", "remount / rw", "unshare user+mount", "ptrace attach"):
        assert f"UNDO refused {what}" in ev.stdout_tail, ev.stdout_tail
    iso = ev.isolation
    assert iso["capabilities"] == "dropped" and iso["no_new_privs"] is True, iso
    assert iso["seccomp"].endswith("refused") or iso["seccomp"].startswith("none ("), iso


def test_the_isolation_record_lists_every_layer_and_none_missing():
    ev = run_fixture("x", source_text=fresh("honest_torch_matmul"))
    iso = ev.isolation
    out = os.environ.get("KF_RESULTS_DIR")  # the GPU check keeps what it saw
    if out:
        seen = {"verdict": ev.verdict.value, "isolation": iso, "checks": ev.checks}
        Path(out, "isolation_record.json").write_text(json.dumps(seen, indent=1, default=str))
    assert iso["pid"] == "pidns" and iso["ipc"] == "ipcns", iso
    assert iso["network"] == "netns", iso
    assert iso["mounts"].startswith("bwrap view: allow-listed reads"), iso
    assert iso["filesystem"].startswith("landlock") and "reads too" in iso["filesystem"], iso
    if os.geteuid() == 0:
        assert iso["uid"].startswith(f"{os.environ.get('KF_SANDBOX_UID', '65534')} "), iso
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
    root, me = scratch.root(), scratch.owner()
    ev = run_fixture("honest_torch_matmul")
    assert ev.verdict is Verdict.PASSED, ev.error
    # The spares waiting for the next phases (one per configuration; on a GPU the recording's
    # and the judge's), nothing else.
    assert len(_owned(root, me)) <= 2
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


def test_a_killed_parent_leaves_no_child_folder_or_cgroup_behind(tmp_path):
    worker = _worker(_HANG, {"TMPDIR": str(tmp_path), "KF_SANDBOX_SPARES": "1"})
    try:
        deadline = time.monotonic() + 120
        root = tmp_path / "kf-harness-0"
        while time.monotonic() < deadline:  # an evaluation with a sandbox child is under way
            started = root.is_dir() and any(n.startswith("kf-eval-") for n in os.listdir(root))
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
    assert os.listdir(root)  # the killed worker could not clean up ...
    scratch.sweep(str(root))  # ... the next process that makes a folder does
    assert os.listdir(root) == []
    cgroups.sweep(scratch.alive)
    tag = f"kernelforge-{worker.pid}-"
    assert not any(d.name.startswith(tag) for p in cgroups._parents() for d in p.iterdir())


def test_the_view_binds_only_what_a_child_needs(tmp_path, monkeypatch):
    from harness.config import Limits
    from harness.sandbox import view
    from harness.sandbox.process import Config

    monkeypatch.syspath_prepend(str(tmp_path))  # a script's folder on sys.path is not bound
    view.system_reads.cache_clear()
    try:
        reads = view.system_reads()
    finally:
        view.system_reads.cache_clear()
    assert str(tmp_path) not in reads and "/tmp" not in reads
    assert (
        os.path.join(REPO_ROOT, "harness") in reads and os.path.join(REPO_ROOT, "kernels") in reads
    )
    assert not any(p == REPO_ROOT or p.startswith(os.path.join(REPO_ROOT, "var")) for p in reads)
    assert not any(p.startswith(os.path.join(REPO_ROOT, "webapp")) for p in reads)
    untrusted = Config(Limits(), False, True, True, True, True, (), ("/srv/x",), (), ())
    args = view.argv("bwrap", untrusted.view("/tmp"))
    assert "--bind" not in args  # no host folder is writable for untrusted code
    trusted = Config(Limits(), False, False, True, True, True, (), (str(tmp_path),), (), ())
    args = view.argv("bwrap", trusted.view(str(tmp_path)))
    assert args[args.index("--bind") + 1] == str(tmp_path)
    # Missing parents are made 0755 (bwrap would make them 0700: the child's uid could not pass).
    made = [args[i + 3] for i, a in enumerate(args) if a == "--perms" and args[i + 2] == "--dir"]
    assert made and all(args[args.index(d) - 2] == "0755" for d in made)
    tmpfs = [i for i, a in enumerate(args) if a == "--tmpfs" and args[i + 1] == "/tmp"]
    size = args[tmpfs[0] - 4 : tmpfs[0] - 2]
    assert len(tmpfs) == 1 and size == ["--size", str(Limits().scratch_bytes)], size
