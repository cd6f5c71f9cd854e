"""Warm spare children: started ahead of time, each serves exactly one later phase.

Every child pays for a fresh interpreter and `import torch` (seconds on a GPU box) before its
phase starts. A spare is a child started ahead of time with the configuration of the phase
that just began: inside its own namespaces it joins its cgroup, sets its rlimits, imports
torch and triton, and then waits. The next run_child with an equal configuration claims it:
only then does it get its job, key, nonce, workdir, environment and mount plan over stdin, and
only then does it build its private view, apply Landlock for that workdir, drop its
capabilities and load its seccomp filter, before any job code runs. It serves that one phase
and exits, like any child: no process ever runs two jobs. A candidate cannot see a spare that
waits beside it (another PID namespace), let alone trace it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import shutil
import threading

from harness.sandbox import process, scratch
from harness.sandbox.process import Config, Started

READY_WAIT_S = 60.0  # a claimed spare still importing is waited for this long, then dropped

_log = logging.getLogger(__name__)


# Configurations whose spares are kept at once: an evaluation on a GPU starts children of two
# (the untrusted recording, the trusted judge) back to back; with one shared bound the judge's
# spares evicted those of the next candidate's recording (H100, 2026-11-27).
CONFIGURATIONS_KEPT = 2


def max_spares() -> int:
    """Idle spares kept per configuration (KF_SANDBOX_SPARES; 0 turns them off: every child
    is started fresh, as before). Two by default: a phase that ran in a spare is often short
    (oracle_check), so one spare started at its beginning would still be importing when the
    next phase asks (back-to-back interpreter evaluations of a Triton rmsnorm on 2 CPU cores,
    2026-11-22: 7.9 s each with none, 6.3 with one, 5.1 with two)."""
    return max(0, int(os.environ.get("KF_SANDBOX_SPARES", "2")))


def spares_enabled() -> bool:
    return max_spares() > 0


def spare_idle_s() -> float:
    """How long an unclaimed spare may wait before it is killed (KF_SANDBOX_SPARE_IDLE_S)."""
    return float(os.environ.get("KF_SANDBOX_SPARE_IDLE_S", "120"))


class SparePool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[Started] = []

    def claim(self, config: Config) -> Started | None:
        """A ready spare of exactly this configuration, or None (then start a fresh child)."""
        with self.lock:
            spare = next((s for s in self.idle if s.config == config), None)
            if spare is None:
                return None
            self.idle.remove(spare)
        if spare.timer:  # every idle spare has one (fill)
            spare.timer.cancel()
        why = _wait_ready(spare)
        if why:
            _log.warning("sandbox spare %d not used: %s", spare.proc.pid, why)
            spare.cleanup()
            return None
        return spare

    def fill(self, config: Config) -> None:
        """Keep max_spares() spares of this configuration waiting; past CONFIGURATIONS_KEPT
        configurations, the oldest other one's go first."""
        limit = max_spares()
        with self.lock:
            missing = limit - sum(s.config == config for s in self.idle)
        for _ in range(missing):
            home = scratch.make("spare")  # its HOME and cwd until the claim
            # The parent drops it at spare_idle_s(); its own idle limit is a backstop.
            spare = process.start(config, home, warm=True, idle_s=spare_idle_s() + 30)
            if isinstance(spare, str):
                shutil.rmtree(home, ignore_errors=True)
                return
            spare.scratch = home
            spare.timer = threading.Timer(spare_idle_s(), self.drop, (spare,))
            spare.timer.daemon = True
            spare.timer.start()
            surplus = []
            with self.lock:
                self.idle.append(spare)
                while len(self.idle) > limit * CONFIGURATIONS_KEPT:
                    old = next((s for s in self.idle if s.config != config), self.idle[0])
                    self.idle.remove(old)
                    surplus.append(old)
            for old in surplus:
                old.cleanup()

    def drop(self, spare: Started) -> None:
        """Kill an idle spare (its idle time ran out); a claimed one is left alone."""
        with self.lock:
            if spare not in self.idle:
                return
            self.idle.remove(spare)
        spare.cleanup()

    def shutdown(self) -> None:
        """Kill every idle spare (at interpreter exit, and for tests)."""
        with self.lock:
            spares, self.idle = self.idle, []
        for spare in spares:
            spare.cleanup()

    def forget_after_fork(self) -> None:
        """A forked process must not claim its parent's spares, nor keep their pipes open
        (a spare ends when its stdin closes)."""
        self.lock = threading.Lock()
        spares, self.idle = self.idle, []
        for spare in spares:
            with contextlib.suppress(OSError):
                spare.stdin.close()
            with contextlib.suppress(OSError):
                os.close(spare.read_fd)

    def pids(self) -> list[int]:
        with self.lock:
            return [s.proc.pid for s in self.idle]


def _wait_ready(spare: Started) -> str:
    """ "" once the spare said "R" and still lives; otherwise why it cannot be used."""
    ready, _, _ = select.select([spare.read_fd], [], [], READY_WAIT_S)
    if not ready:
        return f"not ready after {READY_WAIT_S:.0f} s"
    first = os.read(spare.read_fd, 1)
    if first != b"R":
        detail = os.read(spare.read_fd, 4096).decode(errors="replace") if first else ""
        return f"it said: {detail}" if detail else "it died while waiting"
    if spare.proc.poll() is not None:
        return f"it exited ({spare.proc.returncode}) while waiting"
    return ""


pool = SparePool()
atexit.register(pool.shutdown)
os.register_at_fork(after_in_child=pool.forget_after_fork)
