"""Memory and process-count limits through cgroups (v1 or v2), created by the parent per child.

RLIMIT_AS breaks CUDA start-up (RELIABILITY 3.3), and RLIMIT_NPROC does not apply to root, so
memory and fork bombs are bounded here instead. The child joins its own group first thing
(harness/sandbox/boot.py; the wrapping tool's view builder first, mounts.py), and the parent kills whatever is left in it when the child ends,
which also catches grandchildren that left the process group with setsid().
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_NAME = re.compile(r"^kernelforge-(\d+)-(\d+)-[0-9a-f]+$")


@dataclass
class CgroupSet:
    dirs: list[Path] = field(default_factory=list)  # one per hierarchy (v1) or one (v2)
    kind: str = "none"  # "v1", "v2" or "none"
    note: str = ""

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                for line in (d / "cgroup.procs").read_text().split():
                    found.add(int(line))
        return found

    def oom_kills(self) -> int:
        """Processes the kernel killed for going over the memory limit (0 if unknown)."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):  # v2, v1
                with contextlib.suppress(OSError, ValueError):
                    for line in (d / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
        return 0

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process left in the group(s); retry while a fork bomb keeps forking."""
        deadline = time.monotonic() + timeout_s
        for d in self.dirs:
            kill_file = d / "cgroup.kill"
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def join(procs_files: list[str] | tuple[str, ...]) -> None:
    """Inside the child (or the tool that wraps it): move this process into its groups."""
    for path in procs_files:
        with open(path, "w") as f:
            f.write("0")  # "0": the writing process (its pid differs inside a PID namespace)


def _v1_dir(controller: str) -> Path | None:
    base = ROOT / controller
    return base if (base / "cgroup.procs").exists() else None


def _own_v2_path() -> Path | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return ROOT / line[3:].lstrip("/")
    return None


def _parents() -> list[Path]:
    """Where this module makes groups: the v1 memory and pids roots, or v2 (ours, the root)."""
    if _v1_dir("memory") is not None and _v1_dir("pids") is not None:
        return [ROOT / "memory", ROOT / "pids"]
    if (ROOT / "cgroup.controllers").exists():
        return list(dict.fromkeys([_own_v2_path() or ROOT, ROOT]))
    return []


def sweep(owner_alive) -> int:
    """Kill and remove the groups made by processes that are gone (`owner_alive(pid, ticks)`
    says which are not): a parent killed mid-run leaves its child's group behind."""
    removed = 0
    for parent in _parents():
        with contextlib.suppress(OSError):
            for d in parent.iterdir():
                m = _NAME.match(d.name)
                if m and not owner_alive(int(m.group(1)), int(m.group(2))):
                    CgroupSet([d]).remove()
                    removed += not d.exists()
    return removed


def create(memory_bytes: int, max_pids: int, owner: str = "0-0") -> CgroupSet:
    """Make a fresh group with the limits; returns kind "none" (and why) where we cannot.
    `owner` ("<pid>-<start ticks>" of the maker, scratch.owner()) lets sweep() find orphans."""
    name = f"kernelforge-{owner}-{uuid.uuid4().hex[:12]}"
    mem, pids = _v1_dir("memory"), _v1_dir("pids")
    if mem is not None and pids is not None:
        made: list[Path] = []
        try:
            for base, limit_file, value in (
                (mem, "memory.limit_in_bytes", memory_bytes),
                (pids, "pids.max", max_pids),
            ):
                d = base / name
                d.mkdir()
                made.append(d)
                (d / limit_file).write_text(str(value))
            swap = mem / name / "memory.memsw.limit_in_bytes"
            if swap.exists():
                with contextlib.suppress(OSError):
                    swap.write_text(str(memory_bytes))
            return CgroupSet(made, "v1")
        except OSError as exc:
            CgroupSet(made).remove()
            return CgroupSet(note=f"cgroup v1 not writable: {exc}")
    if (ROOT / "cgroup.controllers").exists():
        errors = []
        # Our own group may hold processes (then it cannot delegate controllers): try the root.
        for parent in dict.fromkeys([_own_v2_path() or ROOT, ROOT]):
            d = parent / name
            try:
                controllers = (parent / "cgroup.subtree_control").read_text().split()
                if "memory" not in controllers or "pids" not in controllers:
                    (parent / "cgroup.subtree_control").write_text("+memory +pids")
                d.mkdir()
                (d / "memory.max").write_text(str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(max_pids))
                return CgroupSet([d], "v2")
            except OSError as exc:
                errors.append(f"{parent}: {exc}")
                with contextlib.suppress(OSError):
                    d.rmdir()
        return CgroupSet(note="cgroup v2 not usable here: " + "; ".join(errors))
    return CgroupSet(note="no writable memory+pids cgroup hierarchy")
