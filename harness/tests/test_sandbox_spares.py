"""Warm spares: a child started ahead of time serves the next phase of the same configuration,
gets its job (and its uid, Landlock, key, workdir) only when claimed, and never outlives its
use. A trusted spare's view binds the harness's scratch root, so it serves any workdir there
(scratch.make); an untrusted one has no host folder at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import harness
from harness import Verdict
from harness.config import Limits
from harness.sandbox import REPO_ROOT, ChildStatus, parent, run_child, scratch, spares
from harness.tests.conftest import alive, fresh, run_fixture, tiled_render


@pytest.fixture(autouse=True)
def spares_on(monkeypatch):
    monkeypatch.setenv("KF_SANDBOX_SPARES", "1")
    spares.pool.shutdown()
    yield
    spares.pool.shutdown()


class _workdir:
    """A workdir under the harness's scratch root, as every evaluation's is."""

    def __enter__(self) -> str:
        self.path = scratch.make("test")
        return self.path

    def __exit__(self, *exc) -> None:
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)


def _env_run(workdir: str, **kwargs):
    return run_child("selftest_env", {}, workdir, limits=Limits(), cuda=False, **kwargs)


def _the_spare() -> int:
    [pid] = spares.pool.pids()
    return pid


def test_it_runs_the_next_phase_in_a_spare_started_before_it_was_asked_for():
    with _workdir() as first, _workdir() as second:
        fresh = _env_run(first, prestart=True)
        assert fresh.status is ChildStatus.OK, fresh.error
        assert not fresh.spare and fresh.isolation.prestarted is False
        spare_pid = _the_spare()
        assert spare_pid != fresh.pid
        res = _env_run(second)
    assert res.status is ChildStatus.OK, (res.error, res.output[-2000:])
    assert res.spare and res.pid == spare_pid
    assert res.isolation.prestarted is True  # the child says it waited for its job
    # The job's workdir and environment, not the spare's placeholder ones.
    assert res.result["cwd"] == os.path.realpath(second)
    assert res.result["home"] == second
    assert res.result["names"] == fresh.result["names"]
    assert res.isolation.network == fresh.isolation.network
    assert res.isolation.filesystem == fresh.isolation.filesystem
    assert spares.pool.pids() == []  # claimed, and no new one without prestart


def test_a_claimed_spare_still_cannot_write_outside_its_workdir():
    markers = [Path(harness.__file__).parent / "kf_pwned_marker", Path("/tmp/kf_pwned_marker")]
    for m in markers:
        m.unlink(missing_ok=True)
    run_fixture("x", source_text=fresh("honest_triton_matmul"))  # leaves an untrusted spare
    ev = run_fixture("x", source_text=fresh("exploit_write_outside"))
    assert ev.isolation.get("prestarted") is True, ev.isolation  # its recording was a spare
    assert ev.verdict is not Verdict.PASSED
    # Landlock refuses (EACCES), and under it the view is read-only (EROFS).
    assert any(w in ev.error for w in ("Permission denied", "PermissionError", "Read-only"))
    assert not any(m.exists() for m in markers)  # /tmp's is its own tmpfs: not the host's
    assert ev.isolation["filesystem"].startswith("landlock")
    assert set(ev.checks["phase_wall_s"]) == {"candidate_record"}
    assert ev.checks["phase_spare"] == {"candidate_record": True}


def test_a_spare_holds_no_secrets_before_or_after_its_claim(secret_env):
    with _workdir() as workdir:
        _env_run(workdir, prestart=True)
        pid = _the_spare()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    for value in secret_env.values():
        assert value.encode() not in environ and value.encode() not in cmdline
    run_fixture("x", source_text=fresh("honest_triton_matmul"))  # leaves an untrusted spare
    ev = run_fixture("x", source_text=fresh("exploit_env_secrets"))
    assert ev.verdict is Verdict.PASSED, ev.error
    assert ev.isolation.get("prestarted") is True, ev.isolation
    assert "ENV NAMES" in ev.stdout_tail and "LEAK" not in ev.stdout_tail
    for value in secret_env.values():
        assert value not in ev.stdout_tail


def test_a_dead_spare_falls_back_to_a_fresh_child():
    with _workdir() as workdir:
        _env_run(workdir, prestart=True)
        pid = _the_spare()
        os.kill(pid, signal.SIGKILL)
        res = _env_run(workdir)
    assert res.status is ChildStatus.OK, res.error
    assert not res.spare and res.pid != pid
    assert res.isolation.prestarted is False
    assert not alive(pid)


def test_a_spare_that_dies_after_its_claim_falls_back_to_a_fresh_child(monkeypatch):
    # The race the test above leaves to chance: the claim reaches the spare, which is killed
    # before it answers. The phase runs once more in a fresh child, whose verdict stands.
    from harness.sandbox import process

    hand_over, killed = process.hand_over, []

    def hand_over_then_kill(child, claim):
        handed = hand_over(child, claim)
        if not killed:
            killed.append(child.proc.pid)
            os.kill(child.proc.pid, signal.SIGKILL)
        return handed

    with _workdir() as workdir:
        _env_run(workdir, prestart=True)
        pid = _the_spare()
        monkeypatch.setattr(process, "hand_over", hand_over_then_kill)
        res = _env_run(workdir)
    assert killed == [pid]
    assert res.status is ChildStatus.OK, res.error
    assert not res.spare and res.pid != pid


def test_a_spare_serves_a_phase_whatever_its_wall_limit():
    # The wall clock is the parent's to enforce; the agent gives every verification its own
    # (what is left of its budget), and with the wall in the key no judge found a spare.
    with _workdir() as workdir:
        run_child("selftest_env", {}, workdir, limits=Limits(wall_s=90), cuda=False, prestart=True)
        pid = _the_spare()
        res = run_child("selftest_env", {}, workdir, limits=Limits(wall_s=37.5), cuda=False)
    assert res.status is ChildStatus.OK, res.error
    assert res.spare and res.pid == pid


def test_a_phase_started_ahead_serves_the_first_run_of_it():
    with _workdir() as workdir:
        parent.prestart("selftest_env", scratch.root(), limits=Limits(), cuda=False)
        pid = _the_spare()
        res = _env_run(workdir)
    assert res.status is ChildStatus.OK, res.error
    assert res.spare and res.pid == pid
    assert res.result["cwd"] == os.path.realpath(workdir)


def test_the_first_verification_s_judge_runs_in_a_spare_started_ahead():
    from harness import EvalConfig, evaluate, warm_judge

    render, problem = tiled_render()
    # What the agent's evaluator does while it screens (prefetch_final), with its own wall.
    warm_judge(EvalConfig(quick=True, limits=Limits(wall_s=200)))
    assert len(spares.pool.pids()) == 1
    ev = evaluate(render, problem, config=EvalConfig(quick=True, limits=Limits(wall_s=120)))
    assert ev.verdict is Verdict.PASSED, ev.error
    assert ev.checks["trusted_render"]  # our render: the judge runs it with no recording
    assert ev.checks["phase_spare"] == {"judge": True}


def test_a_spare_with_a_thread_landlock_would_miss_is_not_used():
    # OpenBLAS with 2 threads starts a worker when torch imports numpy: Landlock, applied at
    # the claim, would not restrict that thread, so the spare must refuse to serve.
    extra = {"OPENBLAS_NUM_THREADS": "2"}
    with _workdir() as workdir:
        _env_run(workdir, prestart=True, env_extra=extra)
        pid = _the_spare()
        res = _env_run(workdir, env_extra=extra)
    assert res.status is ChildStatus.OK, res.error
    assert not res.spare and res.pid != pid
    assert not alive(pid)


def test_a_spare_of_another_configuration_is_not_used():
    with _workdir() as workdir:
        _env_run(workdir, prestart=True)
        pid = _the_spare()
        res = run_child("selftest_env", {}, workdir, limits=Limits(max_pids=100), cuda=False)
        assert res.status is ChildStatus.OK, res.error
        assert not res.spare
        assert spares.pool.pids() == [pid]  # still waiting for its own configuration
        res = _env_run(workdir, isolate_net=False)
        assert not res.spare and spares.pool.pids() == [pid]
        # Without Landlock a candidate could trace a waiting spare: none is started.
        spares.pool.shutdown()
        res = _env_run(workdir, isolate_fs=False, prestart=True)
        assert res.status is ChildStatus.OK and not res.spare
        assert spares.pool.pids() == []


def test_it_keeps_the_configured_number_of_spares_for_two_configurations(monkeypatch):
    monkeypatch.setenv("KF_SANDBOX_SPARES", "1")
    with _workdir() as workdir:
        _env_run(workdir, prestart=True)
        first = spares.pool.pids()
        assert len(first) == 1
        _env_run(workdir, prestart=True, isolate_net=False)  # another configuration: kept too
        second = spares.pool.pids()
        assert len(second) == 2 and set(first) < set(second)
        _env_run(workdir, prestart=True, env_extra={"KF_THIRD": "1"})
        third = spares.pool.pids()  # a third configuration: the oldest other one goes
    assert len(third) == 2 and not set(first) & set(third)
    assert not any(alive(pid) for pid in first)


def test_it_starts_no_spare_when_switched_off(monkeypatch):
    monkeypatch.setenv("KF_SANDBOX_SPARES", "0")
    with _workdir() as workdir:
        res = _env_run(workdir, prestart=True)
    assert res.status is ChildStatus.OK and not res.spare
    assert spares.pool.pids() == []


def test_no_spare_outlives_shutdown_or_its_idle_time(monkeypatch):
    with _workdir() as workdir:
        _env_run(workdir, prestart=True)
        pid = _the_spare()
        spares.pool.shutdown()
        assert not alive(pid)
        monkeypatch.setenv("KF_SANDBOX_SPARE_IDLE_S", "4")
        _env_run(workdir, prestart=True)
        # On a loaded box (xdist, 8 workers) the spare may already be past its idle time here.
        pids = spares.pool.pids()
        time.sleep(6)
        assert spares.pool.pids() == []
        assert not any(alive(pid) for pid in pids)


def test_no_spare_outlives_the_interpreter_that_started_it():
    script = (
        "import tempfile\n"
        "from harness.config import Limits\n"
        "from harness.sandbox import run_child, spares\n"
        "w = tempfile.mkdtemp()\n"
        "run_child('selftest_env', {}, w, limits=Limits(), cuda=False, prestart=True)\n"
        "print(spares.pool.pids()[0])\n"
    )
    env = {**os.environ, "KF_SANDBOX_SPARES": "1", "PYTHONPATH": REPO_ROOT}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[-1])
    assert not alive(pid)


_PROBE_SPARES = """
import os

import torch

_done = []


def _probe():
    me = os.getpid()
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    print("PROBE me", me, "sees", sorted(pids))
    for pid in pids:
        if pid in (me, 1):  # itself, and bubblewrap's init of its own sandbox
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"harness.sandbox.boot" in f.read():
                    print("SPARE SEEN", pid)
        except OSError:
            continue


def run(a, b, *, out):
    if not _done:
        _done.append(_probe())
    torch.matmul(a, b, out=out)
"""


def test_the_candidate_cannot_see_the_spare_waiting_for_the_next_phase():
    # While candidate_record runs, a spare for the next phase already waits; in its own PID
    # namespace the candidate sees only itself (and bubblewrap's init), so it cannot read,
    # trace or signal it.
    ev = run_fixture("x", source_text=_PROBE_SPARES + f"# {os.getpid()} {time.time()}\n")
    assert ev.isolation["pid"] == "pidns", ev.isolation
    assert ev.verdict is Verdict.PASSED, ev.error
    line = next(x for x in ev.stdout_tail.splitlines() if x.startswith("PROBE me"))
    assert len(line.split("sees")[1].strip(" []").split(",")) <= 2, line
    assert "SPARE SEEN" not in ev.stdout_tail


_WARM_UP = """
import os, sys
from harness.sandbox import boot
from harness.sandbox.protocol import ChildLimits, SpawnSettings
limits = ChildLimits(cpu_s=60, max_file_bytes=1 << 20, max_open_files=256, max_pids=64,
                     memory_bytes=1 << 33, cgroup=False)
spawn = SpawnSettings(fd=1, warm=True, idle_s=1.0, cuda=sys.argv[1] == "cuda",
                      untrusted=sys.argv[2] == "untrusted", sandbox_uid=None, isolate_net=False,
                      isolate_fs=False, undumpable=False, cgroup_kind="none", limits=limits)
unfit = boot._warm_up(1, spawn)
print("unfit:" + unfit, *(m + ":" + str(m in sys.modules) for m in ("torch._dynamo", "functorch.compile")))
"""


@pytest.mark.parametrize(
    ("cuda", "trust", "dynamo"),
    [("cuda", "trusted", True), ("cuda", "untrusted", False), ("cpu", "trusted", False)],
)
def test_a_judge_spare_on_a_gpu_imports_dynamo_and_stays_fit_to_serve(cuda, trust, dynamo):
    # The judge's torch.compile baseline imports Dynamo and AOTAutograd (seconds); its spare
    # does it while it waits. Still one thread and no writable fd, or Landlock would miss
    # something. On a GPU this is what failed: importing torch._inductor.compile_fx as well
    # started CUDA's driver thread, and no judge spare was ever used (H200, 2026-11-28).
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _WARM_UP, cuda, trust],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    assert out.split()[-3:] == ["unfit:", f"torch._dynamo:{dynamo}", f"functorch.compile:{dynamo}"]
