"""Parent side of the sandbox: run one phase in a child, bound it, kill it, read its result.

The parent never imports torch's CUDA, never imports candidate code and never trusts a result
that arrives without the per-run HMAC, nor one from a child that exited non-zero (R1.11).
Whatever text comes back (output, errors, strings in the result) is scrubbed of this
process's secret values first (scrub.py). A child may have been started ahead of time as a
warm spare (spares.py); it still serves one phase only.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import Limits
from harness.sandbox import capabilities, namespaces, process, scratch, scrub
from harness.sandbox.process import Config, Started
from harness.sandbox.protocol import CUDA_FAILED, Claim, IsolationRecord
from harness.sandbox.spares import pool, spare_idle_s, spares_enabled

_MAX_RESULT_BYTES = 64 * 2**20
_log = logging.getLogger(__name__)


class ChildStatus(enum.StrEnum):
    OK = "ok"  # a verified result arrived and the child exited 0
    TIMEOUT = "timeout"  # killed at the wall-clock limit
    CRASH = "crash"  # died by a signal or exited non-zero without a result
    FORGED = "forged"  # a result arrived with a wrong HMAC or nonce
    INFRA = "infra"  # the harness code inside the child failed


@dataclass
class ChildResult:
    status: ChildStatus
    result: dict = field(default_factory=dict)
    returncode: int | None = None
    output: str = ""  # captured stdout+stderr, head and tail, size-capped, scrubbed
    wall_s: float = 0.0
    isolation: IsolationRecord = field(default_factory=IsolationRecord)
    error: str = ""
    pid: int | None = None  # the child's process id (on the host)
    spare: bool = False  # it was a warm spare, started before this phase was asked for


def run_child(
    phase: str,
    job: dict,
    workdir: str,
    *,
    limits: Limits,
    wall_s: float | None = None,
    cuda: bool,
    isolate_net: bool = True,
    isolate_fs: bool = True,
    isolate_ns: bool = True,
    writable: tuple[str, ...] = (),
    readable: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
    wrapper: list[str] | None = None,
    prestart: bool = False,
    spares: bool = True,
    ns_note: str = "",
) -> ChildResult:
    """Run `harness.phases.run(phase, job)` in a fresh, locked-down process.

    isolate_ns: own PID/mount/IPC namespaces and the private view (`workdir` and `writable`
    stay writable, `readable` stays readable where it sits under a private folder such as
    /tmp). The process is a warm spare of the same configuration when one waits (spares.py);
    `prestart` leaves a spare behind for the caller's next phase; spares=False never claims
    one (the retry after a spare died); `ns_note` says why the namespaces are off (the retry
    after CUDA refused them)."""
    # The same phase once more (a spare that died at its claim, CUDA refusing the namespaces).
    again = functools.partial(
        run_child,
        phase,
        job,
        workdir,
        limits=limits,
        wall_s=wall_s,
        cuda=cuda,
        isolate_net=isolate_net,
        isolate_fs=isolate_fs,
        isolate_ns=isolate_ns,
        writable=writable,
        readable=readable,
        env_extra=env_extra,
        wrapper=wrapper,
        prestart=prestart,
    )
    capabilities.undumpable()  # this process's environment: not for a child to read
    wall = wall_s if wall_s is not None else limits.wall_s
    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    if cuda and isolate_ns and len(_cuda_refusals) >= CUDA_REFUSALS_TO_GIVE_UP:
        isolate_ns, ns_note = False, _cuda_refusals[-1]
    config = Config.of(limits, cuda, isolate_net, isolate_fs, isolate_ns, ns_note, env_extra)
    side_dir = scratch.make("side") if wrapper else None
    plan = None
    if isolate_ns and namespaces.support().unshare:  # never mount outside a namespace of its own
        from harness.device import cache_dir  # noqa: PLC0415  (light; avoids an import circle)

        extra = (*writable, side_dir) if side_dir else writable
        # The harness's own cache (compile cache, cuBLASLt build) stays readable to every child.
        reads = (*readable, str(cache_dir()))
        plan = namespaces.plan(workdir, extra, reads, limits.memory_bytes)
    claim = Claim(
        key=key.hex(),
        nonce=nonce,
        phase=phase,
        job=job,
        workdir=workdir,
        env=process.child_env(workdir, env_extra),
        plan=plan,
    )
    # Only where Landlock confines every phase: it also stops a candidate from signalling the
    # spare that waits beside it for the next (trusted) phase.
    use_spares = spares and wrapper is None and isolate_fs and spares_enabled()
    start = time.monotonic()
    child = pool.claim(config) if use_spares else None
    spare = child is not None
    # A spare that died just now is not the job's failure: a fresh child runs it instead.
    if child is not None and not process.hand_over(child, claim):
        child.cleanup()
        child, spare = None, False
    if child is None:
        settings_path = os.path.join(side_dir, "settings.json") if side_dir else None
        started = process.start(
            config,
            workdir,
            warm=False,
            idle_s=spare_idle_s() + 30,
            wrapper=wrapper,
            settings_path=settings_path,
            claim=claim,
        )
        if isinstance(started, str):
            if side_dir:
                shutil.rmtree(side_dir, ignore_errors=True)
            return ChildResult(ChildStatus.INFRA, error=started)
        child = started
        process.hand_over(child, None if wrapper else claim)  # a failure shows as a crash
    message = bytearray()
    reader = threading.Thread(target=_read_all, args=(child.read_fd, message), daemon=True)
    reader.start()
    if use_spares and prestart:
        pool.fill(config)  # its start-up overlaps with this phase
    timed_out, oom_killed = _wait(child, wall, reader)
    wall_used = time.monotonic() - start
    if side_dir:
        with contextlib.suppress(OSError):
            message = bytearray(Path(side_dir, "result").read_bytes())
        shutil.rmtree(side_dir, ignore_errors=True)
    if timed_out:
        return _result(
            child, ChildStatus.TIMEOUT, wall_used, spare, error=f"killed after {wall:.0f} s"
        )
    payload, why = _verify(bytes(message), key, nonce)
    if payload is None:
        if why:
            return _result(child, ChildStatus.FORGED, wall_used, spare, error=why)
        if spare:
            # A spare can die between saying "ready" and its claim (killed from outside; H200,
            # 2026-11-22): that must not read as the job's crash. The phase runs once more in
            # a fresh child, whose verdict stands.
            return again(spares=False)
        code = child.proc.returncode
        if oom_killed:
            # SIGKILL from the OOM killer; `unshare` cannot re-raise SIGKILL on itself (it
            # exits 1, "sigprocmask unblock failed"), so the status is set from the cgroup.
            code = child.proc.returncode = -signal.SIGKILL
        sig = -code if code and code < 0 else None
        what = f"killed by signal {signal.Signals(sig).name}" if sig else f"exit {code}"
        what += " (out of memory)" if oom_killed else ""
        return _result(
            child,
            ChildStatus.CRASH,
            wall_used,
            spare,
            error=f"sandbox died ({what}) before reporting",
        )
    reported = payload.get("isolation") or {}
    if payload.get("status") == "infra":
        error = payload.get("error", "")
        if cuda and isolate_ns and _cuda_refuses_namespaces(error):
            # This phase once more without them; later children try them again.
            return again(spares=spares, isolate_ns=False, ns_note=_cuda_refusals[-1])
        return _result(child, ChildStatus.INFRA, wall_used, spare, error=error, reported=reported)
    if child.proc.returncode != 0:
        return _result(
            child,
            ChildStatus.CRASH,
            wall_used,
            spare,
            result=payload.get("result", {}),
            error=f"sandbox exited {child.proc.returncode} after reporting",
            reported=reported,
        )
    if cuda and isolate_ns:
        _cuda_refusals.clear()  # CUDA started inside them: a refusal before was not the host's
    return _result(
        child, ChildStatus.OK, wall_used, spare, result=payload.get("result", {}), reported=reported
    )


# Why CUDA refused to start inside a child's PID/mount/IPC namespaces, one entry per refusal
# since CUDA last started inside them. A refused phase runs once more without them (its
# isolation record says why) and the next child tries them again: on the H100 (2026-11-24) a
# refusal came in an agent run on a machine where the sandbox's own GPU check had just started
# CUDA inside them in every child, so one refusal does not show what the host can do. After
# CUDA_REFUSALS_TO_GIVE_UP refusals in a row (a driver that never allows it), CUDA children
# start without them, so a host like that does not pay every child's start-up twice.
CUDA_REFUSALS_TO_GIVE_UP = 3
_cuda_refusals: list[str] = []


def _cuda_refuses_namespaces(error: str) -> bool:
    """CUDA's "OS call failed" (cudaErrorOperatingSystem) at its first start inside the
    namespaces: a property of this host's driver, not of the job (no job code ran yet). Other
    CUDA start errors (a busy or broken GPU) fail the phase as before."""
    if f"sandbox setup: {CUDA_FAILED}" not in error or "OS call failed" not in error:
        return False
    why = error.split("\n")[0][-300:]
    _cuda_refusals.append(f"none (CUDA would not start inside them here: {why})")
    _log.warning(
        "sandbox: CUDA refused PID/mount/IPC namespaces (%d in a row); this phase runs without "
        "them: %s",
        len(_cuda_refusals),
        why,
    )
    return True


def _wait(child: Started, wall: float, reader: threading.Thread) -> tuple[bool, bool]:
    """Wait for the child up to the wall clock; then nothing of it stays.
    Returns (timed out, the kernel killed it for memory)."""
    timed_out = False
    try:
        child.proc.wait(timeout=wall)
    except subprocess.TimeoutExpired:
        timed_out = True
    # Whatever the child left behind (its group, setsid() escapees in the cgroup) dies now;
    # its namespaces (and the private tmpfs in them) die with their last process.
    process.kill_group(child.proc.pid)
    child.group.kill_all()
    if timed_out:
        child.proc.wait()
    reader.join(timeout=5)
    oom_killed = child.group.oom_kills() > 0  # read before cleanup() removes the group
    child.cleanup()
    return timed_out, oom_killed


def _result(
    child: Started,
    status: ChildStatus,
    wall_s: float,
    spare: bool,
    *,
    result: dict | None = None,
    error: str = "",
    reported: dict | None = None,
) -> ChildResult:
    """The outcome, with every text in it scrubbed, and the isolation the child had: what the
    parent set up is known even when the child never reported (timeout, crash)."""
    hidden = scrub.secret_values()
    isolation = IsolationRecord.from_dict(reported or {})
    group = child.group
    isolation.cgroup = group.kind if group.dirs else f"none ({group.note})"
    if not reported:
        # What the child sets up itself is unknown when it never reported (timeout, crash):
        # not "none", which would read as a layer this host lacks.
        unknown = "unknown (the child did not report)"
        for name in ("mounts", "sockets", "filesystem", "capabilities", "seccomp"):
            setattr(isolation, name, unknown)
        made = child.spawn.namespaces
        if "pid" in made:
            isolation.pid, isolation.ipc = "pidns", "ipcns"
        else:
            isolation.pid = isolation.ipc = child.spawn.ns_note
        names = made.split("+")
        if "net" in names:
            isolation.network = "userns+netns" if "user" in names else "netns"
        elif child.config.isolate_net:
            isolation.network = unknown  # the child may have made one itself
    return ChildResult(
        status,
        result=scrub.scrub(result or {}, hidden),
        returncode=child.proc.returncode,
        output=scrub.scrub_text(child.output.text(), hidden),
        wall_s=wall_s,
        isolation=isolation,
        error=scrub.scrub_text(error, hidden),
        pid=child.proc.pid,
        spare=spare,
    )


def _read_all(fd: int, into: bytearray) -> None:
    while len(into) <= _MAX_RESULT_BYTES:
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError:
            return
        if not chunk:
            return
        into += chunk


def _verify(message: bytes, key: bytes, nonce: str) -> tuple[dict | None, str]:
    """(payload, "") when authentic; (None, why) when forged; (None, "") when nothing came."""
    if not message:
        return None, ""
    mac, _, body = message.partition(b"\n")
    expected = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, expected):
        return None, "result message failed HMAC verification"
    try:
        payload = json.loads(body)
    except ValueError:
        return None, "result message is not JSON"
    if payload.get("nonce") != nonce:
        return None, "result message carries another run's nonce"
    return payload, ""
