"""Short housekeeping and checks never wait behind long optimizations (issue 17, item 3).

Real worker processes, started as `manage.py up` starts them on a machine without a GPU
(webapp.embedded.workers.worker_plan), on the real broker and the test database. A long
optimization holds the CPU worker; the watchdog and a model job's end-to-end check must still
run at once. On main the CPU worker also took the control queue, one task at a time, and the
check went to the job's own queue: both waited behind the optimization (about 2 minutes on the
machine that reported it).

Order is asserted from recorded times (a task's started_at/finished_at, a Celery result's
date_done), never from a status read afterwards: by the time the test reads a status, an idle
worker may already have moved on (issue 28, item 6).
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from webapp.embedded.workers import worker_plan
from webapp.jobs import services
from webapp.jobs.models import Job, Task
from webapp.jobs.tests.support import shape_job
from workers.tests.support import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# An optimization that takes minutes on the stand-in agent (it stops early when cancelled).
LONG = {"KF_STANDIN_ITERATIONS": "600", "KF_STANDIN_PAUSE_S": "0.25"}
MODEL = Path(__file__).resolve().parents[2] / "webapp" / "jobs" / "tests" / "two_norms.py"


def start_up_workers(start_worker) -> None:
    plan = worker_plan([])  # what `up` starts without a GPU
    assert [spec.name for spec in plan] == ["worker-cpu", "worker-control"]
    for spec in plan:
        start_worker(
            queues=",".join(spec.queues), env={**spec.env, **LONG}, concurrency=spec.concurrency
        )


def start_long_optimization(alice, team, problems) -> Job:
    job = shape_job(user=alice, team=team, title="long", problems=problems, queue="cpu")
    wait_until(
        lambda: Task.objects.filter(job=job, status=Task.Status.RUNNING).exists(),
        timeout_s=60,
        what="the long optimization to start",
    )
    return job


def optimizing_at(job: Job, moment: dt.datetime) -> bool:
    """Whether one of the job's tasks had started and not yet ended at `moment` (recorded times)."""
    return (
        Task.objects.filter(job=job, started_at__lte=moment)
        .exclude(finished_at__lte=moment)
        .exists()
    )


def test_the_watchdog_runs_while_a_long_optimization_holds_the_cpu_worker(
    start_worker, alice, team, problems
):
    start_up_workers(start_worker)
    job = start_long_optimization(alice, team, problems)
    from workers.tasks import watchdog

    started = time.monotonic()
    result = watchdog.apply_async()  # routed as the beat sends it
    result.get(timeout=30)
    assert time.monotonic() - started < 15
    assert optimizing_at(job, result.date_done), "the watchdog waited for the optimization"
    services.job_cancel(job=job, user=alice)


def test_a_model_jobs_end_to_end_check_runs_while_other_jobs_optimize(
    start_worker, alice, team, problems
):
    from kernels.model_source import check_model_source
    from webapp.jobs.models import ModelRun
    from webapp.jobs.tests.support import model_jobs
    from workers.model_tasks import profile_model_job
    from workers.reporting import DjangoReporter

    # A model job on a queue nobody reads, profiled and planned here, then moved to the CPU queue.
    source = check_model_source(MODEL.read_text(), "two_norms.py")
    # Ten minutes: a problem is funded only with a screen round and a verification (agents.fit).
    (model_job,) = model_jobs(alice, team, [source], queue="test.nobody", gpu_minutes=10)
    assert profile_model_job(str(model_job.id)) == "planned"
    ModelRun.objects.filter(job=model_job).update(queue="cpu")
    Task.objects.filter(job=model_job).update(queue="cpu")

    start_up_workers(start_worker)
    other = start_long_optimization(alice, team, problems)

    # The model job's own optimizations end: its end-to-end check is sent.
    started = time.monotonic()
    for task in Task.objects.filter(job=model_job):
        claim = services.task_claim(task_id=task.id, worker="here")
        DjangoReporter(task_id=claim.task_id, attempt=claim.attempt).finished(
            best=None, stop_reason="budget"
        )
    wait_until(
        lambda: ModelRun.objects.filter(job=model_job, status=ModelRun.Status.DONE).exists(),
        timeout_s=90,
        what="the end-to-end check to finish",
    )
    assert time.monotonic() - started < 60
    checked_at = Job.objects.values_list("finished_at", flat=True).get(id=model_job.id)
    assert optimizing_at(other, checked_at), "it ran after the long optimization, not beside it"
    services.job_cancel(job=other, user=alice)


def test_a_gpu_jobs_check_goes_before_the_optimizations_queued_on_its_gpu(
    start_worker, alice, team, problems
):
    """A GPU job's check must time on its GPU, so it waits for the optimization in progress,
    never beside it; but it jumps every optimization still queued there (priority)."""
    import uuid

    from webapp.jobs.services import check_route
    from workers.model_tasks import verify_model_job

    queue = "gpu.test"
    start_worker(queues=queue, env={"KF_STANDIN_ITERATIONS": "40", "KF_STANDIN_PAUSE_S": "0.2"})
    job = shape_job(alice, team, problems, queue=queue, title="two optimizations")
    first, second = Task.objects.filter(job=job).order_by("id")
    wait_until(
        lambda: Task.objects.filter(id=first.id, status=Task.Status.RUNNING).exists(),
        timeout_s=60,
        what="the first optimization to start",
    )
    check_queue, priority = check_route(queue)
    assert check_queue == queue
    # A verify of a job that is not verifying: it only reports "skipped", at once.
    result = verify_model_job.apply_async(
        args=[str(uuid.uuid4())], queue=check_queue, priority=priority
    )
    assert result.get(timeout=60) == "skipped"
    checked_at = result.date_done  # stored by the worker when the check returned
    # Reading the second's status now would race the worker: on an idle machine it has often
    # started the second optimization before result.get() returns. Its recorded start does not.
    wait_until(
        lambda: Task.objects.filter(id=second.id, started_at__isnull=False).exists(),
        timeout_s=60,
        what="the second optimization to start",
    )
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.finished_at <= checked_at, "the check ran beside the optimization in progress"
    assert checked_at <= second.started_at, "the queued optimization ran before the check"
    services.job_cancel(job=job, user=alice)
