"""Inside the child's own mount namespace: build its view of the filesystem (a MountPlan).

The namespaces themselves come from util-linux `unshare` (namespaces.py); this module only
makes the few mounts inside it, because a warm spare learns its workdir when it is claimed,
long after `unshare` ran. Order matters:

1. an O_PATH handle on every host folder to keep, while the host's /tmp is still in view;
2. `/` and every mount under it read-only, recursively (mount_setattr);
3. each covered folder (/tmp, /var/tmp, /run, /dev/shm...) replaced by an empty tmpfs: the host
   sockets, shared memory and other jobs' files there are gone, and what the child writes
   there dies with its namespace (a crash or SIGKILL included);
4. the kept folders bound back at their own paths (writable or read-only) through the handles;
5. every host pathname socket still in view (the parent lists them all from /proc/net/unix;
   those under a kept folder came back with it) masked by binding /dev/null over it: connect()
   then fails.

The child is still root here; afterwards it drops its capabilities (capabilities.py) and, with
Landlock, may not mount at all, so it cannot undo any of this. Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys

from harness.sandbox import cgroups
from harness.sandbox.protocol import MountPlan, claim_from

_libc = ctypes.CDLL(None, use_errno=True)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID = 0x1, 0x2
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_SYS_MOUNT_SETATTR = 442  # the same number on x86-64 and aarch64


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = [s.encode() if s else None for s in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} on {target}: {os.strerror(err)}")


def _set_attr(path: str, attr_set: int, attr_clr: int) -> None:
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    size = ctypes.sizeof(attr)
    res = _libc.syscall(
        _SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), _AT_RECURSIVE, ctypes.byref(attr), size
    )
    if res != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount_setattr({path}, recursive): {os.strerror(err)}")


def _read_only_everywhere() -> None:
    """Every mount read-only and nosuid, except /dev: at its first initialisation CUDA runs
    nvidia-modprobe, which makes /dev/nvidia-uvm(-tools) when they are missing (as on a fresh
    GPU machine: cudaErrorOperatingSystem otherwise, H100 2026-11-24). Writes under /dev are
    still Landlock's to refuse (device nodes may be written, nothing created)."""
    _set_attr("/", _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0)
    if os.path.ismount("/dev"):
        _set_attr("/dev", 0, _MOUNT_ATTR_RDONLY)


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def build(plan: MountPlan) -> tuple[str, str]:
    """Make the view; returns what the isolation record says (mounts, sockets). Raises OSError."""
    covers = [c for c in plan.cover if os.path.isdir(c) and not os.path.islink(c)]
    keep = [(p, True) for p in plan.writable] + [(p, False) for p in plan.readable]
    handles = []
    for path, writable in keep:
        # A writable folder is bound even where nothing covers it: step 2 made it read-only.
        if (writable or _under(path, covers)) and os.path.isdir(path):
            handles.append((path, writable, os.open(path, os.O_PATH | os.O_CLOEXEC)))
    try:
        try:
            _read_only_everywhere()
            root = "/ read-only"
        except OSError as exc:  # an old kernel (< 5.12): Landlock still refuses the writes
            root = f"/ writable ({exc.strerror})"
        size = f",size={plan.tmpfs_bytes}" if plan.tmpfs_bytes else ""
        for folder in covers:
            _mount("kf-private", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777{size}")
        # Parents first, so a writable folder inside a read-only one stays writable.
        for path, writable, fd in sorted(handles, key=lambda h: h[0]):
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            ro = 0 if writable else MS_RDONLY
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | ro)
    finally:
        for _, _, fd in handles:
            os.close(fd)
    masked = 0
    for sock in plan.sockets:
        try:
            if not stat.S_ISSOCK(os.stat(sock).st_mode):
                continue
        except OSError:
            continue  # gone, or hidden by a covered folder's tmpfs: not reachable anyway
        _mount("/dev/null", sock, None, MS_BIND)
        masked += 1
    return (
        f"private {', '.join(covers)}; {root}",
        f"host pathname sockets hidden ({masked} still in view masked)",
    )


def exec_in_view() -> None:
    """`python -I -c ...exec_in_view() TOOL ARGS...`: build the view, then become the tool.

    For a child wrapped by a tool (compute-sanitizer, ncu): the tool's front end and the child
    it starts must share one view, so the view is made before the tool starts, here (and the
    tool joins the child's cgroup first: it is bounded too, and /sys is read-only after). The
    plan is in the wrapped child's private settings file (KF_SETTINGS_FILE)."""
    with open(os.environ["KF_SETTINGS_FILE"]) as f:
        settings = json.load(f)
    if "mount" not in settings["spawn"]["namespaces"].split("+"):
        raise SystemExit("refusing to build a mount view outside a mount namespace of its own")
    cgroups.join(settings["spawn"]["cgroup_procs"])
    plan = claim_from(settings["claim"]).plan
    if plan is None:
        raise SystemExit("refusing to build a mount view without a mount plan")
    os.environ["KF_VIEW_NOTE"] = json.dumps(build(plan))
    os.execvp(sys.argv[1], sys.argv[1:])
