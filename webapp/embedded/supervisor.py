"""Start child processes, restart the ones that crash, and stop them all (in order) on Ctrl-C.

Each child gets its own process group, so Ctrl-C reaches only `up`, which then stops the app
processes before Redis. Each child also asks the kernel to kill it if `up` itself dies
(PR_SET_PDEATHSIG), so not even a SIGKILLed `up` leaves strays behind.

A child that exits on its own is started again, after a pause that doubles with each quick
crash (1 s, 2 s, 4 s ... up to 30 s) and resets once it has run a minute: one component's
death no longer stops the rest (issue 28: a stopped web server took the workers down mid-task).
A child that keeps crashing at once (KF_UP_MAX_QUICK_CRASHES times in a row) is given up on,
and then `up` stops everything and says so.

Stopping: the web server first (no new work comes in), then the workers, then Redis. A Celery
worker gets SIGTERM on its main process only, which is Celery's warm shutdown: it takes no new
task, asks the running one to stop at its next safe point and hand itself back to the queue
(workers/celery.py), and exits when it has. Signalling the whole group, as before, killed the
pool child mid-task. Whatever is still there after the timeout is killed, group and all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

PR_SET_PDEATHSIG = 1
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a child that ran this long had not crashed "at once"


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen
    started_at: float = field(default_factory=time.monotonic)
    stop_main_only: bool = False  # SIGTERM its main process, not its group (Celery workers)
    stop_timeout_s: float | None = None  # overrides stop_all's timeout
    quick_crashes: int = 0  # crashes in a row, each soon after its start
    restart_at: float | None = None  # when a crashed child is due to start again

    @property
    def running(self) -> bool:
        return self.process.poll() is None


def _own_group_and_die_with_parent() -> None:  # runs in the child between fork and exec
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(argv: Sequence[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(list(argv), env=env, preexec_fn=_own_group_and_die_with_parent)  # noqa: PLW1509


class GaveUp(Exception):
    """A child crashed at once too many times in a row."""


class Supervisor:
    def __init__(self, *, log: Callable[[str], object], max_quick_crashes: int = 5) -> None:
        self.children: list[Child] = []
        self.log = log
        self.max_quick_crashes = max_quick_crashes

    def start(self, name: str, argv: Sequence[str], *, env: dict[str, str],
              stop_main_only: bool = False, stop_timeout_s: float | None = None) -> Child:  # fmt: skip
        child = Child(name=name, argv=list(argv), env=env, process=_spawn(argv, env),
                      stop_main_only=stop_main_only, stop_timeout_s=stop_timeout_s)  # fmt: skip
        self.children.append(child)
        self.log(f"started {name} (pid {child.process.pid})")
        return child

    def watch(self, *, every_s: float = 0.5, until: Callable[[], bool] = lambda: False) -> None:
        """Restart children that exit, until `until()` says stop (Ctrl-C raises instead).

        Raises GaveUp when one keeps crashing at once."""
        while not until():
            self.check()
            time.sleep(every_s)

    def check(self) -> None:
        """One round: note the children that exited, restart the ones that are due."""
        now = time.monotonic()
        for child in self.children:
            if child.running:
                continue
            if child.restart_at is None:
                self._crashed(child, now)
            elif now >= child.restart_at:
                child.process = _spawn(child.argv, child.env)
                child.started_at, child.restart_at = time.monotonic(), None
                self.log(f"restarted {child.name} (pid {child.process.pid})")

    def _crashed(self, child: Child, now: float) -> None:
        quick = now - child.started_at < HEALTHY_AFTER_S
        child.quick_crashes = child.quick_crashes + 1 if quick else 1
        code = child.process.returncode
        if child.quick_crashes > self.max_quick_crashes:
            raise GaveUp(
                f"{child.name} exited with code {code} {child.quick_crashes} times in a row"
                " soon after starting; giving up"
            )
        pause = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (child.quick_crashes - 1))
        child.restart_at = now + pause
        self.log(f"{child.name} exited with code {code}; restarting it in {pause:g}s")

    def stop_all(self, *, timeout_s: float, first: Sequence[str] = (),
                 last: Sequence[str] = ()) -> None:  # fmt: skip
        """Stop the children named in `first`, then the others, then those in `last`: SIGTERM,
        then SIGKILL to the whole group of any still there after its timeout."""
        groups = [
            [c for c in self.children if c.name in first],
            [c for c in self.children if c.name not in first and c.name not in last],
            [c for c in self.children if c.name in last],
        ]
        for group in groups:
            for child in reversed(group):
                child.restart_at = None
                if child.running:
                    _terminate(child)
            started = time.monotonic()
            for child in group:
                limit = child.stop_timeout_s if child.stop_timeout_s is not None else timeout_s
                remaining = max(0.1, started + limit - time.monotonic())
                try:
                    child.process.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    self.log(f"{child.name} did not stop in {limit:.0f}s; killing it")
                # Kill the whole group: a worker's pool children must not outlive it.
                _signal_group(child, signal.SIGKILL)
                child.process.wait()
            for child in group:
                self.log(f"stopped {child.name} (exit code {child.process.returncode})")


def _terminate(child: Child) -> None:
    if child.stop_main_only:
        with contextlib.suppress(ProcessLookupError):
            child.process.send_signal(signal.SIGTERM)
    else:
        _signal_group(child, signal.SIGTERM)


def _signal_group(child: Child, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.process.pid, sig)
