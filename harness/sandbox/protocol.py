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
class SpawnSettings:
    """Everything a child gets before it knows its job (the same for every job of a config)."""

    fd: int | None  # the result pipe, or None: write `result_path` (wrapped children)
    warm: bool  # a spare: import, say "R", wait for the claim
    idle_s: float
    cuda: bool
    untrusted: bool  # candidate or model code will run: drop to sandbox_uid, no host writes
    sandbox_uid: int | None
    isolate_net: bool
    isolate_fs: bool  # Landlock
    undumpable: bool
    cgroup_kind: str
    limits: ChildLimits
    namespaces: str = ""  # what bwrap made ("pid+ipc+uts+view+net"), "" for none
    ns_note: str = ""  # without them: "none (why)"
    result_path: str | None = None
    reads: tuple[str, ...] = ()  # the view's read-only folders (Landlock reads, untrusted)
    writes: tuple[str, ...] = ()  # host folders it may write besides its workdir (trusted)


@dataclass(frozen=True)
class Claim:
    """The job: given to a fresh child right after its spawn settings, to a spare when claimed."""

    key: str  # HMAC key (hex) for the result message; "" for an untrusted child (it gets none)
    nonce: str
    phase: str
    job: dict[str, Any]
    workdir: str
    env: dict[str, str]


@dataclass
class IsolationRecord:
    """Which sandbox layers a child really had (they depend on the host); "none (...)" says
    which could not be applied and why. Evaluation.isolation is its to_dict()."""

    cgroup: str = "none"  # v1 | v2 | none (why)
    rlimits: list[str] = field(default_factory=list)
    network: str = "none"  # netns | none (why)
    pid: str = "none"  # pidns: /proc shows only the child's own processes
    mounts: str = "none"  # the bwrap view: allow-listed reads, private /dev, capped /tmp
    sockets: str = "none"  # host pathname sockets: not in the view
    ipc: str = "none"  # private System V IPC and POSIX message queues
    filesystem: str = "none"  # landlock-abiN: writes only to its scratch (untrusted: reads too)
    capabilities: str = "none"  # dropped: no mount/umount, ptrace of others, raw devices...
    uid: str = "none"  # the uid it ran as: unprivileged for untrusted code
    no_new_privs: bool = False
    seccomp: str = "none"  # denied syscalls (ptrace, bpf, keyctl, unshare, mount...)
    prestarted: bool = False  # the child was a warm spare

    # Layers every child is expected to have (a phase may not ask for all).
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
    data["reads"] = tuple(data.get("reads", ()))
    data["writes"] = tuple(data.get("writes", ()))
    return SpawnSettings(**data)


def claim_from(data: dict[str, Any]) -> Claim:
    return Claim(**data)
