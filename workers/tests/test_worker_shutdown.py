"""A worker told to stop hands its running task back instead of dying mid-task (issue 28, item 3).

A real worker process on the real broker and the test database. SIGTERM on its main process is
what `up` (and docker) send: Celery's warm shutdown. On main the worker then waited for the
running optimization, however long, until it was killed mid-step; now the task stops at its next
safe point, goes back to QUEUED with what it saved, and a new worker resumes it.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from webapp.jobs.models import Iteration, Task
from webapp.jobs.tests.support import shape_job
from workers.tests.support import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LONG = {"KF_STANDIN_ITERATIONS": "600", "KF_STANDIN_PAUSE_S": "0.25"}  # 150 s


def test_a_stopped_worker_hands_its_task_back_and_the_next_one_resumes_it(
    start_worker, alice, team, problems
):
    worker = start_worker(env=LONG)
    job = shape_job(user=alice, team=team, title="stop", problems=problems[:1], queue="cpu")
    task = job.tasks.get()
    wait_until(
        lambda: Iteration.objects.filter(task=task).count() >= 3, timeout_s=60, what="3 iterations"
    )
    worker.process.send_signal(signal.SIGTERM)  # the main process only: a warm shutdown
    try:
        worker.process.wait(timeout=30)  # main: waits for the 150 s task
    except subprocess.TimeoutExpired:
        pytest.fail("the worker waited for its running task instead of handing it back")
    assert "WorkerLostError" not in worker.log(), "the task's process was killed"

    task.refresh_from_db()
    saved = Iteration.objects.filter(task=task).count()
    assert (task.status, task.attempt) == (Task.Status.QUEUED, 1), (task.status, task.error)
    assert task.stop_reason == "requeued: its worker stopped"

    steps = saved + 3
    start_worker(env={"KF_STANDIN_ITERATIONS": str(steps), "KF_STANDIN_PAUSE_S": "0.05"})
    wait_until(
        lambda: Task.objects.filter(id=task.id, status=Task.Status.DONE).exists(),
        timeout_s=60,
        what="the next worker to finish the task",
    )
    rows = list(Iteration.objects.filter(task=task).order_by("seq").values_list("index", "seq"))
    assert rows == [(i, i + 1) for i in range(steps)], "every step once, resumed after the saved"
