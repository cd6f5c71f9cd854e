"""Parent side: what a child can see, as a bubblewrap command line.

Every child starts as `bwrap <view> -- [tool] python -I -c <boot>` (Debian's bubblewrap;
`KF_BWRAP` names another binary). The view is an allow-list, built on an empty tmpfs root:

- read-only: /usr and the top-level links into it, the few /etc files the loader and the
  compilers need, /sys, the interpreter and its site folders, PYTHONPATH entries, the CUDA
  toolkit, the toolchains on PATH (CC, nvcc's host compiler), the driver's libraries, and of
  this checkout only harness/ and kernels/ (never var/, media, settings or secrets);
- read-write: only what the caller names (a trusted phase's workdir and folders it writes);
  an untrusted child gets none at all;
- a private /dev (null, zero, full, random, urandom, tty, pts) plus, for a GPU phase, the
  GPU's device nodes; a new /proc of its own PID namespace;
- a private, size-capped tmpfs at /tmp (its HOME, caches and scratch) and at /dev/shm:
  writing past the cap is ENOSPC, never a full host disk;
- its own PID, IPC, UTS and cgroup namespaces, and a network namespace of its own (loopback
  only) unless the phase needs the host's (ncu);
- `--die-with-parent` and `--new-session`.

bwrap runs as root where the worker is root (no user namespace needed) and the child then
drops to an unprivileged uid itself (boot.py); as another user it makes a user namespace.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = str(Path(__file__).resolve().parent.parent.parent)

# Files of /etc a child may need: the loader's cache and config, and the alternatives links
# (/usr/bin/cc -> /etc/alternatives/cc on Debian).
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
TOP_LINKS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
# Toolchain prefixes on PATH are bound, except under these (home folders, the checkout):
PRIVATE = ("/root", "/home")


@dataclass(frozen=True)
class View:
    reads: tuple[str, ...]
    writes: tuple[str, ...] = ()
    gpu: bool = False
    own_network: bool = True
    tmp_bytes: int = 2 * 2**30
    shm_bytes: int = 256 * 2**20
    chdir: str = "/tmp"


def code_paths() -> tuple[str, ...]:
    """Of this checkout, only the code a child imports."""
    return (os.path.join(REPO_ROOT, "harness"), os.path.join(REPO_ROOT, "kernels"))


def find_bwrap() -> str | None:
    return os.environ.get("KF_BWRAP") or shutil.which("bwrap")


@functools.cache
def system_reads() -> tuple[str, ...]:
    """What every child reads: the system, the interpreter, its packages, the toolkits."""
    paths = ["/usr", *ETC, "/sys", *_python_paths(), *_toolchains()]
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    paths += [cuda, "/usr/local/nvidia", *os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)]
    paths += list(code_paths())
    found = []
    for p in paths:
        if not p or not os.path.exists(p):
            continue
        real = os.path.realpath(p)
        # A link is bound under both names (bwrap binds its target), except the top-level
        # links into /usr, which the view makes as links.
        names = (real,) if _under_top_link(p) else (p, real)
        for q in names:
            if q not in found and not _inside_checkout_but_not_code(q):
                found.append(q)
    return tuple(_outermost(found))


def _python_paths() -> list[str]:
    """The interpreter, its prefixes, their package folders and PYTHONPATH; not the folder of
    whatever script happens to run (sys.path[0]: a worker started from /tmp would bind it)."""
    exe = sys.executable
    prefixes = [sys.prefix, sys.base_prefix, os.path.dirname(exe)]
    prefixes.append(os.path.dirname(os.path.realpath(exe)))
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    packages = [
        p
        for p in sys.path
        if p and os.path.isdir(p) and os.path.basename(p) in ("site-packages", "dist-packages")
    ]
    return [p for p in (*prefixes, *extra, *packages) if not _shared_scratch(p)]


def _shared_scratch(path: str) -> bool:
    """Folders where other processes leave sockets and files: never bound as a whole."""
    real = os.path.realpath(path)
    return real in ("/", "/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm", "/dev")


def _toolchains() -> list[str]:
    """Prefixes of the programs a child runs: PATH's bin folders, CC and CXX."""
    found = []
    entries = os.environ.get("PATH", "").split(os.pathsep)
    entries += [os.path.dirname(os.environ[v]) for v in ("CC", "CXX") if os.environ.get(v)]
    for entry in entries:
        if not entry or not os.path.isdir(entry):
            continue
        prefix = os.path.dirname(entry) if os.path.basename(entry) == "bin" else entry
        if prefix in ("/", "") or prefix.startswith(PRIVATE):
            continue
        found.append(prefix)
    return found


def _under_top_link(path: str) -> bool:
    top = "/" + path.strip("/").split("/")[0]
    return top.strip("/") in TOP_LINKS and os.path.islink(top)


def _inside_checkout_but_not_code(path: str) -> bool:
    """The checkout itself is never bound, only its code (and a virtualenv inside it)."""
    if not _within(path, REPO_ROOT):
        return False
    return not any(_within(path, a) for a in (*code_paths(), sys.prefix))


def _outermost(paths: list[str]) -> list[str]:
    """Drop paths inside another one of the list (a bind covers what is under it)."""
    out: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(_within(p, q) for q in out):
            out.append(p)
    return out


@functools.cache
def gpu_devices() -> tuple[str, ...]:
    """The NVIDIA device nodes (character devices under /dev)."""
    import stat

    found = []
    for name in sorted(os.listdir("/dev")):
        if name.startswith("nvidia"):
            path = os.path.join("/dev", name)
            try:
                if stat.S_ISCHR(os.stat(path).st_mode):
                    found.append(path)
            except OSError:
                continue
    return tuple(found)


def argv(bwrap: str, view: View) -> list[str]:
    """bwrap's arguments up to (not including) the command."""
    args = [bwrap, "--die-with-parent", "--new-session"]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if view.own_network:
        args.append("--unshare-net")
    if os.geteuid() != 0:
        args.append("--unshare-user")  # the same uid inside; without root, the only way
    for name in TOP_LINKS:
        link = os.path.join("/", name)
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
    # The private filesystems first: a folder bound below /tmp must land on top of them.
    args += ["--dev", "/dev", "--proc", "/proc"]
    args += ["--size", str(view.tmp_bytes), "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--size", str(view.shm_bytes), "--perms", "1777", "--tmpfs", "/dev/shm"]
    if view.gpu:
        for node in gpu_devices():
            args += ["--dev-bind", node, node]
    binds = [(p, False) for p in view.reads] + [(p, True) for p in view.writes]
    made = {"/", "/tmp", "/dev", "/proc"}  # folders that exist in the view
    made |= {os.path.join("/", n) for n in TOP_LINKS if os.path.islink("/" + n)}
    bound: set[str] = set()  # host folders bound in: what is below them exists already
    for path, writable in sorted(binds, key=lambda b: (b[0].count("/"), b[0])):
        for parent in _parents(path):
            if parent not in made and not any(_within(parent, f) for f in bound):
                # bwrap makes missing parents 0700 as root: the child's uid could not pass.
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += ["--bind" if writable else "--ro-bind", path, path]
        made.add(path)
        bound.add(path)
    # A host socket inside a bound folder (a server's, left in a checkout or a venv) would be
    # reachable through the bind: each one is covered by /dev/null, so connect() fails.
    for sock in host_sockets():
        if any(_within(sock, f) for f in bound):
            args += ["--ro-bind", "/dev/null", sock]
    args += ["--chdir", view.chdir]
    return args


def host_sockets() -> tuple[str, ...]:
    """Pathname unix sockets bound on this host (this network namespace); read per child:
    sockets come and go."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return ()
    found = []
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith("/") and os.path.exists(fields[7]):
            found.append(os.path.realpath(fields[7]))
    return tuple(dict.fromkeys(found))


def _within(path: str, folder: str) -> bool:
    """`path` is `folder` or below it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _parents(path: str) -> list[str]:
    out = []
    p = os.path.dirname(path.rstrip("/"))
    while p not in ("/", ""):
        out.append(p)
        p = os.path.dirname(p)
    return list(reversed(out))
