"""A worker told to stop hands its running task back instead of dying mid-task (issue 28).

Celery's warm shutdown (SIGTERM to the worker) takes no new task and waits for the running one,
however long an optimization takes; the supervisor (`up`, docker) then kills it, mid-step. So
the worker's main process passes the SIGTERM on to its pool children (workers/celery.py); in a
child it only sets a flag. The task sees it at its next safe point, the same place it polls for
a user's cancel: it raises WorkerStopping there, and run_task puts the task back on its queue
(RUNNING -> QUEUED). Everything it recorded stays: the next worker resumes after the saved
iterations, and the agent graph from its last checkpoint, exactly as after a lost worker, but
at once instead of after the watchdog's heartbeat timeout.

A second SIGTERM (Celery's cold shutdown, billiard's hard time limit) kills the child as before.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType

_requested = threading.Event()


class WorkerStopping(BaseException):  # noqa: N818 (a signal to unwind, like SystemExit)
    """Raised at a safe point of a task once its worker is shutting down.

    A BaseException, so that no `except Exception` between the safe point and run_task swallows
    it (the agents' own handlers re-raise it).
    """


def forget() -> None:
    """A task starts: a SIGTERM that reached this child earlier (an administrator's revoke with
    terminate, say) must not hand back every task it runs from now on."""
    _requested.clear()


def requested() -> bool:
    return _requested.is_set()


def raise_if_requested() -> None:
    if _requested.is_set():
        raise WorkerStopping("the worker is shutting down")


def handle_sigterm_in_pool_child() -> None:
    """In a pool child: the first SIGTERM asks the task to stop; a second one kills the child."""

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if _requested.is_set():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        _requested.set()

    signal.signal(signal.SIGTERM, on_sigterm)


def signal_children(sig: signal.Signals = signal.SIGTERM) -> list[int]:
    """Send `sig` to this process's children (the worker's pool); returns their pids."""
    me, sent = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == me:
                os.kill(int(stat.parent.name), sig)
                sent.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to signal
    return sent
