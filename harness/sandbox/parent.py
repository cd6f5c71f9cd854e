"""Parent side of the sandbox: run one phase in a child, bound it, kill it, read its result.

The parent never imports torch's CUDA and never imports candidate code. A trusted phase's
result must arrive with the per-run HMAC and nonce and from a child that exited 0 (R1.11). A
phase that runs untrusted code (harness.phases.is_untrusted: the candidate's recording and
CPU executor, uploaded models) gets no key at all: nothing of the judge's is in its process,
and what it sends back is data that its caller checks, never a verdict. Whatever text comes
back is scrubbed of this process's secret values (scrub.py). A child may have been started
ahead of time as a warm spare (spares.py); it still serves one phase only.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.config import Limits
from harness.phases import is_untrusted
from harness.sandbox import capabilities, process, scratch, scrub
from harness.sandbox.process import UNTRUSTED_WORKDIR, Config, Started
from harness.sandbox.protocol import Claim, IsolationRecord
from harness.sandbox.spares import pool, spare_idle_s, spares_enabled

_MAX_RESULT_BYTES = 256 * 2**20
CANCEL_POLL_S = 0.25  # how often a wait with `cancel` looks at it


class ChildStatus(enum.StrEnum):
    OK = "ok"  # a result arrived and the child exited 0 (trusted: with a valid HMAC)
    TIMEOUT = "timeout"  # killed at the wall-clock limit
    CRASH = "crash"  # died by a signal or exited non-zero without a result
    FORGED = "forged"  # a trusted phase's result arrived with a wrong HMAC or nonce
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
    pass_fds: tuple[int, ...] = (),
    started: threading.Event | None = None,
    background: bool = False,
    cancel: threading.Event | None = None,
) -> ChildResult:
    """Run `harness.phases.run(phase, job)` in a fresh, locked-down process.

    workdir: a trusted phase's working folder on the host (bound writable, with `writable`);
    an untrusted phase gets none: its workdir is a folder of its private tmpfs (job["workdir"]
    is set to it) and nothing of the host is writable. `readable` adds host folders to the
    view. `prestart` leaves a spare behind for the caller's next phase; spares=False never
    claims one; `pass_fds` hands the child open descriptors (never a spare); `started` is set
    once the child process exists (or failed to start). `background`: compile-ahead work,
    run at BACKGROUND_NICE so it never competes with a child that times kernels. `cancel`: once
    set, the caller wants no result: the child is ended then (a TIMEOUT saying so)."""
    try:
        return _run(
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
            spares=spares,
            pass_fds=pass_fds,
            started=started,
            background=background,
            cancel=cancel,
        )
    finally:
        if started is not None:
            started.set()


def _run(phase, job, workdir, *, limits, wall_s, cuda, isolate_net, isolate_fs, isolate_ns,
         writable, readable, env_extra, wrapper, prestart, spares, pass_fds, started,
         background, cancel):  # fmt: skip
    capabilities.undumpable()  # this process's environment: not for a child to read
    untrusted = is_untrusted(phase)
    if untrusted:
        # Its own scratch only: nothing of the host is writable, every layer is on.
        workdir, writable = UNTRUSTED_WORKDIR, ()
        job = {**job, "workdir": workdir}
        isolate_ns = isolate_fs = True
    wall = wall_s if wall_s is not None else limits.wall_s
    key, nonce = (b"", "") if untrusted else (secrets.token_bytes(32), secrets.token_hex(16))
    config = _config(phase, workdir, limits=limits, cuda=cuda, isolate_net=isolate_net,
                     isolate_fs=isolate_fs, isolate_ns=isolate_ns, writable=writable,
                     readable=readable, env_extra=env_extra, background=background)  # fmt: skip
    side_dir = scratch.make("side") if wrapper else None  # under the scratch root: writable
    claim = Claim(
        key=key.hex(),
        nonce=nonce,
        phase=phase,
        job=job,
        workdir=workdir,
        env=process.child_env(workdir, env_extra),
    )
    use_spares = spares and wrapper is None and not pass_fds and isolate_fs and spares_enabled()
    start = time.monotonic()
    child = pool.claim(config) if use_spares else None
    spare = child is not None
    # A spare that died just now is not the job's failure: a fresh child runs it instead.
    if child is not None and not process.hand_over(child, claim):
        child.cleanup()
        child, spare = None, False
    if child is None:
        settings_path = os.path.join(side_dir, "settings.json") if side_dir else None
        made = process.start(
            config,
            workdir,
            warm=False,
            idle_s=spare_idle_s() + 30,
            wrapper=wrapper,
            settings_path=settings_path,
            claim=claim,
            pass_fds=pass_fds,
        )
        if isinstance(made, str):
            if side_dir:
                shutil.rmtree(side_dir, ignore_errors=True)
            return ChildResult(ChildStatus.INFRA, error=made)
        child = made
        process.hand_over(child, None if wrapper else claim)  # a failure shows as a crash
    if started is not None:
        started.set()
    reader = _ResultReader(child.read_fd)
    if use_spares and prestart:
        pool.fill(config)  # its start-up overlaps with this phase
    timed_out, oom_killed = _wait(child, wall, reader, cancel)
    wall_used = time.monotonic() - start
    message = reader.message
    if side_dir:
        with contextlib.suppress(OSError):
            message = bytearray(Path(side_dir, "result").read_bytes()[:_MAX_RESULT_BYTES])
        shutil.rmtree(side_dir, ignore_errors=True)
    if timed_out:
        why = f"killed after {wall:.0f} s"
        if cancel is not None and cancel.is_set():
            why = f"cancelled after {wall_used:.0f} s: its caller wanted no result any more"
        return _result(child, ChildStatus.TIMEOUT, wall_used, spare, error=why)
    payload, why = _verify(bytes(message), key, nonce)
    if payload is None:
        if why:
            return _result(child, ChildStatus.FORGED, wall_used, spare, error=why)
        if message and untrusted:
            error = (
                "its result message is not well formed (did its code write into it?): "
                + _malformed(bytes(message))
            )
            return _result(child, ChildStatus.CRASH, wall_used, spare, error=error)
        if spare:
            # A spare can die between saying "ready" and its claim (killed from outside; H200,
            # 2026-11-22): that must not read as the job's crash. The phase runs once more in
            # a fresh child, whose verdict stands.
            return _run(phase, job, workdir, limits=limits, wall_s=wall_s, cuda=cuda,
                        isolate_net=isolate_net, isolate_fs=isolate_fs, isolate_ns=isolate_ns,
                        writable=writable, readable=readable, env_extra=env_extra,
                        wrapper=wrapper, prestart=prestart, spares=False,
                        pass_fds=pass_fds, started=None, background=background,
                        cancel=cancel)  # fmt: skip
        code = child.proc.returncode
        if oom_killed:
            code = child.proc.returncode = -signal.SIGKILL
        # bubblewrap reports a child killed by a signal as 128 + the signal.
        sig = -code if code and code < 0 else (code - 128 if code and 128 < code < 160 else None)
        what = f"killed by signal {signal.Signals(sig).name}" if sig else f"exit {code}"
        what += " (out of memory)" if oom_killed else ""
        return _result(
            child,
            ChildStatus.CRASH,
            wall_used,
            spare,
            error=f"sandbox died ({what}) before reporting",
        )
    reported = payload.get("isolation") if isinstance(payload.get("isolation"), dict) else {}
    if payload.get("status") == "infra":
        error = str(payload.get("error", ""))
        # An untrusted child's word is not proof the harness failed: its code ran there.
        status = ChildStatus.CRASH if untrusted else ChildStatus.INFRA
        return _result(child, status, wall_used, spare, error=error, reported=reported)
    result = payload.get("result") if isinstance(payload.get("result"), dict) else {}
    if child.proc.returncode != 0:
        return _result(
            child,
            ChildStatus.CRASH,
            wall_used,
            spare,
            result=result,
            error=f"sandbox exited {child.proc.returncode} after reporting",
            reported=reported,
        )
    return _result(child, ChildStatus.OK, wall_used, spare, result=result, reported=reported)


def prestart(
    phase: str,
    workdir: str,
    *,
    limits: Limits,
    cuda: bool,
    isolate_net: bool = True,
    isolate_fs: bool = True,
    writable: tuple[str, ...] = (),
    readable: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
) -> None:
    """Start spares for a phase that has not been asked for yet (run_child with the same
    arguments then claims one), so the first such phase starts warm too, not only the ones
    after a run_child(prestart=True). Nothing happens where spares would not be used."""
    if not (isolate_fs and spares_enabled()):
        return
    config = _config(phase, workdir, limits=limits, cuda=cuda, isolate_net=isolate_net,
                     isolate_fs=True, isolate_ns=True, writable=writable, readable=readable,
                     env_extra=env_extra, background=False)  # fmt: skip
    pool.fill(config)


def _config(phase, workdir, *, limits, cuda, isolate_net, isolate_fs, isolate_ns, writable,
            readable, env_extra, background) -> Config:  # fmt: skip
    """What the child is started with (and the key a spare is matched on)."""
    untrusted = is_untrusted(phase)
    return Config(
        # The wall clock is the parent's to enforce (_wait), not something a child starts
        # with, so it is not part of the key: the agent gives every verification its own wall
        # (what is left of its budget), and with it in the key no judge ever found a spare
        # (compile_imports 3.5-5.8 s in every H200 verification, both_ways_h200_4shapes_d).
        limits=replace(limits, wall_s=0.0),
        cuda=cuda,
        untrusted=untrusted,
        isolate_net=isolate_net,
        isolate_fs=isolate_fs,
        isolate_ns=isolate_ns,
        reads=tuple(os.path.realpath(p) for p in readable if p),
        writes=() if untrusted else _trusted_writes(workdir, writable),
        env_extra=tuple(sorted((env_extra or {}).items())),
        base_env=tuple(sorted(process.child_env("/kf-workdir").items())),
        niceness=process.BACKGROUND_NICE if background else 0,
    )


def _trusted_writes(workdir: str, writable: tuple[str, ...]) -> tuple[str, ...]:
    """The scratch root (every harness folder, so a warm spare can serve any workdir under
    it) plus whatever else the phase writes."""
    root = scratch.root()
    folders = [root]
    for path in (workdir, *writable):
        real = os.path.realpath(path)
        if real != root and not real.startswith(root + "/") and real not in folders:
            folders.append(real)
    return tuple(folders)


def _wait(
    child: Started, wall: float, reader: _ResultReader, cancel: threading.Event | None = None
) -> tuple[bool, bool]:
    """Wait for the child up to the wall clock, or until `cancel` is set; then nothing of it
    stays. Returns (ended early: timed out or cancelled, the kernel killed it for memory)."""
    timed_out = False
    deadline = time.monotonic() + wall
    while True:
        left = deadline - time.monotonic()
        step = left if cancel is None else min(CANCEL_POLL_S, left)
        try:
            child.proc.wait(timeout=max(0.0, step))
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
                timed_out = True
                break
    # Whatever the child left behind (its group, setsid() escapees in the cgroup) dies now;
    # its namespaces (and the private tmpfs in them) die with their last process.
    process.kill_group(child.proc.pid)
    child.group.kill_all()
    if timed_out:
        child.proc.wait()
    reader.finish(grace_s=5)  # before cleanup() closes the fd it reads
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
        unknown = "unknown (the child did not report)"
        for name in ("filesystem", "capabilities", "seccomp", "uid"):
            setattr(isolation, name, unknown)
        made = child.spawn.namespaces.split("+") if child.spawn.namespaces else []
        if "pid" in made:
            isolation.pid, isolation.ipc = "pidns", "ipcns"
            isolation.mounts = "bwrap view"
            isolation.sockets = "not in the view"
        else:
            isolation.pid = isolation.ipc = isolation.mounts = child.spawn.ns_note
        isolation.network = "netns" if "net" in made else "none (not asked for)"
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


class _ResultReader:
    """Reads a child's result pipe on a thread of its own, and never outlives the fd.

    A reader left blocked on a closed fd (some process still held the write end when the
    grace ran out) would read from whatever pipe the next child got under the same fd
    number, and take part of that child's message: the one way we found for a candidate that
    never touched its pipe to crash on a message "not well formed" (CI, 2026-11-28, once in
    five runs). So the thread waits with select() in short steps and stops when told, and
    finish() returns only once it has.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.message = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def finish(self, grace_s: float) -> None:
        """Up to grace_s for EOF (everything the child wrote), then stop reading."""
        self._thread.join(timeout=grace_s)
        self._stop.set()
        self._thread.join()

    def _read(self) -> None:
        while len(self.message) <= _MAX_RESULT_BYTES and not self._stop.is_set():
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.2)
                if not ready:
                    continue
                chunk = os.read(self.fd, 1 << 20)
            except OSError:
                return
            if not chunk:
                return
            self.message += chunk


def _malformed(message: bytes) -> str:
    """What is wrong with a message that is not a JSON object: its size, ends, and where the
    parser stopped with the bytes around it (a flaky CI failure showed intact ends only)."""
    text = f"{len(message)} bytes, {message[:80]!r} ... {message[-80:]!r}"
    body = message.partition(b"\n")[2]
    try:
        json.loads(body)
    except ValueError as exc:
        at = getattr(exc, "pos", None)
        text += f"; {type(exc).__name__}: {exc}"
        if at is not None:
            text += f"; around it: {body[max(0, at - 60) : at + 60]!r}"
    return text


def _verify(message: bytes, key: bytes, nonce: str) -> tuple[dict | None, str]:
    """(payload, "") when authentic; (None, why) when forged; (None, "") when nothing came.
    Without a key (an untrusted phase) a well-formed message is taken as data."""
    if not message:
        return None, ""
    mac, _, body = message.partition(b"\n")
    if key:
        expected = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, expected):
            return None, "result message failed HMAC verification"
    try:
        payload = json.loads(body)
    except ValueError:
        return None, "result message is not JSON" if key else ""
    if not isinstance(payload, dict):
        return None, "result message is not an object" if key else ""
    if key and payload.get("nonce") != nonce:
        return None, "result message carries another run's nonce"
    return payload, ""
