"""Inside the child: a seccomp filter (through libseccomp, the library made for this) that
refuses the system calls no kernel candidate or model needs and that reach beyond its own
process: tracing and reading other processes, kernel keyrings, BPF, namespaces (a new user
namespace would hand back capabilities inside it), mounts, kernel modules, io_uring (whose
operations bypass per-syscall filters). Everything else is allowed, and each refused call fails
with EPERM (clone3 with ENOSYS, so the C library falls back to clone, which is filtered by its
flags). Applied to every thread of the process (TSYNC), last before the phase runs.

Not used where a tool (compute-sanitizer, ncu) wraps the child: its injected library runs inside
the child and may need what is refused here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno

DENY = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "userfaultfd",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
_ACT_ALLOW = 0x7FFF0000
_FLTATR_CTL_TSYNC = 4
_CMP_MASKED_EQ = 7
_CLONE_NEWUSER = 0x10000000


def _errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def install() -> str:
    """Load the filter; returns "N syscalls refused" or "none (why)"."""
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return "none (libseccomp is not installed)"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        return "none (seccomp_init failed)"
    try:
        refused = 0
        rules: list[tuple[str, int, _ArgCmp | None]] = [
            (n, _errno(errno.EPERM), None) for n in DENY
        ]
        rules.append(("clone3", _errno(errno.ENOSYS), None))
        new_user = _ArgCmp(0, _CMP_MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER)
        rules.append(("clone", _errno(errno.EPERM), new_user))
        for syscall, action, cmp in rules:
            nr = lib.seccomp_syscall_resolve_name(syscall.encode())
            if nr < 0:
                continue  # not on this architecture
            args = ctypes.byref(cmp) if cmp is not None else None
            if lib.seccomp_rule_add_array(ctx, action, nr, 1 if cmp else 0, args) == 0:
                refused += 1
        lib.seccomp_attr_set(ctx, _FLTATR_CTL_TSYNC, 1)
        rc = lib.seccomp_load(ctx)
        if rc != 0:
            return f"none (seccomp_load: {rc})"
        return f"{refused} syscalls refused"
    finally:
        lib.seccomp_release(ctx)
