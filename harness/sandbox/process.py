"""Parent side: start one sandbox child process (not yet told its job), and end it.

The command line is

    sh -c <join its cgroup, exec the rest>  bwrap <view> --  [tool]  python -I -c <boot>

The shell joins the cgroup the parent made for this child (memory and pids caps) before
anything else runs, so bwrap, the tool and every descendant are bounded; bwrap builds the
view and the namespaces (view.py); boot.py locks the child down and runs its phase.
Where bubblewrap is missing a trusted phase still runs (without the view; the isolation record
says so); an untrusted one refuses to start (parent.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from typing import IO

from harness.config import Limits
from harness.sandbox import cgroups, scratch, view
from harness.sandbox.protocol import ChildLimits, Claim, SpawnSettings, dumps
from harness.sandbox.view import REPO_ROOT

# `python -I` ignores PYTHONPATH, but a child must import the same packages as its parent (an
# operator's extra site folder, e.g. pinned wheels installed with --target, ahead of the
# system's): the parent's entries are passed on explicitly. The candidate cannot set them.
PATHS = [REPO_ROOT, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
_PRELUDE = f"import sys; sys.path[:0] = {PATHS!r}; "
BOOT = _PRELUDE + "from harness.sandbox.boot import main; main()"
# Joins the cgroup(s) named before "--", then becomes the rest of the command line.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'
UNTRUSTED_WORKDIR = "/tmp/work"  # an untrusted child's workdir: inside its private tmpfs

# Passed through when set; everything else (API keys, DATABASE_URL, REDIS_URL...) is dropped.
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CC",
    "CXX",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "TORCH_CUDA_ARCH_LIST",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)


def child_env(workdir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        HOME=workdir,
        TMPDIR=workdir,
        USER="kf-sandbox",  # getpass.getuser() (Inductor's cache) without a passwd entry
        LOGNAME="kf-sandbox",
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


# Compile-ahead work (the agent's precompile pool, the screen's compile pool) runs this much
# nicer than the children that time kernels. With every core of a 16-core H100 host compiling,
# a timing child at equal priority took ~90 us to wake from its device sync, and an honest
# Triton kernel was charged a 31 us "side stream" tail and rejected (2026-11-28).
BACKGROUND_NICE = 19


@dataclass(frozen=True)
class Config:
    """Everything a child gets before it knows its job; a spare serves only an equal one."""

    limits: Limits
    cuda: bool
    untrusted: bool  # an unprivileged uid, no host folder writable, reads restricted
    isolate_net: bool  # its own network namespace (and Landlock: no TCP)
    isolate_fs: bool  # Landlock
    isolate_ns: bool  # the bwrap view and namespaces (False only for a trusted fallback)
    reads: tuple[str, ...]  # extra host folders it reads
    writes: tuple[str, ...]  # host folders it writes (trusted only)
    env_extra: tuple[tuple[str, str], ...]
    # The allow-listed parent environment at the time (CUDA_VISIBLE_DEVICES may change).
    base_env: tuple[tuple[str, str], ...]
    python: str = sys.executable
    niceness: int = 0  # BACKGROUND_NICE for compile-ahead work; inherited by nvcc and ptxas

    def view(self, chdir: str) -> view.View:
        return view.View(
            reads=(*view.system_reads(), *self.reads),
            writes=() if self.untrusted else self.writes,
            gpu=self.cuda,
            own_network=self.isolate_net,
            tmp_bytes=self.limits.scratch_bytes,
            shm_bytes=min(self.limits.scratch_bytes, 512 * 2**20),
            chdir=chdir,
        )


class CappedOutput:
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


@dataclass(eq=False)
class Started:
    """A child process with its cgroup and pipes; it has not been told its job yet."""

    config: Config
    proc: subprocess.Popen[bytes]
    group: cgroups.CgroupSet
    read_fd: int
    output: CappedOutput
    spawn: SpawnSettings
    scratch: str | None = None  # a spare's own folder until its claim
    timer: threading.Timer | None = None

    @property
    def stdin(self) -> IO[bytes]:
        assert self.proc.stdin is not None, "a sandbox child is started with stdin=PIPE"
        return self.proc.stdin

    def cleanup(self) -> None:
        """After the child ended (or to end it): nothing of it stays behind."""
        if self.timer:
            self.timer.cancel()
        kill_group(self.proc.pid)
        self.group.kill_all()
        with contextlib.suppress(OSError):
            self.stdin.close()
        self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self.read_fd)
        self.group.remove()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def start(
    config: Config,
    workdir: str,
    *,
    warm: bool,
    idle_s: float,
    wrapper: list[str] | None = None,
    settings_path: str | None = None,
    claim: Claim | None = None,
    pass_fds: tuple[int, ...] = (),
) -> Started | str:
    """Spawn a child and hand it its spawn settings; returns why not when it cannot start."""
    limits = config.limits
    bwrap = view.find_bwrap() if config.isolate_ns else None
    if config.untrusted and bwrap is None:
        return (
            "untrusted code runs only inside bubblewrap, which is not installed "
            "(apt-get install bubblewrap, or set KF_BWRAP)"
        )
    group = cgroups.create(limits.memory_bytes, limits.max_pids, scratch.owner())
    read_fd, write_fd = os.pipe()
    if bwrap:
        namespaces, ns_note = "pid+ipc+uts+view" + ("+net" if config.isolate_net else ""), ""
    else:
        namespaces = ""
        ns_note = (
            "none (bubblewrap is not installed)" if config.isolate_ns else "none (not asked for)"
        )
    spawn = SpawnSettings(
        fd=write_fd,
        warm=warm,
        idle_s=idle_s,
        cuda=config.cuda,
        untrusted=config.untrusted,
        sandbox_uid=sandbox_uid() if config.untrusted else None,
        isolate_net=config.isolate_net,
        isolate_fs=config.isolate_fs,
        undumpable=wrapper is None,
        cgroup_kind=group.kind,
        limits=ChildLimits(
            cpu_s=limits.cpu_s,
            max_file_bytes=limits.max_file_bytes,
            max_open_files=limits.max_open_files,
            max_pids=limits.max_pids,
            memory_bytes=limits.memory_bytes,
            cgroup=bool(group.dirs),
        ),
        namespaces=namespaces,
        ns_note=ns_note,
        reads=config.view("/").reads if bwrap else (),
        writes=() if config.untrusted else config.writes,
    )
    env = child_env(workdir, dict(config.env_extra))
    argv = []
    if group.dirs:
        argv += ["/bin/sh", "-c", _JOIN, "sh", *group.procs_files, "--"]
    if bwrap:
        argv += view.argv(bwrap, config.view(workdir if not config.untrusted else "/tmp"))
        argv.append("--")
    argv += wrapper or []
    argv += [config.python, "-I", "-c", BOOT]
    nice = shutil.which("nice") if config.niceness else None
    if nice:  # before everything, so the cgroup join, bwrap and the child all run nicer
        argv = [nice, "-n", str(config.niceness), *argv]
    if settings_path:
        # A wrapper such as ncu may not forward stdin or extra fds: use private files instead.
        result_path = os.path.join(os.path.dirname(settings_path), "result")
        spawn = dataclasses.replace(spawn, fd=None, result_path=result_path)
        with open(os.open(settings_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump({"spawn": asdict(spawn), "claim": asdict(claim) if claim else None}, f)
        env["KF_SETTINGS_FILE"] = settings_path
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workdir if os.path.isdir(workdir) else "/",
            env=env,
            pass_fds=(*(() if settings_path else (write_fd,)), *pass_fds),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        group.remove()
        return f"could not start the sandbox: {exc}"
    os.close(write_fd)
    output = CappedOutput(proc.stdout, limits.output_cap_bytes)
    child = Started(config, proc, group, read_fd, output, spawn)
    if not settings_path:
        try:  # one line: fits the pipe buffer, never blocks
            child.stdin.write(dumps(spawn) + b"\n")
            child.stdin.flush()
        except OSError:
            pass  # it died at once: its result (none) says so
    return child


def sandbox_uid() -> int:
    """The unprivileged uid untrusted children run as (KF_SANDBOX_UID; nobody by default)."""
    return int(os.environ.get("KF_SANDBOX_UID", "65534"))


def hand_over(child: Started, claim: Claim | None) -> bool:
    """Give the child its job (the wrapped kind has it in its settings file already)."""
    try:
        if claim is not None:
            child.stdin.write(dumps(claim))
        child.stdin.close()
    except OSError:
        return False
    return True


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
