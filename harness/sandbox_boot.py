"""First code a sandbox child runs: lock itself down, then run one phase and report over a pipe.

Runs under `python -I` before torch or any candidate code is imported, so it uses the standard
library only. Order matters: cgroup and rlimits first (bound what follows), then the network
namespace, then Landlock (after which nothing outside the scratch folder is writable, even for
root), then the phase. The parent passes its settings on stdin, never in argv or the
environment, so the HMAC key is not visible in /proc/<pid>/cmdline or environ.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import json
import os
import resource
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


def main() -> None:
    settings_file = os.environ.pop("KF_SETTINGS_FILE", "")
    if settings_file:
        with open(settings_file) as f:
            settings = json.load(f)
        os.unlink(settings_file)
    else:
        settings = json.loads(sys.stdin.buffer.read())
    os.close(0)
    key = bytes.fromhex(settings.pop("key"))
    nonce, fd = settings["nonce"], settings["fd"]
    if fd is None:  # opened now, before Landlock makes its folder read-only
        fd = os.open(settings["result_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    else:
        os.set_inheritable(fd, False)  # grandchildren (nvcc, ninja, a fork bomb) don't get it
    limits = settings["limits"]
    isolation: dict = {}
    try:
        if settings["cgroup_procs"]:
            _join_cgroups(settings["cgroup_procs"])
            isolation["cgroup"] = settings["cgroup_kind"]
        isolation["rlimits"] = _apply_rlimits(limits, settings["cuda"])
        if settings["isolate_net"]:
            isolation["network"] = _unshare_net() or "none"
        if settings["cuda"] and settings["isolate_fs"]:
            # CUDA opens its device nodes (also /dev/nvidia-uvm-tools) at init; under Landlock
            # that fails with cudaErrorOperatingSystem, so initialise first, then lock down.
            import torch  # noqa: PLC0415

            torch.cuda.init()
            torch.empty(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        if settings["isolate_fs"]:
            isolation["filesystem"] = (
                _landlock([settings["workdir"]], settings["isolate_net"], settings["isolate_net"])
                or "none"
            )
        if settings.get("undumpable"):
            _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except OSError as exc:  # a limit we asked for could not be applied: fail closed
        _send(fd, key, nonce, {"status": "infra", "error": f"sandbox setup: {exc}"})
        sys.exit(3)
    from harness import phases  # noqa: PLC0415  (imports torch: only after the lock-down)

    try:
        result = phases.run(settings["phase"], settings["job"], isolation)
        _send(fd, key, nonce, {"status": "ok", "result": result, "isolation": isolation})
    except BaseException:  # noqa: BLE001  (report the harness's own failure, then exit)
        _send(fd, key, nonce, {"status": "infra", "error": traceback.format_exc()[-4000:]})
        sys.exit(3)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: candidate atexit hooks and threads don't run
