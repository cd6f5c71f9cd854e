"""Celery tasks: interfaces that take ids and call services (imported inside the body).

run_task is idempotent: a duplicate or redelivered message finds the task already claimed or
finished and does nothing, and a re-run after a lost worker resumes after the iterations
already saved (their (task, index) is unique, so none is written twice).
"""

from __future__ import annotations

import logging
import traceback

from celery.exceptions import SoftTimeLimitExceeded

from workers.celery import app
from workers.stopping import WorkerStopping

log = logging.getLogger(__name__)


@app.task(name="workers.run_task", bind=True, acks_late=True)
def run_task(self, task_id: int) -> str:  # noqa: ANN001 (celery's bound task)
    from django.conf import settings

    from kernels.problem import Problem
    from webapp.jobs import services
    from workers.agent import run_agent
    from workers.heartbeat import Heartbeat
    from workers.reporting import DjangoReporter

    claim = services.task_claim(task_id=task_id, worker=self.request.hostname or "worker")
    if claim is None:
        log.info("task %s is not queued (duplicate delivery or finished); skipping", task_id)
        return "skipped"
    reporter = DjangoReporter(task_id=claim.task_id, attempt=claim.attempt)
    with Heartbeat(task_id=claim.task_id, attempt=claim.attempt, every_s=settings.KF_HEARTBEAT_S):
        try:
            run_agent(
                Problem.from_dict(claim.problem),
                reporter,
                task_id=claim.task_id,
                resume_from=claim.resume_from,
            )
        except WorkerStopping:
            # At a safe point, with everything so far recorded: back to the queue, and the next
            # worker resumes it (workers/stopping.py).
            services.task_release(task_id=claim.task_id, attempt=claim.attempt)
            log.info("task %s handed back to its queue: the worker is shutting down", task_id)
            return "released"
        except SoftTimeLimitExceeded:
            reporter.failed(error="time limit reached")
            return "failed"
        except Exception:
            reporter.failed(error=traceback.format_exc(limit=20))
            raise
    if reporter.outcome is None:
        # The agent returned without saying how it ended; close the task rather than leave it running.
        reporter.failed(error="the agent returned without reporting finished or failed")
        return "failed"
    return reporter.outcome[0]


@app.task(name="workers.watchdog")
def watchdog() -> list[int]:
    """Beat task: re-queue RUNNING tasks whose heartbeat stopped (RELIABILITY.md R4.7), and
    send again the queued tasks whose message never reached the broker."""
    from django.conf import settings

    from webapp.jobs import model_services, services

    services.tasks_send_unsent(older_than_s=settings.KF_WATCHDOG_INTERVAL_S)
    requeued = services.tasks_requeue_stale(
        stale_after_s=settings.KF_HEARTBEAT_STALE_S, max_attempts=settings.KF_TASK_MAX_ATTEMPTS
    )
    # A model job whose last task was just given up verifies the problems that finished.
    model_services.model_runs_settle()
    return requeued
