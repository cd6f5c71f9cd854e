"""Writes about model jobs after submission: profile recorded (its plan's tasks), verified.

A model job is made by submission.jobs_submit. Every transition here is a compare-and-set on
ModelRun.status, so a redelivered Celery message is a no-op. Model code never runs here: the
worker profiles and verifies it in the harness's sandbox and hands us plain JSON. Its checks
(profile, verify) are sent where services.check_route says, so they never wait behind other
jobs' optimizations.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from celery import Task as CeleryTask
from django.db import transaction
from django.utils import timezone

import kernels
from webapp.jobs import selectors
from webapp.jobs.models import Job, ModelRun, Task
from webapp.jobs.services import check_route, status_notify, tasks_create
from workers.model_tasks import profile_model_job, verify_model_job

log = logging.getLogger(__name__)
S = ModelRun.Status


def profile_send_after_commit(*, job_id: uuid.UUID, queue: str) -> None:
    """Send the model's profile after the transaction that saved the job commits."""
    transaction.on_commit(lambda: _send_check(profile_model_job, job_id, queue))


def model_profile_claim(*, job_id: uuid.UUID | str) -> str | None:
    """QUEUED -> PROFILING; returns the model source, or None if another delivery has it."""
    with transaction.atomic():
        claimed = ModelRun.objects.filter(job_id=job_id, status=S.QUEUED).update(status=S.PROFILING)
        if not claimed:
            return None
        Job.objects.filter(id=job_id, status=Job.Status.QUEUED).update(
            status=Job.Status.RUNNING, started_at=timezone.now()
        )
        job = Job.objects.get(id=job_id)
    status_notify(job_id)
    with job.model_file.open("rb") as f:
        return f.read().decode("utf-8", errors="replace")


def model_budget(*, job_id: uuid.UUID | str) -> float:
    """The GPU seconds the Amdahl plan splits across the model's problems: the job's budget."""
    return Job.objects.filter(id=job_id).values_list("gpu_minutes", flat=True).get() * 60.0


def _nothing_funded(plan: dict[str, Any]) -> str:
    """Why a planned model job optimizes nothing: no op we know, or a budget no problem fits
    (agents.amdahl.make_plan: each funded problem gets a screen round and one verification)."""
    items = plan.get("items") or []
    if not items:
        return "Nothing in this model is an op KernelForge can optimize yet."
    top = items[0]
    return (
        f"The budget fits no problem: the largest, {top['key']}, {top.get('left_out') or ''}. "
        "Give the job more GPU minutes to optimize it; until then PyTorch runs the model as it is."
    )


@transaction.atomic
def model_profile_record(
    *, job_id: uuid.UUID | str, profile: dict[str, Any], plan: dict[str, Any]
) -> list[int]:
    """Save profile + plan; one Problem and Task per funded plan item, in plan order, each
    enqueued after commit. With nothing to optimize the job ends here. Returns task ids."""
    run = ModelRun.objects.select_for_update().select_related("job").get(job_id=job_id)
    if run.status != S.PROFILING:
        return []
    funded = [item for item in plan["items"] if item["budget_s"] > 0]
    run.profile, run.plan = profile, plan
    problems = [kernels.Problem.from_dict(item["problem"]) for item in funded]
    tasks = tasks_create(job=run.job, problems=problems, queue=run.queue)
    if funded:
        run.status = S.OPTIMIZING
    else:
        run.status = S.DONE
        run.message = _nothing_funded(plan)
        Job.objects.filter(id=job_id, status__in=Job.ACTIVE).update(
            status=Job.Status.DONE, finished_at=timezone.now()
        )
    run.save()
    transaction.on_commit(lambda: status_notify(job_id))
    return [task.id for task in tasks]


def model_fail(*, job_id: uuid.UUID | str, message: str, profile: dict | None = None) -> bool:
    """Any active state -> FAILED, with the message the user sees; the job fails with it."""
    with transaction.atomic():
        changed = ModelRun.objects.filter(
            job_id=job_id, status__in=(S.QUEUED, S.PROFILING, S.VERIFYING)
        ).update(status=S.FAILED, message=message[:20000], profile=profile)
        if not changed:
            return False
        Job.objects.filter(id=job_id, status__in=Job.ACTIVE).update(
            status=Job.Status.FAILED, finished_at=timezone.now()
        )
    status_notify(job_id)
    return True


def model_after_task(*, task_id: int) -> bool:
    """Called when a task ends: once no task of a model job is active, OPTIMIZING -> VERIFYING
    and the end-to-end check is enqueued (exactly once, by the CAS)."""
    job_id = Task.objects.filter(id=task_id).values_list("job_id", flat=True).first()
    if job_id is None:
        return False
    return _optimizing_ended(job_id)


# A run VERIFYING for this long without a result had its verify message lost (a broker
# outage, a worker killed mid-check): the sweep sends it again. Well above the sandbox's
# wall limit for the check, so a slow check is not duplicated while it still runs.
VERIFY_RESEND_S = 1800.0


def model_runs_settle(*, resend_after_s: float = VERIFY_RESEND_S) -> list[str]:
    """The watchdog's sweep. Model runs still OPTIMIZING with no active task left move on to
    VERIFYING: a task the watchdog gave up on (or one cancelled before it started) ends
    without a reporter, so no model_after_task call follows it, and the problems that did
    finish are verified from here. Runs waiting to be profiled, or VERIFYING, for longer than
    `resend_after_s` get their message again (a broker that was down lost it). Returns the job
    ids moved on from OPTIMIZING."""
    stuck = (
        ModelRun.objects.filter(status=S.OPTIMIZING)
        .exclude(job__tasks__status__in=Task.ACTIVE)
        .values_list("job_id", flat=True)
    )
    moved = [str(job_id) for job_id in list(stuck) if _optimizing_ended(job_id)]
    cutoff = timezone.now() - timedelta(seconds=resend_after_s)
    waiting = ModelRun.objects.filter(status__in=(S.QUEUED, S.VERIFYING), updated_at__lt=cutoff)
    for run in waiting:
        with transaction.atomic():
            claimed = ModelRun.objects.filter(
                pk=run.pk, status=run.status, updated_at=run.updated_at
            ).update(updated_at=timezone.now())
            if claimed:
                check = profile_model_job if run.status == S.QUEUED else verify_model_job
                log.warning("model job %s: still %s; its check sent again", run.job_id, run.status)
                transaction.on_commit(
                    lambda c=check, j=run.job_id, q=run.queue: _send_check(c, j, q)
                )
    return moved


def _send_check(check: CeleryTask, job_id: uuid.UUID | str, work_queue: str) -> None:
    """Send a profile or verify message. A down broker loses nothing: the run keeps its state
    and the watchdog's sweep sends the message again."""
    queue, priority = check_route(work_queue)
    try:
        check.apply_async(args=[str(job_id)], queue=queue, priority=priority)
    except Exception:
        log.exception("could not send %s for model job %s", check.name, job_id)


def _optimizing_ended(job_id: uuid.UUID | str) -> bool:
    """OPTIMIZING -> VERIFYING (verify enqueued after commit) once no task is active; a job
    cancelled meanwhile skips the check (its Job is already CANCELLED by the jobs app)."""
    with transaction.atomic():
        if Task.objects.filter(job_id=job_id, status__in=Task.ACTIVE).exists():
            return False
        run = ModelRun.objects.filter(job_id=job_id).first()
        if run is None or run.queue == "":
            return False
        cancelled = Job.objects.filter(id=job_id, cancel_requested=True).exists()
        if cancelled:
            changed = ModelRun.objects.filter(job_id=job_id, status=S.OPTIMIZING).update(
                status=S.FAILED, message="Cancelled before the end-to-end check."
            )
        else:
            changed = ModelRun.objects.filter(job_id=job_id, status=S.OPTIMIZING).update(
                status=S.VERIFYING,
                updated_at=timezone.now(),  # .update() skips auto_now
            )
        if changed and not cancelled:
            queue = run.queue
            transaction.on_commit(lambda: _send_check(verify_model_job, job_id, queue))
    if changed:
        status_notify(job_id)
    return bool(changed)


def model_verify_record(*, job_id: uuid.UUID | str, result: dict[str, Any]) -> bool:
    """VERIFYING -> DONE with the measured end-to-end result (a failed check is a result too);
    only now does the Job end (the jobs app leaves a model job running after its last task):
    DONE if a task finished, FAILED if every one failed, as for a shape job."""
    with transaction.atomic():
        changed = ModelRun.objects.filter(job_id=job_id, status=S.VERIFYING).update(
            status=S.DONE,
            end_to_end=result,
            message=selectors.without_package(result.get("message", ""))[:20000],
        )
        if changed:
            statuses = set(Task.objects.filter(job_id=job_id).values_list("status", flat=True))
            ended = Job.Status.FAILED if statuses == {Task.Status.FAILED} else Job.Status.DONE
            Job.objects.filter(id=job_id, status__in=Job.ACTIVE).update(
                status=ended, finished_at=timezone.now()
            )
    if changed:
        status_notify(job_id)
    return bool(changed)
