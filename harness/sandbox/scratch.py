"""Parent side: the harness's temporary folders, and the removal of those a dead process left
(and of its cgroups).

Each folder is named `kf-<kind>-<pid>-<start time>-<random>` after the process that made it.
Whatever a child writes outside its workdir lands in its private tmpfs and dies with its
namespace; a folder made here is removed by its maker when done, and, if the maker was killed
first (SIGKILL, OOM, a worker restart), by the next process that makes one: `sweep()` removes
every harness folder whose maker no longer runs (the start time tells a reused pid apart).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from harness.sandbox import cgroups

_NAME = re.compile(r"^kf-[a-z]+-(\d+)-(\d+)-")
_SWEEP_EVERY_S = 60.0
_last_sweep = [0.0]
_lock = threading.Lock()


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time in clock ticks


@functools.cache
def owner() -> str:
    """ "<pid>-<start time>" of this process: the tag of the folders and cgroups it makes."""
    return f"{os.getpid()}-{_start_ticks(os.getpid()) or 0}"


os.register_at_fork(after_in_child=owner.cache_clear)


def alive(pid: int, ticks: int) -> bool:
    """Is the process that made a tagged folder or group still running?"""
    now = _start_ticks(pid)
    return now is not None and (now == ticks or not ticks)


def root() -> str:
    """Where every harness folder lives (KF_SCRATCH_DIR, else <tmp>/kf-harness-<uid>): trusted
    children get this one folder writable, never the host's /tmp with its sockets."""
    path = os.environ.get("KF_SCRATCH_DIR") or os.path.join(
        tempfile.gettempdir(), f"kf-harness-{os.getuid()}"
    )
    os.makedirs(path, mode=0o700, exist_ok=True)
    return os.path.realpath(path)


def make(kind: str) -> str:
    """A fresh private folder (0700) of this process; also sweeps now and then."""
    maybe_sweep()
    return tempfile.mkdtemp(prefix=f"kf-{kind}-{owner()}-", dir=root())


def sweep(folder: str | None = None) -> list[str]:
    """Remove the harness folders under `folder` (the scratch root) whose maker is gone."""
    root_dir = folder or root()
    removed: list[str] = []
    try:
        names = os.listdir(root_dir)
    except OSError:
        return removed
    for name in names:
        m = _NAME.match(name)
        if not m:
            continue
        if alive(int(m.group(1)), int(m.group(2))):
            continue
        path = os.path.join(root_dir, name)
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    return removed


def maybe_sweep() -> None:
    """Orphaned folders and cgroups, at most once a minute (listing /tmp is cheap, not free)."""
    now = time.monotonic()
    with _lock:
        if now - _last_sweep[0] < _SWEEP_EVERY_S:
            return
        _last_sweep[0] = now
    sweep()
    cgroups.sweep(alive)
