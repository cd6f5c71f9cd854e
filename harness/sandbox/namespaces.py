"""Parent side: the namespaces a child is started in, made by util-linux, and its mount plan.

Every child is started as

    setpriv --pdeathsig KILL -- unshare --pid --fork --kill-child --mount-proc --ipc [--net] --

(util-linux): its own PID namespace with a fresh /proc (it sees only itself and its own
children, so no other process's /proc/<pid>/environ, memory or fds), its own mount namespace
(mounts.py builds the private view inside it), its own System V IPC / POSIX message queues,
and, unless the phase needs the host network stack (ncu), its own network namespace (no TCP,
no abstract unix sockets of the host). `--kill-child` and the PID namespace end every process
of the child together; `setpriv --pdeathsig KILL` ends the child when the process that started
it dies (the thread that called run_child, for Linux: a spare started from a thread that
exits dies with it, and the next phase then starts fresh).

Not root: the same inside a user namespace that maps the caller's user to itself
(`--map-current-user`), where the host's mounts are also locked against unmounting. Where
neither works (a container without CAP_SYS_ADMIN and no user namespaces), no namespace is
made: the isolation record says "none (<why>)" and the job's page shows it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox.protocol import MountPlan

# Folders a child gets as an empty private tmpfs: where host sockets (PostgreSQL, Redis, MySQL,
# Docker, D-Bus, X11...), shared memory and other jobs' scratch files live.
COVER = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm", "/dev/mqueue", "/var/lock")


@dataclass(frozen=True)
class Support:
    """What this host lets the parent make, probed once per process."""

    unshare: tuple[str, ...]  # argv up to the namespace flags; () when none can be made
    user: bool  # a user namespace is needed (not root, or no CAP_SYS_ADMIN)
    note: str = ""  # why none can be made


@functools.cache
def support() -> Support:
    tool = shutil.which("unshare")
    if tool is None:
        return Support((), False, "util-linux unshare is not installed")
    setpriv = shutil.which("setpriv")
    head = (setpriv, "--pdeathsig", "KILL", "--") if setpriv else ()
    errors = []
    for user in (False, True):
        argv = (*head, tool, *_flags(ns=True, net=True, user=user), "true")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(str(exc))
            continue
        if done.returncode == 0:
            return Support((*head, tool), user)
        errors.append(done.stderr.strip()[-300:] or f"exit {done.returncode}")
    return Support((), False, "unshare failed: " + "; ".join(errors))


def _flags(*, ns: bool, net: bool, user: bool) -> list[str]:
    flags = ["--map-current-user"] if user else []
    if ns:
        flags += ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc"]
    if net:
        flags += ["--net"]
    return flags


def wrapper(*, ns: bool, net: bool) -> tuple[list[str], str]:
    """(argv prefix, the namespaces it makes: "pid+mount+ipc+net", "net", "" for none)."""
    sup = support()
    if not (ns or net) or not sup.unshare:
        return [], ""
    made = "+".join(n for n, on in (("pid+mount+ipc", ns), ("net", net)) if on)
    if sup.user:
        made = "user+" + made
    return [*sup.unshare, *_flags(ns=ns, net=net, user=sup.user), "--"], made


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


@functools.cache
def covered() -> tuple[str, ...]:
    """The COVER folders that exist here, as real paths (/var/run is usually /run)."""
    found: list[str] = []
    for folder in COVER:
        real = os.path.realpath(folder)
        if os.path.isdir(real) and not _under(real, found):  # /var/lock is /run/lock
            found.append(real)
    return tuple(found)


@functools.cache
def _import_paths() -> tuple[str, ...]:
    """What every child reads: the repository, the interpreter and its site folders."""
    from harness.sandbox.process import PATHS  # noqa: PLC0415  (process imports this module)

    paths = [*PATHS, *sys.path, sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)]
    paths.append(os.path.dirname(os.path.realpath(sys.executable)))
    return tuple(dict.fromkeys(os.path.realpath(p) for p in paths if p and os.path.isdir(p)))


def host_sockets() -> tuple[str, ...]:
    """Pathname unix sockets bound on this host (this network namespace), wherever they are:
    the child masks each one still in its view once the view is built. Those under a covered
    folder are listed too, because a folder bound back inside it (the code or the venv in a
    checkout under /tmp) brings its sockets back into view. Read per child: sockets come and go."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return ()
    found = []
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith("/"):
            found.append(os.path.realpath(fields[7]))
    return tuple(dict.fromkeys(found))


def plan(
    workdir: str, writable: tuple[str, ...], readable: tuple[str, ...], tmpfs_bytes: int
) -> MountPlan:
    folders = list(covered())
    writes = list(dict.fromkeys(os.path.realpath(p) for p in (workdir, *writable)))
    reads = [os.path.realpath(p) for p in (*_import_paths(), *readable) if p]
    return MountPlan(
        writable=tuple(writes),
        # A folder that is also writable (or inside one) is bound once, writable: a read-only
        # bind of the same path on top would hide the writable one (the ceilings child
        # writing the harness cache under /tmp, H100 2026-11-24).
        readable=tuple(
            p for p in dict.fromkeys(reads) if _under(p, folders) and not _under(p, writes)
        ),
        cover=tuple(folders),
        sockets=host_sockets(),
        tmpfs_bytes=tmpfs_bytes,
    )
