"""The Celery app. Settings come from Django's (namespace CELERY_, see webapp/settings.py).

This process orchestrates only: it never initialises CUDA (R4.1). Candidates and anything
that touches the GPU run in subprocesses the harness spawns.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

from celery import Celery
from celery.signals import (
    task_prerun,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutting_down,
)

from harness.sandbox.capabilities import undumpable
from workers import stopping

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("kernelforge")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
app.autodiscover_tasks(["workers"], related_name="model_tasks")

PR_SET_PDEATHSIG = 1


@worker_init.connect
def _hide_the_environment(**_: object) -> None:
    """This process holds DATABASE_URL, REDIS_URL and the LLM key: where a sandbox child runs
    without its own PID namespace, it must not read them from /proc/<pid>/environ (the pool
    children inherit this; harness's run_child marks the evaluating process the same way)."""
    undumpable()


@worker_ready.connect
def _build_the_kernel_library(**_: object) -> None:
    """On a GPU machine, build its kernel library in the background (harness/library.py): once
    per machine, at the lowest CPU priority so a job's own compiles go first; a build that
    finds another running leaves it be. KF_LIBRARY_BUILD=0 turns it off."""
    from harness.device import gpu_visible

    if os.environ.get("KF_LIBRARY_BUILD", "1") == "0" or not gpu_visible():
        return
    from harness import library

    library.start_background_build()


@worker_process_init.connect
def _die_with_the_worker(**_: object) -> None:
    """A pool child killed with its parent stops too, instead of running on unseen.

    Without this, SIGKILL on the worker leaves an orphan child that keeps heartbeating, so the
    watchdog would never notice the task was lost.
    """
    # Outside Linux there is no prctl; orphans then behave as the OS decides.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@worker_shutting_down.connect
def _ask_the_running_task_to_stop(**_: object) -> None:
    """Warm shutdown waits for the running task, however long it takes: ask it to stop at its
    next safe point and go back to the queue (workers/stopping.py)."""
    stopping.signal_children(signal.SIGTERM)


@task_prerun.connect
def _stop_at_a_safe_point(**_: object) -> None:
    """In the pool child, as a task starts: a SIGTERM asks it to stop at its next safe point.

    Here and not at worker_process_init: billiard sets its own SIGTERM handler (exit at once)
    after that signal's handlers ran. A stop asked for before this task is forgotten."""
    stopping.forget()
    stopping.handle_sigterm_in_pool_child()
