"""Writes about jobs' tasks and iterations. Every state change is a compare-and-set, so
duplicates become no-ops.

Callers: submission.py and model_services.py (tasks_create), views (job_cancel) and workers/
(task_claim, iteration_record, task_finish, task_fail, tasks_requeue_stale, tasks_send_unsent).
Tasks are sent to the broker only after the transaction that created them commits.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

import kernels
from webapp.accounts.models import Membership, Team
from webapp.jobs import events, selectors
from webapp.jobs.models import Iteration, Job, ModelRun, Problem, Task
from webapp.jobs.status import job_status_event
from workers.tasks import run_task as run_task_task

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskClaim:
    """What a worker needs to run a task it has just claimed."""

    task_id: int
    job_id: uuid.UUID
    attempt: int
    problem: dict[str, Any]  # kernels.Problem.to_dict() form
    resume_from: int  # iterations already recorded by earlier attempts


@dataclass(frozen=True)
class IterationData:
    """The fields of agents.reporting.IterationEvent that we store (verdict as its value)."""

    index: int
    verdict: str
    parent: int | None = None
    hypothesis: str = ""
    source: str = ""
    candidate_id: str = ""
    reason: str = ""
    family: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] | None = None
    speedup: float | None = None
    best_speedup: float | None = None
    elapsed_s: float = 0.0
    gpu_s: float = 0.0
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0
    beats_baselines: bool = False  # the harness's call on `evaluation` (Iteration.beats_baselines)


def require_member(user: AbstractBaseUser, team: Team) -> None:
    if not Membership.objects.filter(team=team, user=user).exists():
        raise PermissionDenied("You are not a member of this team.")


def tasks_create(*, job: Job, problems: Sequence[kernels.Problem], queue: str) -> list[Task]:
    """One Problem and one Task per problem, in order, each sent to `queue` after commit.

    The only place tasks are made: a shape set's at submission, a model job's from its plan.
    Call inside the transaction that saves the job.
    """
    tasks = []
    for position, spec in enumerate(problems):
        problem = Problem.objects.create(
            job=job,
            position=position,
            op=spec.op,
            shape=list(spec.shape),
            dtype=spec.dtype,
            layout=spec.layout,
            key=spec.key,
        )
        task = Task.objects.create(job=job, problem=problem, queue=queue)
        transaction.on_commit(lambda t=task.id: _send(task_id=t, queue=queue))
        tasks.append(task)
    return tasks


def _send(*, task_id: int, queue: str) -> bool:
    """Hand a task to the broker and note when it took it.

    A broker that is down must not lose the job (it is already saved): the task stays QUEUED
    with no enqueued_at, and the watchdog sends it again (tasks_send_unsent). A duplicate
    message is harmless, because run_task claims with a compare-and-set. Optimizations go at
    a lower priority than checks (see check_route), so a check is the next thing a queue runs.
    """
    try:
        run_task_task.apply_async(
            args=[task_id], queue=queue, priority=settings.KF_OPTIMIZE_PRIORITY
        )
    except Exception:
        log.exception("could not enqueue task %s on %s; the watchdog will retry", task_id, queue)
        return False
    Task.objects.filter(id=task_id).update(enqueued_at=timezone.now())
    return True


def tasks_send_unsent(*, older_than_s: float) -> list[int]:
    """Send again the QUEUED tasks whose message never reached the broker."""
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    unsent = Task.objects.filter(
        status=Task.Status.QUEUED, enqueued_at__isnull=True, job__created_at__lt=cutoff
    ).values_list("id", "queue")
    return [task_id for task_id, queue in list(unsent) if _send(task_id=task_id, queue=queue)]


def tasks_send_queued() -> list[int]:
    """Send every QUEUED task again, for a broker that started empty: `up`'s private Redis
    keeps nothing on disk, so a restart loses the messages of tasks queued (or handed back)
    before it. A duplicate is harmless: run_task claims with a compare-and-set."""
    queued = Task.objects.filter(status=Task.Status.QUEUED).values_list("id", "queue")
    return [task_id for task_id, queue in list(queued) if _send(task_id=task_id, queue=queue)]


def job_cancel(*, job: Job, user: AbstractBaseUser) -> bool:
    """Ask running tasks to stop (they poll the flag) and cancel the ones not started yet."""
    require_member(user, job.team)
    with transaction.atomic():
        _lock_job(job.id)
        changed = Job.objects.filter(
            id=job.id, status__in=Job.ACTIVE, cancel_requested=False
        ).update(cancel_requested=True)
        if not changed:
            return False
        Task.objects.filter(job_id=job.id, status=Task.Status.QUEUED).update(
            status=Task.Status.CANCELLED,
            finished_at=timezone.now(),
            stop_reason="cancelled before start",
        )
        _job_settle(job.id)
    status_notify(job.id)
    return True


def task_claim(*, task_id: int, worker: str) -> TaskClaim | None:
    """QUEUED -> RUNNING for this worker; None when another delivery got there first or it is over."""
    now = timezone.now()
    job_id = Task.objects.filter(id=task_id).values_list("job_id", flat=True).first()
    if job_id is None:
        return None
    with transaction.atomic():
        _lock_job(job_id)
        claimed = Task.objects.filter(id=task_id, status=Task.Status.QUEUED).update(
            status=Task.Status.RUNNING,
            attempt=F("attempt") + 1,
            worker=worker[:200],
            heartbeat_at=now,
            started_at=now,
        )
        if claimed != 1:
            return None
        task = Task.objects.select_related("problem").get(id=task_id)
        Job.objects.filter(id=task.job_id, status=Job.Status.QUEUED).update(
            status=Job.Status.RUNNING, started_at=now
        )
        claim = TaskClaim(
            task_id=task.id,
            job_id=task.job_id,
            attempt=task.attempt,
            problem=task.problem.to_dict(),
            resume_from=Iteration.objects.filter(task_id=task.id).count(),
        )
    status_notify(claim.job_id)
    return claim


def task_heartbeat(*, task_id: int, attempt: int) -> bool:
    """Mark the run alive; False when this run no longer owns the task (requeued or finished)."""
    return (
        Task.objects.filter(id=task_id, attempt=attempt, status=Task.Status.RUNNING).update(
            heartbeat_at=timezone.now()
        )
        == 1
    )


def task_should_stop(*, task_id: int, attempt: int) -> bool:
    """True when the user cancelled the job or this run lost the task to another attempt."""
    row = (
        Task.objects.filter(id=task_id).values("status", "attempt", "job__cancel_requested").first()
    )
    if row is None:
        return True
    lost = row["status"] != Task.Status.RUNNING or row["attempt"] != attempt
    return lost or row["job__cancel_requested"]


def iteration_record(*, task_id: int, attempt: int, data: IterationData) -> Iteration | None:
    """Save one iteration with the job's next seq, then notify the job's group.

    Idempotent: an index already saved for this task (a redelivered run repeating itself) is
    returned as is, with no new seq and no notification. Returns None when this run no longer
    owns the task, so a run the watchdog replaced cannot write.
    """
    existing = Iteration.objects.filter(task_id=task_id, index=data.index).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            task = Task.objects.filter(id=task_id).values("job_id").get()
            # The UPDATE locks the job row until commit, so seqs are handed out one at a time
            # (PostgreSQL row lock; SQLite serializes writers with BEGIN IMMEDIATE).
            Job.objects.filter(id=task["job_id"]).update(last_seq=F("last_seq") + 1)
            owner = Task.objects.filter(
                id=task_id, attempt=attempt, status=Task.Status.RUNNING
            ).update(heartbeat_at=timezone.now())
            if owner != 1:
                transaction.set_rollback(True)
                return None
            seq = Job.objects.filter(id=task["job_id"]).values_list("last_seq", flat=True).get()
            facts = selectors.result_facts(
                verdict=data.verdict,
                speedup=data.speedup,
                source=data.source,
                evaluation=data.evaluation,
                beats_baselines=data.beats_baselines,
            )  # a new row has no final evaluation yet (iteration_final_record adds it)
            iteration = Iteration.objects.create(
                job_id=task["job_id"],
                task_id=task_id,
                seq=seq,
                attempt=attempt,
                index=data.index,
                parent=data.parent,
                verdict=Iteration.Verdict(data.verdict),
                hypothesis=data.hypothesis,
                reason=data.reason[:500],
                candidate_id=data.candidate_id[:100],
                family=data.family or "",
                params=data.params,
                source=data.source,
                evaluation=data.evaluation,
                speedup=data.speedup,
                best_speedup=data.best_speedup,
                fastest_speedup=selectors.fastest_speedup(data.evaluation),
                interpreter=facts.interpreter,
                implausible=facts.implausible,
                ranked=facts.ranked,
                beats_baselines=data.beats_baselines,
                elapsed_s=data.elapsed_s,
                gpu_s=data.gpu_s,
                llm_tokens=data.llm_tokens,
                llm_cost_usd=data.llm_cost_usd,
            )
    except IntegrityError:
        # A concurrent run saved this index between our check and our insert.
        return Iteration.objects.get(task_id=task_id, index=data.index)
    iteration = Iteration.objects.select_related("task__problem").get(id=iteration.id)
    events.broadcast(iteration.job_id, events.ITERATION, selectors.iteration_event(iteration))
    return iteration


def iteration_final_record(
    *,
    task_id: int,
    attempt: int,
    index: int,
    evaluation: dict[str, Any],
    beats_baselines: bool,
) -> Iteration | None:
    """Store the final full-protocol evaluation of the task's best (index), with the harness's
    call on it (`beats_baselines`), and apply the rules to it: a best that the full protocol
    finds slower than some baseline is no longer ranked, one it confirms is. None when this run
    no longer owns the task or there is no such row."""
    with transaction.atomic():
        owner = Task.objects.filter(id=task_id, attempt=attempt, status=Task.Status.RUNNING)
        it = Iteration.objects.select_for_update().filter(task_id=task_id, index=index).first()
        if it is None or not owner.exists():
            return None
        facts = selectors.result_facts(
            verdict=it.verdict,
            speedup=it.speedup,
            source=it.source,
            evaluation=it.evaluation,
            beats_baselines=beats_baselines,
            final_evaluation=evaluation,
        )
        it.final_evaluation = evaluation
        it.beats_baselines = beats_baselines
        it.fastest_speedup = selectors.fastest_speedup(evaluation)
        it.interpreter, it.implausible, it.ranked = (
            facts.interpreter,
            facts.implausible,
            facts.ranked,
        )
        # save(), not update(): the leaderboard listens for the row's change (dashboard.signals).
        it.save(
            update_fields=[
                "final_evaluation",
                "beats_baselines",
                "fastest_speedup",
                "interpreter",
                "implausible",
                "ranked",
            ]
        )
    return it


def iteration_profile_record(*, task_id: int, index: int, profile: dict[str, Any]) -> bool:
    return Iteration.objects.filter(task_id=task_id, index=index).update(profile=profile) == 1


def task_search_record(*, task_id: int, attempt: int, search: dict[str, Any]) -> bool:
    """Store the run's search progress (tiers, throughput, time) and poke the job's page.
    Only the attempt that owns the running task writes."""
    changed = Task.objects.filter(id=task_id, attempt=attempt, status=Task.Status.RUNNING).update(
        search=search
    )
    if changed != 1:
        return False
    status_notify(Task.objects.values_list("job_id", flat=True).get(id=task_id))
    return True


def task_finish(*, task_id: int, attempt: int, stop_reason: str) -> bool:
    """RUNNING -> DONE (or CANCELLED when the run stopped because the user asked)."""
    return _task_end(task_id=task_id, attempt=attempt, stop_reason=stop_reason, error="")


def task_fail(*, task_id: int, attempt: int, error: str) -> bool:
    return _task_end(task_id=task_id, attempt=attempt, stop_reason="failed", error=error)


def _task_end(*, task_id: int, attempt: int, stop_reason: str, error: str) -> bool:
    with transaction.atomic():
        job_id = Task.objects.filter(id=task_id).values_list("job_id", flat=True).get()
        _lock_job(job_id)
        cancelled = Job.objects.filter(id=job_id).values_list("cancel_requested", flat=True).get()
        if error:
            status = Task.Status.FAILED
        elif cancelled:
            status = Task.Status.CANCELLED
        else:
            status = Task.Status.DONE
        changed = Task.objects.filter(
            id=task_id, attempt=attempt, status=Task.Status.RUNNING
        ).update(
            status=status, finished_at=timezone.now(), stop_reason=stop_reason[:200], error=error
        )
        if changed != 1:
            return False
        _job_settle(job_id)
    status_notify(job_id)
    return True


def _lock_job(job_id: uuid.UUID) -> None:
    """Take the job row's lock first in every write transaction, so they queue in one order.

    A no-op on SQLite, where BEGIN IMMEDIATE already serializes writers.
    """
    Job.objects.select_for_update().filter(id=job_id).values_list("id", flat=True).get()


def _job_settle(job_id: uuid.UUID) -> None:
    """Close the job once no task is active. Call inside a transaction holding the job row."""
    if Task.objects.filter(job_id=job_id, status__in=Task.ACTIVE).exists():
        return
    cancel_requested = (
        Job.objects.filter(id=job_id).values_list("cancel_requested", flat=True).get()
    )
    if not cancel_requested and ModelRun.objects.filter(job_id=job_id).exists():
        return  # a model job ends after its end-to-end check: model_services closes it
    statuses = set(Task.objects.filter(job_id=job_id).values_list("status", flat=True))
    if cancel_requested:
        final = Job.Status.CANCELLED
    elif Task.Status.DONE in statuses:
        final = Job.Status.DONE
    else:
        final = Job.Status.FAILED
    Job.objects.filter(id=job_id, status__in=Job.ACTIVE).update(
        status=final, finished_at=timezone.now()
    )


def tasks_requeue_stale(*, stale_after_s: float, max_attempts: int) -> list[int]:
    """The watchdog: RUNNING tasks whose heartbeat stopped go back to QUEUED (or FAILED).

    A worker that died (SIGKILL, OOM, lost machine) leaves its task RUNNING with an old
    heartbeat. We re-queue explicitly instead of relying on task_reject_on_worker_lost
    (RELIABILITY.md R4.7); the new run resumes after the iterations already saved.
    """
    cutoff = timezone.now() - timedelta(seconds=stale_after_s)
    requeued: list[int] = []
    stale = Task.objects.filter(status=Task.Status.RUNNING, heartbeat_at__lt=cutoff).values_list(
        "id", "attempt", "job_id", "queue"
    )
    for task_id, attempt, job_id, queue in list(stale):
        with transaction.atomic():
            _lock_job(job_id)
            if attempt >= max_attempts:
                gave_up = Task.objects.filter(
                    id=task_id, attempt=attempt, status=Task.Status.RUNNING, heartbeat_at__lt=cutoff
                ).update(
                    status=Task.Status.FAILED,
                    finished_at=timezone.now(),
                    stop_reason="worker lost",
                    error=f"the worker stopped responding {attempt} times; giving up",
                )
                if gave_up:
                    _job_settle(job_id)
                    transaction.on_commit(lambda j=job_id: status_notify(j))
                continue
            changed = Task.objects.filter(
                id=task_id, attempt=attempt, status=Task.Status.RUNNING, heartbeat_at__lt=cutoff
            ).update(
                status=Task.Status.QUEUED,
                worker="",
                stop_reason="requeued: heartbeat stopped",
                enqueued_at=None,
            )
            if changed:
                requeued.append(task_id)
                transaction.on_commit(lambda t=task_id, q=queue: _send(task_id=t, queue=q))
                transaction.on_commit(lambda j=job_id: status_notify(j))
    if requeued:
        log.warning(
            "watchdog re-queued tasks %s (heartbeat older than %ss)", requeued, stale_after_s
        )
    return requeued


def task_release(*, task_id: int, attempt: int) -> bool:
    """RUNNING -> QUEUED for a run whose worker is shutting down (workers/stopping.py): it
    stopped at a safe point, so the next worker resumes after what it saved. Sent again at
    once; if that message is lost (a private Redis that stops with `up`), the task has no
    enqueued_at and the watchdog sends it again."""
    job_id = Task.objects.filter(id=task_id).values_list("job_id", flat=True).first()
    if job_id is None:
        return False
    with transaction.atomic():
        _lock_job(job_id)
        task = Task.objects.filter(id=task_id, attempt=attempt, status=Task.Status.RUNNING)
        queue = task.values_list("queue", flat=True).first()
        released = task.update(
            status=Task.Status.QUEUED,
            worker="",
            stop_reason="requeued: its worker stopped",
            enqueued_at=None,
        )
        if not released:
            return False
        transaction.on_commit(lambda: _send(task_id=task_id, queue=queue))
    status_notify(job_id)
    return True


def status_notify(job_id: uuid.UUID | str) -> None:
    """Tell the job's page (and API streams) its current status, after the row changed."""
    events.broadcast(job_id, events.STATUS, job_status_event(job_id=job_id))


def check_route(work_queue: str) -> tuple[str, int]:
    """(queue, priority) for a model job's short check: its profile and its end-to-end verify.

    A check on a CPU queue needs nothing the control worker lacks, so it runs there and never
    waits for an optimization. A check of a GPU job times the model on that GPU, so it stays on
    the GPU's queue but goes first (optimizations are sent at a lower priority): it runs as
    soon as the optimization in progress ends, never beside it, which would spoil both timings.
    """
    if work_queue.startswith("gpu."):
        return work_queue, settings.KF_CHECK_PRIORITY
    return settings.KF_CONTROL_QUEUE, settings.KF_CHECK_PRIORITY
