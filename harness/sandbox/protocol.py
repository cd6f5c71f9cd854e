"""What crosses the process boundary between the parent and a sandbox child, typed.

The parent writes these as JSON (one line of spawn settings, then the claim) on the child's
stdin, or into a private settings file for a wrapped child (ncu, compute-sanitizer); the child
reads them back into the same classes. The child answers with a result message (HMAC-signed,
see parent.py) whose `isolation` is an IsolationRecord. Standard library only: boot.py imports
this before anything else.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

# The child's setup error when CUDA fails to start inside its namespaces (parent.py falls back).
CUDA_FAILED = "CUDA would not start"


@dataclass(frozen=True)
class ChildLimits:
    cpu_s: int
    max_file_bytes: int
    max_open_files: int
    max_pids: int
    memory_bytes: int
    cgroup: bool  # a memory+pids cgroup bounds the child (else RLIMIT_AS without CUDA)


@dataclass(frozen=True)
class MountPlan:
    """The child's view of the filesystem (mounts.py builds it inside its mount namespace).

    `/` and everything under it is made read-only; each `cover` folder is replaced by an empty
    private tmpfs (host sockets, shared memory and other jobs' files live there); `writable`
    and `readable` host folders that sit under a covered one are bound back in; every host
    pathname socket in `sockets` that is still reachable is masked with /dev/null."""

    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    cover: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    tmpfs_bytes: int = 0


@dataclass(frozen=True)
class SpawnSettings:
    """Everything a child gets before it knows its job (the same for every job of a config)."""

    fd: int | None  # the result pipe, or None: write `result_path` (wrapped children)
    warm: bool  # a spare: import, say "R", wait for the claim
    idle_s: float
    cuda: bool
    isolate_net: bool
    isolate_fs: bool  # Landlock
    undumpable: bool
    cgroup_procs: tuple[str, ...]
    cgroup_kind: str
    limits: ChildLimits
    namespaces: str = ""  # what the unshare wrapper made ("pid+mount+ipc+net"), "" for none
    ns_note: str = ""  # without PID/mount/IPC namespaces: "none (why)"
    result_path: str | None = None


@dataclass(frozen=True)
class Claim:
    """The job: given to a fresh child right after its spawn settings, to a spare when claimed."""

    key: str  # HMAC key (hex) for the result message
    nonce: str
    phase: str
    job: dict[str, Any]
    workdir: str
    env: dict[str, str]
    plan: MountPlan | None = None  # None: no private mount view (no mount namespace)


@dataclass
class IsolationRecord:
    """Which sandbox layers a child really had (they depend on the host); "none (...)" says
    which could not be applied and why. Evaluation.isolation is its to_dict()."""

    cgroup: str = "none"  # v1 | v2 | none (why)
    rlimits: list[str] = field(default_factory=list)
    network: str = "none"  # netns | userns+netns | none (why)
    pid: str = "none"  # pidns: /proc shows only the child's own processes
    mounts: str = "none"  # private /tmp, /dev/shm, /run...; / read-only
    sockets: str = "none"  # host pathname sockets hidden or masked
    ipc: str = "none"  # private System V IPC and POSIX message queues
    filesystem: str = "none"  # landlock-abiN: nothing writable outside the workdir
    capabilities: str = "none"  # dropped: no mount/umount, ptrace of others, raw devices...
    no_new_privs: bool = False
    seccomp: str = "none"  # denied syscalls (ptrace, bpf, keyctl, unshare, mount...)
    prestarted: bool = False  # the child was a warm spare

    # Layers the issue asks every untrusted child to have (a phase may not ask for all).
    EXPECTED = ("cgroup", "network", "pid", "mounts", "ipc", "filesystem", "capabilities")

    def missing(self) -> list[str]:
        """The expected layers this child did not get, each with the reason it gave."""
        return [
            f"{name}: {getattr(self, name)}" for name in self.EXPECTED if _off(getattr(self, name))
        ]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["missing"] = self.missing()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IsolationRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _off(value: object) -> bool:
    return isinstance(value, str) and value.startswith("none")


def dumps(obj: Any) -> bytes:
    is_instance = dataclasses.is_dataclass(obj) and not isinstance(obj, type)
    return json.dumps(dataclasses.asdict(obj) if is_instance else obj).encode()


def spawn_from(data: dict[str, Any]) -> SpawnSettings:
    data = dict(data)
    data["limits"] = ChildLimits(**data["limits"])
    data["cgroup_procs"] = tuple(data["cgroup_procs"])
    return SpawnSettings(**data)


def claim_from(data: dict[str, Any]) -> Claim:
    data = dict(data)
    plan = data.get("plan")
    if plan is not None:
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in plan.items()
        }
        data["plan"] = MountPlan(**fields)
    return Claim(**data)
