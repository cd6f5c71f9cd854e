"""Where a queued task stands: how many tasks are ahead of it on its queue, and at most how long
they can take (from their budgets: a task's agent stops when its budget is spent).

A worker runs one task at a time, whichever team it belongs to, so on a box with one worker
(a CPU box under `make up`) a job waits for every task queued before it. The broker serves a
queue first in, first out (model checks aside, which are short), so "ahead" is every running
task of the queue and every queued one sent before this one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db.models import Count
from django.utils import timezone

from webapp.jobs.models import ModelRun, Task

CPU_QUEUE = "cpu"  # the Triton-interpreter worker's queue (`up` without a GPU)


def time_word(queue: str) -> str:
    """What a task's budget buys: CPU time on the interpreter queue, GPU time elsewhere."""
    return "CPU" if queue == CPU_QUEUE else "GPU"


@dataclass(frozen=True)
class QueueSpot:
    ahead: int  # tasks before this one on its queue: running, or queued earlier
    running: int  # of them, running now (at least that many workers serve the queue)
    wait_s: float  # at most this long before it starts: the budgets left ahead, per worker


def queue_spots(
    *, job_id: uuid.UUID | str, tasks: list[Task] | None = None
) -> dict[int, QueueSpot]:
    """Task id -> its spot, for each queued task of the job (`tasks`: the job's, when the
    caller has them). No query when none is queued, else up to three."""
    if tasks is None:
        tasks = list(Task.objects.filter(job_id=job_id))
    mine = sorted((t for t in tasks if t.status == Task.Status.QUEUED), key=lambda t: t.id)
    if not mine:
        return {}
    active = list(
        Task.objects.filter(queue__in={t.queue for t in mine}, status__in=Task.ACTIVE)
        .select_related("job", "problem")
        .annotate(job_tasks=Count("job__tasks"))
        .order_by("id")
    )
    budgets = _budgets_s(active)
    now = timezone.now()
    spots = {}
    for task in mine:
        running = [t for t in active if t.queue == task.queue and t.status == Task.Status.RUNNING]
        waiting = [
            t
            for t in active
            if t.queue == task.queue and t.status == Task.Status.QUEUED and t.id < task.id
        ]
        left = sum(
            max(0.0, budgets[t.id] - (now - (t.started_at or now)).total_seconds()) for t in running
        ) + sum(budgets[t.id] for t in waiting)
        spots[task.id] = QueueSpot(
            ahead=len(running) + len(waiting),
            running=len(running),
            wait_s=left / max(1, len(running)),
        )
    return spots


def _budgets_s(tasks: list[Task]) -> dict[int, float]:
    """Each task's budget in seconds, as selectors.task_budget_s gives it to the agent: a model
    job's plan funds each problem; a shape set splits its budget evenly."""
    plans = dict(
        ModelRun.objects.filter(job_id__in={t.job_id for t in tasks}).values_list("job_id", "plan")
    )
    out = {}
    for t in tasks:
        planned = {i["key"]: i["budget_s"] for i in (plans.get(t.job_id) or {}).get("items", [])}
        even = t.job.gpu_minutes * 60.0 / max(1, t.job_tasks)
        out[t.id] = float(planned.get(t.problem.key, even))
    return out


def queued_note(spot: QueueSpot | None, queue: str) -> str:
    """The Note of a queued task on its job page."""
    if spot is None:
        return ""
    if spot.ahead == 0:
        return f"next on {queue}: starts when a worker of {queue} is free"
    tasks = "task" if spot.ahead == 1 else "tasks"
    minutes = max(1, round(spot.wait_s / 60))
    return (
        f"{spot.ahead} {tasks} ahead on {queue} (a worker runs one task at a time, for every "
        f"team): starts within about {minutes} min"
    )
