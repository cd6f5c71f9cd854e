"""Start child processes, watch them, and stop them all (in order) on Ctrl-C or on a crash.

Each child gets its own process group, so Ctrl-C reaches only `up`, which then stops the app
processes before Redis. Each child also asks the kernel to kill it if `up` itself dies
(PR_SET_PDEATHSIG), so not even a SIGKILLed `up` leaves strays behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

PR_SET_PDEATHSIG = 1


@dataclass
class Child:
    name: str
    process: subprocess.Popen

    @property
    def running(self) -> bool:
        return self.process.poll() is None


def _own_group_and_die_with_parent() -> None:  # runs in the child between fork and exec
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    def __init__(self, *, log) -> None:  # noqa: ANN001 (a print-like callable)
        self.children: list[Child] = []
        self.log = log

    def start(self, name: str, argv: Sequence[str], *, env: dict[str, str]) -> Child:
        process = subprocess.Popen(list(argv), env=env, preexec_fn=_own_group_and_die_with_parent)  # noqa: PLW1509
        child = Child(name=name, process=process)
        self.children.append(child)
        self.log(f"started {name} (pid {process.pid})")
        return child

    def wait_for_exit(self) -> Child:
        """Block until a child exits on its own; returns it."""
        while True:
            for child in self.children:
                if not child.running:
                    return child
            time.sleep(0.5)

    def stop_all(self, *, timeout_s: float, last: Sequence[str] = ()) -> None:
        """SIGTERM everything (children named in `last` after the others), then SIGKILL stragglers."""
        first = [c for c in self.children if c.name not in last]
        final = [c for c in self.children if c.name in last]
        for group in (first, final):
            for child in reversed(group):
                _signal_group(child, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for child in group:
                remaining = max(0.1, deadline - time.monotonic())
                try:
                    child.process.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    self.log(f"{child.name} did not stop in {timeout_s:.0f}s; killing it")
                # Kill the whole group: a worker's pool children must not outlive it.
                _signal_group(child, signal.SIGKILL)
                child.process.wait()
            for child in group:
                self.log(f"stopped {child.name}")


def _signal_group(child: Child, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.process.pid, sig)
