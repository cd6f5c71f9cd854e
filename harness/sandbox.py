"""Parent side of the sandbox: start one child per phase, bound it, kill it, read its result.

The parent never imports torch's CUDA, never imports candidate code and never trusts a result
that arrives without the per-run HMAC, nor one from a child that exited non-zero (R1.11).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
import json
import os
import secrets
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
_BOOT = (
    f"import sys; sys.path.insert(0, {REPO_ROOT!r}); from harness.sandbox_boot import main; main()"
)
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
    )
    env.update(extra or {})
    return env


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
) -> ChildResult:
    """Run `harness.phases.run(phase, job)` in a fresh, locked-down process."""
    wall = wall_s if wall_s is not None else limits.wall_s
    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    group = cgroups.create(limits.memory_bytes, limits.max_pids)
    read_fd, write_fd = os.pipe()
    settings = {
        "key": key.hex(),
        "nonce": nonce,
        "fd": write_fd,
        "phase": phase,
        "job": job,
        "workdir": workdir,
        "cuda": cuda,
        "isolate_net": isolate_net,
        "isolate_fs": isolate_fs,
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
    argv = [*(wrapper or []), sys.executable, "-I", "-c", _BOOT]
    env = child_env(workdir, env_extra)
    side_dir = None
    if wrapper:
        # A wrapper such as ncu may not forward stdin or extra fds: use private files instead.
        side_dir = tempfile.mkdtemp(prefix="kf-side-")
        settings["fd"] = None
        settings["result_path"] = os.path.join(side_dir, "result")
        settings_path = os.path.join(side_dir, "settings.json")
        with open(os.open(settings_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump(settings, f)
        env["KF_SETTINGS_FILE"] = settings_path
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            pass_fds=() if wrapper else (write_fd,),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        group.remove()
        return ChildResult(ChildStatus.INFRA, error=f"could not start the sandbox: {exc}")
    os.close(write_fd)
    output = _CappedOutput(proc.stdout, limits.output_cap_bytes)
    message = bytearray()
    reader = threading.Thread(target=_read_all, args=(read_fd, message), daemon=True)
    reader.start()
    try:
        if not wrapper:
            proc.stdin.write(json.dumps(settings).encode())
        proc.stdin.close()
    except OSError:
        pass
    timed_out = False
    try:
        proc.wait(timeout=wall)
    except subprocess.TimeoutExpired:
        timed_out = True
    # Whatever the child left behind (its group, setsid() escapees in the cgroup) dies now.
    _kill_group(proc.pid)
    group.kill_all()
    if timed_out:
        proc.wait()
    reader.join(timeout=5)
    os.close(read_fd)
    group.remove()
    wall_used = time.monotonic() - start
    text = output.text()
    # What the parent set up is known even when the child never reports (timeout, crash).
    parent_isolation = {"cgroup": group.kind if group.dirs else f"none ({group.note})"}
    base = {"returncode": proc.returncode, "output": text, "wall_s": wall_used}
    if timed_out:
        return ChildResult(
            ChildStatus.TIMEOUT,
            error=f"killed after {wall:.0f} s",
            isolation=parent_isolation,
            **base,
        )
    if side_dir:
        with contextlib.suppress(OSError):
            message = bytearray(Path(settings["result_path"]).read_bytes())
        shutil.rmtree(side_dir, ignore_errors=True)
    payload, why = _verify(bytes(message), key, nonce)
    if payload is None:
        if why:
            return ChildResult(ChildStatus.FORGED, error=why, isolation=parent_isolation, **base)
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
