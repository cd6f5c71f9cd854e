"""Parent side of the sandbox: start one child per phase, bound it, kill it, read its result.

The parent never imports torch's CUDA, never imports candidate code and never trusts a result
that arrives without the per-run HMAC, nor one from a child that exited non-zero (R1.11).
A child may have been started ahead of time as a warm spare (see the end of this module); it
still serves one phase only.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import hashlib
import hmac
import json
import logging
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import cgroups
from harness.config import Limits

REPO_ROOT = str(Path(__file__).resolve().parent.parent)
# `python -I` ignores PYTHONPATH, but a child must import the same packages as its parent (an
# operator's extra site folder, e.g. pinned wheels installed with --target, ahead of the
# system's): the parent's entries are passed on explicitly. The candidate cannot set them.
_PATHS = [REPO_ROOT, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
_BOOT = f"import sys; sys.path[:0] = {_PATHS!r}; from harness.sandbox_boot import main; main()"
_MAX_RESULT_BYTES = 64 * 2**20

# Passed through when set; everything else (API keys, DATABASE_URL, REDIS_URL...) is dropped.
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "TORCH_CUDA_ARCH_LIST",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)


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
    output: str = ""  # captured stdout+stderr, head and tail, size-capped
    wall_s: float = 0.0
    isolation: dict = field(default_factory=dict)
    error: str = ""
    pid: int | None = None  # the child's process id
    spare: bool = False  # it was a warm spare, started before this phase was asked for


class _CappedOutput:
    """Drains a stream, keeping the first and last `cap/2` bytes so a flood cannot hurt us."""

    def __init__(self, stream, cap: int) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.half = cap // 2
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            if len(self.head) < self.half:
                take = self.half - len(self.head)
                self.head += chunk[:take]
                chunk = chunk[take:]
            self.tail += chunk
            if len(self.tail) > self.half:
                excess = len(self.tail) - self.half
                self.dropped += excess
                del self.tail[:excess]

    def text(self) -> str:
        self.thread.join(timeout=2)
        middle = f"\n[... {self.dropped} bytes dropped ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode(errors="replace")


def child_env(workdir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        HOME=workdir,
        TMPDIR=workdir,
        TRITON_CACHE_DIR=os.path.join(workdir, "triton-cache"),
        TORCH_EXTENSIONS_DIR=os.path.join(workdir, "torch-extensions"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(workdir, "inductor-cache"),
        TRITON_HOME=workdir,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"),
        # numpy's OpenBLAS starts its thread pool when torch imports numpy. In a warm spare
        # that happens before Landlock, which does not cover threads that already exist.
        OPENBLAS_NUM_THREADS="1",
    )
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class _Config:
    """Everything a child gets before it knows its job; a spare serves only an equal one."""

    limits: Limits
    cuda: bool
    isolate_net: bool
    isolate_fs: bool
    env_extra: tuple[tuple[str, str], ...]
    # The allow-listed parent environment at the time (CUDA_VISIBLE_DEVICES may change).
    base_env: tuple[tuple[str, str], ...]
    python: str = sys.executable

    @classmethod
    def of(cls, limits, cuda, isolate_net, isolate_fs, env_extra) -> _Config:
        base = child_env("/kf-workdir")  # the workdir-derived values are set at the claim
        return cls(
            limits,
            cuda,
            isolate_net,
            isolate_fs,
            tuple(sorted((env_extra or {}).items())),
            tuple(sorted(base.items())),
        )


@dataclass(eq=False)
class _Started:
    """A child process with its cgroup and pipes; it has not been told its job yet."""

    config: _Config
    proc: subprocess.Popen
    group: cgroups.CgroupSet
    read_fd: int
    output: _CappedOutput
    scratch: str | None = None  # a spare's own HOME and cwd until its claim
    timer: threading.Timer | None = None

    def cleanup(self) -> None:
        """After the child ended (or to end it): nothing of it stays behind."""
        if self.timer:
            self.timer.cancel()
        _kill_group(self.proc.pid)
        self.group.kill_all()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self.read_fd)
        self.group.remove()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _start(
    config: _Config,
    workdir: str,
    *,
    warm: bool,
    wrapper: list[str] | None = None,
    settings_path: str | None = None,
    claim: dict | None = None,
) -> _Started | str:
    """Spawn a child and hand it its spawn settings; returns why not when it cannot start."""
    limits = config.limits
    group = cgroups.create(limits.memory_bytes, limits.max_pids)
    read_fd, write_fd = os.pipe()
    spawn = {
        "fd": write_fd,
        "warm": warm,
        "idle_s": spare_idle_s() + 30,  # the parent drops it at spare_idle_s(): a backstop
        "cuda": config.cuda,
        "isolate_net": config.isolate_net,
        "isolate_fs": config.isolate_fs,
        "undumpable": wrapper is None,
        "cgroup_procs": group.procs_files,
        "cgroup_kind": group.kind,
        "limits": {
            "cpu_s": limits.cpu_s,
            "max_file_bytes": limits.max_file_bytes,
            "max_open_files": limits.max_open_files,
            "max_pids": limits.max_pids,
            "memory_bytes": limits.memory_bytes,
            "cgroup": bool(group.dirs),
        },
    }
    env = child_env(workdir, dict(config.env_extra))
    if settings_path:
        # A wrapper such as ncu may not forward stdin or extra fds: use private files instead.
        spawn.update(fd=None, result_path=os.path.join(os.path.dirname(settings_path), "result"))
        with open(os.open(settings_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump({**spawn, **(claim or {})}, f)
        env["KF_SETTINGS_FILE"] = settings_path
    try:
        proc = subprocess.Popen(
            [*(wrapper or []), config.python, "-I", "-c", _BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            pass_fds=() if settings_path else (write_fd,),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        group.remove()
        return f"could not start the sandbox: {exc}"
    os.close(write_fd)
    child = _Started(
        config, proc, group, read_fd, _CappedOutput(proc.stdout, limits.output_cap_bytes)
    )
    if not settings_path:
        try:  # one short line: fits the pipe buffer, never blocks
            proc.stdin.write(json.dumps(spawn).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass  # it died at once: its result (none) says so
    return child


def _hand_over(child: _Started, claim: dict | None) -> bool:
    """Give the child its job (the wrapped kind has it in its settings file already)."""
    try:
        if claim is not None:
            child.proc.stdin.write(json.dumps(claim).encode())
        child.proc.stdin.close()
    except OSError:
        return False
    return True


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
    env_extra: dict[str, str] | None = None,
    wrapper: list[str] | None = None,
    prestart: bool = False,
    spares: bool = True,
) -> ChildResult:
    """Run `harness.phases.run(phase, job)` in a fresh, locked-down process.

    The process is a warm spare of the same configuration when one waits (see _SparePool);
    `prestart` leaves a spare behind for the caller's next phase; spares=False never claims
    one (the retry after a spare died)."""
    wall = wall_s if wall_s is not None else limits.wall_s
    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    config = _Config.of(limits, cuda, isolate_net, isolate_fs, env_extra)
    claim = {
        "key": key.hex(),
        "nonce": nonce,
        "phase": phase,
        "job": job,
        "workdir": workdir,
        "env": child_env(workdir, env_extra),
    }
    # Only where Landlock confines every phase: it also stops a candidate from tracing or
    # reading the spare that waits beside it for the next (trusted) phase.
    use_spares = spares and wrapper is None and isolate_fs and spares_enabled()
    side_dir = tempfile.mkdtemp(prefix="kf-side-") if wrapper else None
    start = time.monotonic()
    child = _pool.claim(config) if use_spares else None
    spare = child is not None
    if spare and not _hand_over(child, claim):  # it died just now: never fail because of it
        child.cleanup()
        child, spare = None, False
    if child is None:
        settings_path = os.path.join(side_dir, "settings.json") if side_dir else None
        child = _start(
            config, workdir, warm=False, wrapper=wrapper, settings_path=settings_path, claim=claim
        )
        if isinstance(child, str):
            if side_dir:
                shutil.rmtree(side_dir, ignore_errors=True)
            return ChildResult(ChildStatus.INFRA, error=child)
        _hand_over(child, None if wrapper else claim)  # a failure shows as a crash below
    proc = child.proc
    message = bytearray()
    reader = threading.Thread(target=_read_all, args=(child.read_fd, message), daemon=True)
    reader.start()
    if use_spares and prestart:
        _pool.fill(config)  # its start-up overlaps with this phase
    timed_out = False
    try:
        proc.wait(timeout=wall)
    except subprocess.TimeoutExpired:
        timed_out = True
    # Whatever the child left behind (its group, setsid() escapees in the cgroup) dies now.
    _kill_group(proc.pid)
    child.group.kill_all()
    if timed_out:
        proc.wait()
    reader.join(timeout=5)
    child.cleanup()
    wall_used = time.monotonic() - start
    text = child.output.text()
    group = child.group
    # What the parent set up is known even when the child never reports (timeout, crash).
    parent_isolation = {"cgroup": group.kind if group.dirs else f"none ({group.note})"}
    base = {
        "returncode": proc.returncode,
        "output": text,
        "wall_s": wall_used,
        "pid": proc.pid,
        "spare": spare,
    }
    if timed_out:
        return ChildResult(
            ChildStatus.TIMEOUT,
            error=f"killed after {wall:.0f} s",
            isolation=parent_isolation,
            **base,
        )
    if side_dir:
        with contextlib.suppress(OSError):
            message = bytearray(Path(side_dir, "result").read_bytes())
        shutil.rmtree(side_dir, ignore_errors=True)
    payload, why = _verify(bytes(message), key, nonce)
    if payload is None:
        if why:
            return ChildResult(ChildStatus.FORGED, error=why, isolation=parent_isolation, **base)
        if spare:
            # A spare can die between saying "ready" and its claim (killed from outside; H200,
            # 2026-11-22): that must not read as the job's crash. The phase runs once more in
            # a fresh child, whose verdict stands.
            return run_child(
                phase,
                job,
                workdir,
                limits=limits,
                wall_s=wall_s,
                cuda=cuda,
                isolate_net=isolate_net,
                isolate_fs=isolate_fs,
                env_extra=env_extra,
                prestart=prestart,
                spares=False,
            )
        sig = -proc.returncode if proc.returncode and proc.returncode < 0 else None
        what = f"killed by signal {signal.Signals(sig).name}" if sig else f"exit {proc.returncode}"
        return ChildResult(
            ChildStatus.CRASH,
            error=f"sandbox died ({what}) before reporting",
            isolation=parent_isolation,
            **base,
        )
    isolation = {**parent_isolation, **payload.get("isolation", {})}
    if payload.get("status") == "infra":
        return ChildResult(
            ChildStatus.INFRA, error=payload.get("error", ""), isolation=isolation, **base
        )
    if proc.returncode != 0:
        return ChildResult(
            ChildStatus.CRASH,
            result=payload.get("result", {}),
            error=f"sandbox exited {proc.returncode} after reporting",
            isolation=isolation,
            **base,
        )
    return ChildResult(ChildStatus.OK, payload.get("result", {}), isolation=isolation, **base)


def _read_all(fd: int, into: bytearray) -> None:
    while len(into) <= _MAX_RESULT_BYTES:
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError:
            return
        if not chunk:
            return
        into += chunk


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


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


# ---------------------------------------------------------------- warm spares
#
# Every child pays for a fresh interpreter and `import torch` (seconds on a GPU box) before
# its phase starts. A spare is a child started ahead of time with the configuration of the
# phase that just began: it joins its own cgroup, sets its rlimits and network namespace,
# imports torch and triton, and then waits. The next run_child with an equal configuration
# claims it: only then does it get its job, key, nonce, workdir and environment over stdin,
# and only then does it apply Landlock for that workdir, before any job code runs. It serves
# that one phase and exits, like any child: no process ever runs two jobs.

READY_WAIT_S = 60.0  # a claimed spare still importing is waited for this long, then dropped

_log = logging.getLogger(__name__)


def max_spares() -> int:
    """Idle spares kept at most, over all configurations (KF_SANDBOX_SPARES; 0 turns them off:
    every child is started fresh, as before). Two by default: a phase that ran in a spare is
    often short (oracle_check), so one spare started at its beginning would still be importing
    when the next phase asks (back-to-back interpreter evaluations of a Triton rmsnorm on 2
    CPU cores, 2026-11-22: 7.9 s each with none, 6.3 with one, 5.1 with two)."""
    return max(0, int(os.environ.get("KF_SANDBOX_SPARES", "2")))


def spares_enabled() -> bool:
    return max_spares() > 0


def spare_idle_s() -> float:
    """How long an unclaimed spare may wait before it is killed (KF_SANDBOX_SPARE_IDLE_S)."""
    return float(os.environ.get("KF_SANDBOX_SPARE_IDLE_S", "120"))


class _SparePool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Started] = []

    def claim(self, config: _Config) -> _Started | None:
        """A ready spare of exactly this configuration, or None (then start a fresh child)."""
        with self.lock:
            spare = next((s for s in self.idle if s.config == config), None)
            if spare is None:
                return None
            self.idle.remove(spare)
        spare.timer.cancel()
        why = _wait_ready(spare)
        if why:
            _log.warning("sandbox spare %d not used: %s", spare.proc.pid, why)
            spare.cleanup()
            return None
        return spare

    def fill(self, config: _Config) -> None:
        """Keep max_spares() spares of this configuration waiting."""
        limit = max_spares()
        with self.lock:
            missing = limit - sum(s.config == config for s in self.idle)
        for _ in range(missing):
            scratch = tempfile.mkdtemp(prefix="kf-spare-")  # its HOME and cwd until the claim
            spare = _start(config, scratch, warm=True)
            if isinstance(spare, str):
                shutil.rmtree(scratch, ignore_errors=True)
                return
            spare.scratch = scratch
            spare.timer = threading.Timer(spare_idle_s(), self.drop, (spare,))
            spare.timer.daemon = True
            spare.timer.start()
            surplus = []
            with self.lock:
                self.idle.append(spare)
                while len(self.idle) > limit:  # other configurations' spares go first
                    old = next((s for s in self.idle if s.config != config), self.idle[0])
                    self.idle.remove(old)
                    surplus.append(old)
            for old in surplus:
                old.cleanup()

    def drop(self, spare: _Started) -> None:
        """Kill an idle spare (its idle time ran out); a claimed one is left alone."""
        with self.lock:
            if spare not in self.idle:
                return
            self.idle.remove(spare)
        spare.cleanup()

    def shutdown(self) -> None:
        """Kill every idle spare (at interpreter exit, and for tests)."""
        with self.lock:
            spares, self.idle = self.idle, []
        for spare in spares:
            spare.cleanup()

    def forget_after_fork(self) -> None:
        """A forked process must not claim its parent's spares, nor keep their pipes open
        (a spare ends when its stdin closes)."""
        self.lock = threading.Lock()
        spares, self.idle = self.idle, []
        for spare in spares:
            with contextlib.suppress(OSError):
                spare.proc.stdin.close()
            with contextlib.suppress(OSError):
                os.close(spare.read_fd)

    def pids(self) -> list[int]:
        with self.lock:
            return [s.proc.pid for s in self.idle]


def _wait_ready(spare: _Started) -> str:
    """ "" once the spare said "R" and still lives; otherwise why it cannot be used."""
    ready, _, _ = select.select([spare.read_fd], [], [], READY_WAIT_S)
    if not ready:
        return f"not ready after {READY_WAIT_S:.0f} s"
    first = os.read(spare.read_fd, 1)
    if first != b"R":
        detail = os.read(spare.read_fd, 4096).decode(errors="replace") if first else ""
        return f"it said: {detail}" if detail else "it died while waiting"
    if spare.proc.poll() is not None:
        return f"it exited ({spare.proc.returncode}) while waiting"
    return ""


_pool = _SparePool()
atexit.register(_pool.shutdown)
os.register_at_fork(after_in_child=_pool.forget_after_fork)
