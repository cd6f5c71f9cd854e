"""First code a sandbox child runs: lock itself down, then run one phase and report over a pipe.

Runs under `python -I` before torch or any candidate code is imported, so it uses the standard
library only. Order matters: cgroup and rlimits first (bound what follows), then the network
namespace, then Landlock (after which nothing outside the scratch folder is writable, even for
root), then the phase. The parent passes its settings on stdin, never in argv or the
environment, so the HMAC key is not visible in /proc/<pid>/cmdline or environ.

Settings come in two parts: one line of spawn settings (cgroup, limits, network: the same for
every job of a configuration), then the job (phase, job, workdir, environment, key, nonce).
A fresh child gets both at once. A warm spare (harness/sandbox.py) gets the first, locks
what it can, imports torch and triton, says "R" on the result pipe and waits; the job comes
when the parent claims it, and Landlock (the job's workdir) is applied only then, before the
phase runs. Either way one process serves exactly one phase.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import resource
import select
import sys
import traceback

_libc = ctypes.CDLL(None, use_errno=True)

# Landlock syscall numbers and flags (same on x86-64 and aarch64; Linux uapi landlock.h).
_SYS_CREATE, _SYS_ADD, _SYS_RESTRICT = 444, 445, 446
_FS_WRITE_FILE = 1 << 1
_FS_WRITE_RIGHTS = [1 << i for i in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12)]  # write, remove, make*
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_DUMPABLE = 38, 4
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _apply_rlimits(limits: dict, cuda: bool) -> list[str]:
    applied = []
    for name, value in (
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_FSIZE", limits["max_file_bytes"]),
        ("RLIMIT_NOFILE", limits["max_open_files"]),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
        applied.append(name)
    if os.getuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_pids"], limits["max_pids"]))
        applied.append("RLIMIT_NPROC")
    if not cuda and not limits.get("cgroup"):
        # Only without CUDA: RLIMIT_AS makes cudaGetDeviceCount fail (RELIABILITY 3.3).
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
        applied.append("RLIMIT_AS")
    return applied


def _join_cgroups(procs_files: list[str]) -> None:
    for path in procs_files:
        with open(path, "w") as f:
            f.write(str(os.getpid()))


def _unshare_net() -> str:
    if _libc.unshare(_CLONE_NEWNET) == 0:
        return "netns"
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
        return "userns+netns"
    return ""


def _landlock(writable: list[str], block_tcp: bool, scope: bool) -> str:
    abi = _libc.syscall(_SYS_CREATE, None, 0, 1)
    if abi < 1:
        return ""
    rights = sum(_FS_WRITE_RIGHTS)
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    attr = _RulesetAttr(rights, 0, 0)
    size = ctypes.sizeof(ctypes.c_uint64)
    if block_tcp and abi >= 4:
        attr.net = _NET_BIND_TCP | _NET_CONNECT_TCP  # no rules: no TCP at all
        size = 2 * ctypes.sizeof(ctypes.c_uint64)
    if scope and abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL  # cannot signal the parent
        size = ctypes.sizeof(_RulesetAttr)
    fd = _libc.syscall(_SYS_CREATE, ctypes.byref(attr), size, 0)
    if fd < 0:
        return ""
    file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
    # Device nodes (CUDA opens /dev/nvidia* read-write; /dev/null) may be written, not created.
    rules = [(p, rights) for p in writable] + [("/dev/shm", rights), ("/dev", file_rights)]
    for path, allowed in rules:
        try:
            pfd = os.open(path, os.O_PATH)
        except OSError:
            continue
        rule = _PathBeneath(allowed, pfd)
        _libc.syscall(_SYS_ADD, fd, 1, ctypes.byref(rule), 0)
        os.close(pfd)
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    ok = _libc.syscall(_SYS_RESTRICT, fd, 0) == 0
    os.close(fd)
    return f"landlock-abi{abi}" if ok else ""


def _send(fd: int, key: bytes, nonce: str, payload: dict) -> None:
    payload["nonce"] = nonce
    body = json.dumps(payload, default=str).encode()
    mac = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
    data = mac + b"\n" + body
    while data:
        n = os.write(fd, data)
        data = data[n:]
    os.close(fd)


class _Stdin:
    """Unbuffered reads of fd 0, so select() on it tells the truth about what is still to come."""

    def __init__(self) -> None:
        self.buf = b""

    def line(self) -> bytes:
        while b"\n" not in self.buf:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def rest(self, wait_s: float | None = None) -> bytes:
        """Everything up to EOF; b"" when nothing arrived within `wait_s`."""
        if wait_s is not None and not self.buf:
            ready, _, _ = select.select([0], [], [], wait_s)
            if not ready:
                return b""
        while chunk := os.read(0, 1 << 20):
            self.buf += chunk
        data, self.buf = self.buf, b""
        return data


def _lock_process(spawn: dict, isolation: dict) -> None:
    """What is the same for every job of this spawn configuration: cgroup, rlimits, netns.

    Done before anything is imported (a warm spare imports torch afterwards), and while the
    process has one thread, which unshare(CLONE_NEWUSER) needs."""
    if spawn["cgroup_procs"]:
        _join_cgroups(spawn["cgroup_procs"])
        isolation["cgroup"] = spawn["cgroup_kind"]
    isolation["rlimits"] = _apply_rlimits(spawn["limits"], spawn["cuda"])
    if spawn["isolate_net"]:
        isolation["network"] = _unshare_net() or "none"


def _lock_job(spawn: dict, workdir: str, isolation: dict) -> None:
    """What depends on the job (Landlock's writable folder), applied before any job code."""
    if spawn["cuda"] and spawn["isolate_fs"]:
        # CUDA opens its device nodes (also /dev/nvidia-uvm-tools) at init; under Landlock
        # that fails with cudaErrorOperatingSystem, so initialise first, then lock down.
        import torch  # noqa: PLC0415

        torch.cuda.init()
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    if spawn["isolate_fs"]:
        isolation["filesystem"] = (
            _landlock([workdir], spawn["isolate_net"], spawn["isolate_net"]) or "none"
        )
    if spawn.get("undumpable"):
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _warm_up(result_fd: int) -> str:
    """A spare imports what every phase imports while it waits; "" when it is fit to serve.

    Landlock (applied at the claim) restricts the calling thread and threads it starts later,
    not threads that already exist, and it does not revoke write access through files that are
    already open. So a spare that ends up with a second thread (numpy's OpenBLAS pool unless
    OPENBLAS_NUM_THREADS=1; CUDA, which must not start before the claim) or a writable fd, or
    that finds no Landlock at all, is not used: the parent starts a fresh child instead."""
    try:
        import torch  # noqa: F401, PLC0415

        with contextlib.suppress(ImportError):
            import triton  # noqa: F401, PLC0415
            import triton.language  # noqa: F401, PLC0415
        from harness import phases  # noqa: F401, PLC0415
    except Exception as exc:  # noqa: BLE001  (a fresh child will report it properly)
        return f"import failed: {exc!r}"
    if _libc.syscall(_SYS_CREATE, None, 0, 1) < 1:
        # Without Landlock the phase that runs beside the spare could ptrace it.
        return "no Landlock on this kernel"
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        return f"{threads} threads after import"
    for name in os.listdir("/proc/self/fd"):
        if int(name) in (0, 1, 2, result_fd):
            continue
        try:
            with open(f"/proc/self/fdinfo/{name}") as f:
                flags = int(f.readline().split()[1], 8)
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the fd of the directory listing itself, closed by now
            continue
        if flags & (os.O_WRONLY | os.O_RDWR):
            return f"writable fd {name} ({target}) open after import"
    return ""


def main() -> None:
    sys.dont_write_bytecode = True  # `-I` ignores PYTHONDONTWRITEBYTECODE; no .pyc in the venv
    settings_file = os.environ.pop("KF_SETTINGS_FILE", "")
    stdin = _Stdin()
    if settings_file:  # a wrapper (ncu) child: spawn and job settings in one private file
        with open(settings_file) as f:
            spawn = claim = json.load(f)
        os.unlink(settings_file)
    else:  # first line: the spawn settings; the job (key, nonce, workdir...) follows later
        spawn, claim = json.loads(stdin.line()), None
    fd = spawn["fd"]
    if fd is None:  # opened now, before Landlock makes its folder read-only
        fd = os.open(spawn["result_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    else:
        os.set_inheritable(fd, False)  # grandchildren (nvcc, ninja, a fork bomb) don't get it
    isolation: dict = {}
    setup_error = ""
    try:
        _lock_process(spawn, isolation)
    except OSError as exc:  # a limit we asked for could not be applied: fail closed
        setup_error = str(exc)
    if spawn.get("warm"):
        unfit = f"sandbox setup: {setup_error}" if setup_error else _warm_up(fd)
        if unfit:  # the parent reads why, logs it and starts a fresh child instead
            os.write(fd, b"X" + unfit.encode()[:2000])
            os._exit(0)
        os.write(fd, b"R")
        # Idle until claimed. EOF (the parent died or dropped us) or a long wait ends it.
        data = stdin.rest(wait_s=spawn["idle_s"])
        if not data:
            os._exit(0)
        claim = json.loads(data)
        # The job's own environment (HOME, TMPDIR, caches: all under its workdir) replaces the
        # spare's placeholder one before any job code runs.
        os.environ.clear()
        os.environ.update(claim["env"])
        if "tempfile" in sys.modules:
            sys.modules["tempfile"].tempdir = None
    elif claim is None:
        claim = json.loads(stdin.rest())
    os.close(0)
    key = bytes.fromhex(claim.pop("key"))
    nonce = claim["nonce"]
    try:
        if setup_error:
            raise OSError(setup_error)
        os.chdir(claim["workdir"])  # a spare still sits in its placeholder folder
        _lock_job(spawn, claim["workdir"], isolation)
    except OSError as exc:  # a limit we asked for could not be applied: fail closed
        _send(fd, key, nonce, {"status": "infra", "error": f"sandbox setup: {exc}"})
        sys.exit(3)
    isolation["prestarted"] = bool(spawn.get("warm"))
    from harness import phases  # noqa: PLC0415  (imports torch: only after the lock-down)

    try:
        result = phases.run(claim["phase"], claim["job"], isolation)
        _send(fd, key, nonce, {"status": "ok", "result": result, "isolation": isolation})
    except BaseException:  # noqa: BLE001  (report the harness's own failure, then exit)
        _send(fd, key, nonce, {"status": "infra", "error": traceback.format_exc()[-4000:]})
        sys.exit(3)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: candidate atexit hooks and threads don't run
