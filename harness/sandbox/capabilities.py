"""Inside the child: give up every capability and set no_new_privs. Standard library only.

The child runs as the caller's user (root on our machines). After its mount view is built
it needs no privilege: without CAP_SYS_ADMIN it cannot unmount the private /tmp to reach the
host's, without CAP_SYS_PTRACE / CAP_DAC_OVERRIDE it cannot trace or read other users'
processes and files, and with an empty bounding set and no_new_privs no program it runs
(setuid or not) gets any back. Files owned by its own uid stay writable where the mounts and
Landlock allow it.
"""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)

_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4
_CAPABILITY_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def undumpable() -> bool:
    """Make the calling process non-dumpable: its /proc/<pid>/environ, mem and maps then need
    CAP_SYS_PTRACE, which every sandbox child has dropped. For the processes that hold the
    worker's secrets (the one that evaluates, the Celery worker), this is the barrier behind a
    child's PID namespace where a child must run without one (CUDA refusing the namespaces, a
    container without CAP_SYS_ADMIN). Inherited across fork, reset by exec."""
    return _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def no_new_privs() -> bool:
    return _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0


def _drop_bounding_set() -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)


def drop_all() -> str:
    """Empty the bounding, ambient, effective, permitted and inheritable sets."""
    _drop_bounding_set()  # EPERM without CAP_SETPCAP: checked below
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _Header(_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        return f"none (capset: {os.strerror(ctypes.get_errno())})"
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    left = [k for k in ("CapEff", "CapPrm", "CapBnd") if int(status.get(k, "0").strip(), 16)]
    return f"none (still held: {', '.join(left)})" if left else "dropped"


def become(uid: int) -> str:
    """Drop to `uid` (and gid = uid, no supplementary groups) for good; from root only.

    The bounding set is emptied first (it needs CAP_SETPCAP, which setresuid() takes away);
    setresuid() from root to another uid then clears every remaining capability. Returns what
    the isolation record says."""
    if os.getuid() != 0:
        return f"none (the worker's own uid {os.getuid()}: not root, so it cannot switch)"
    _drop_bounding_set()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
        raise OSError(f"could not become uid {uid}")
    return f"{uid} (owns nothing of the server's)"
