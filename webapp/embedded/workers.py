"""Which Celery workers `manage.py up` starts on this machine, and with what command.

A plan (a list of WorkerSpec) rather than code that starts processes, so tests can start the
very same workers with the test settings.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from webapp.embedded.gpus import Gpu


@dataclass(frozen=True)
class WorkerSpec:
    name: str  # the supervisor's name for the process, e.g. "worker-gpu0"
    node: str  # Celery's node name, e.g. "gpu0@%h"
    queues: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # added to the environment of `up`
    beat: bool = False  # this worker also runs the beat (the watchdog's schedule)
    concurrency: int = 1


# No GPU in this process: a Triton kernel can only run in the interpreter.
CPU_ONLY = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}


def worker_plan(gpus: list[Gpu]) -> list[WorkerSpec]:
    """One optimization worker per GPU (concurrency 1, pinned), or one CPU worker when there is
    no GPU; and always the control worker, so housekeeping and the CPU jobs' model checks never
    wait behind an optimization (R4.3). It runs two at a time, so the watchdog does not wait
    behind a check either, and it runs the beat."""
    if gpus:
        plan = [
            WorkerSpec(
                name=f"worker-gpu{gpu.index}",
                node=f"gpu{gpu.index}@%h",
                queues=(gpu.queue,),
                env={"CUDA_VISIBLE_DEVICES": str(gpu.index)},
            )
            for gpu in gpus
        ]
    else:
        plan = [WorkerSpec(name="worker-cpu", node="cpu@%h", queues=("cpu",), env=CPU_ONLY)]
    control = WorkerSpec(
        name="worker-control",
        node="control@%h",
        queues=(settings.KF_CONTROL_QUEUE,),
        env=CPU_ONLY,
        beat=True,
        concurrency=2,
    )
    return [*plan, control]


def work_queues(plan: list[WorkerSpec]) -> list[str]:
    """The queues jobs may be submitted to (the web form's choices), in plan order."""
    queues: list[str] = []
    for spec in plan:
        for queue in spec.queues:
            if queue != settings.KF_CONTROL_QUEUE and queue not in queues:
                queues.append(queue)
    return queues


def worker_argv(spec: WorkerSpec, *, beat_schedule: Path) -> list[str]:
    argv = [sys.executable, "-m", "celery", "-A", "workers", "worker", "--loglevel", "INFO",
            "-Q", ",".join(spec.queues), "-c", str(spec.concurrency), "-n", spec.node]  # fmt: skip
    if spec.beat:
        argv += ["--beat", "--schedule", str(beat_schedule)]
    return argv


# Celery warns, at length, on every start as root. In a container root is the norm (and the
# sandbox drops privileges for candidates itself), so there the warning only buries `up`'s
# banner (issue 27). Anywhere else it stays: running as root there is a choice to notice.
ROOT_WARNING = "ignore:You're running the worker with superuser privileges"


def intentionally_root(*, euid: int | None = None, allow: str | None = None) -> bool:
    """Root in a container (Docker, Podman), or where KF_ALLOW_ROOT says so."""
    euid = os.geteuid() if euid is None else euid
    allow = os.environ.get("KF_ALLOW_ROOT", "") if allow is None else allow
    in_container = Path("/.dockerenv").exists() or Path("/run/.containerenv").exists()
    return euid == 0 and (in_container or allow.lower() in ("1", "true", "yes"))


def worker_env(base: dict[str, str], spec: WorkerSpec, *, quiet_root: bool) -> dict[str, str]:
    """A worker's environment: `up`'s, the spec's, and Celery's root warning set aside when
    the run is root on purpose."""
    env = dict(base, **spec.env)
    if quiet_root:
        env["PYTHONWARNINGS"] = ",".join(w for w in (env.get("PYTHONWARNINGS"), ROOT_WARNING) if w)
    return env


def node_names(plan: list[WorkerSpec], host: str) -> set[str]:
    """The Celery node names the plan's workers answer a ping with ("%h": the host name)."""
    return {spec.node.replace("%h", host) for spec in plan}
