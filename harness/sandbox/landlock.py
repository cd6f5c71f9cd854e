"""Inside the child: Landlock (Linux >= 5.13). Nothing writable outside the workdir (also for
root), no TCP (ABI >= 4), and (ABI >= 6) no abstract unix socket or signal reaching a process
outside the child's own domain. Standard library only; syscalls through ctypes.

Landlock restricts the calling thread and the threads it starts later; it does not revoke
access through files that are already open (boot.py refuses a spare that has either).
A Landlock-restricted process may not mount or unmount, so the mount view stays as built.
"""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)

# Syscall numbers and flags (the same on x86-64 and aarch64; Linux uapi landlock.h).
_SYS_CREATE, _SYS_ADD, _SYS_RESTRICT = 444, 445, 446
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_READ_RIGHTS = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FS_WRITE_RIGHTS = [1 << i for i in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12)]  # write, remove, make*
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_NO_NEW_PRIVS = 38


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version; < 1 when there is none."""
    return _libc.syscall(_SYS_CREATE, None, 0, 1)


def restrict(
    writable: list[str], block_tcp: bool, scope: bool, readable: list[str] | None = None
) -> str:
    """Apply the ruleset to this process; returns "landlock-abiN", or "" when it could not.
    With `readable`, reads are restricted too: only those folders (and the writable ones)."""
    version = abi()
    if version < 1:
        return ""
    rights = sum(_FS_WRITE_RIGHTS)
    if readable is not None:
        rights |= _FS_READ_RIGHTS
    if version >= 2:
        rights |= _FS_REFER
    if version >= 3:
        rights |= _FS_TRUNCATE
    attr = _RulesetAttr(rights, 0, 0)
    size = ctypes.sizeof(ctypes.c_uint64)
    if block_tcp and version >= 4:
        attr.net = _NET_BIND_TCP | _NET_CONNECT_TCP  # no rules: no TCP at all
        size = 2 * ctypes.sizeof(ctypes.c_uint64)
    if scope and version >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL  # cannot signal the parent
        size = ctypes.sizeof(_RulesetAttr)
    fd = _libc.syscall(_SYS_CREATE, ctypes.byref(attr), size, 0)
    if fd < 0:
        return ""
    file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if version >= 3 else 0)
    # Device nodes (CUDA opens /dev/nvidia* read-write; /dev/null) may be written, not created.
    rules = [(p, rights) for p in writable] + [("/dev/shm", rights), ("/dev", file_rights)]
    if readable is not None:
        dev = file_rights | _FS_READ_RIGHTS
        rules[-1] = ("/dev", dev)
        rules += [(p, _FS_READ_RIGHTS) for p in (*readable, "/proc", "/sys")]
    file_only = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
    for path, allowed in rules:
        try:
            pfd = os.open(path, os.O_PATH)
        except OSError:
            continue
        if not os.path.isdir(path):  # a file's rule may only hold file rights
            allowed &= file_only
        rule = _PathBeneath(allowed, pfd)
        _libc.syscall(_SYS_ADD, fd, 1, ctypes.byref(rule), 0)
        os.close(pfd)
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    ok = _libc.syscall(_SYS_RESTRICT, fd, 0) == 0
    os.close(fd)
    if not ok:
        return ""
    return f"landlock-abi{version}" + (" (reads too)" if readable is not None else "")
