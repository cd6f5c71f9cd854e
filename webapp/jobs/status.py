"""The job's status event (sent on connect and after each transition, shown by the job page,
streamed by the API) and what it says about each task, in words a user can check against each
other:

- its note: why it stopped ("GPU time budget spent", "CPU time budget spent" on the CPU queue),
  never an internal code such as `gpu_time`;
- its search per family: renders screened and passed, the best screened speedup (the screen's
  quick ranking against eager PyTorch) and the best fully verified one (against the fastest
  baseline it was timed with, named), so the two are never read as one number;
- one outcome line that follows the one winner rule (Iteration.ranked, selectors.result_facts):
  the same call the download and the leaderboards make.

Numbers timed in Triton's CPU interpreter are marked as such and never shown as speedups.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import Any

from webapp.jobs.failures import scrub_paths
from webapp.jobs.models import Iteration, Job, ModelRun, Task
from webapp.jobs.queue import CPU_QUEUE, queue_spots, queued_note, time_word
from webapp.jobs.selectors import BEST_VERDICTS, best_baseline, why_not_ranked

# Attempts that passed every correctness stage (a reverted one passed but was not faster).
PASSED_VERDICTS = (*BEST_VERDICTS, Iteration.Verdict.REVERTED)

# agents.state.StopReason values (webapp may not import agents/), in words; "{time}" is "GPU"
# or "CPU" after the queue the task ran on.
STOP_REASONS = {
    "wall_time": "time budget spent",
    "gpu_time": "{time} time budget spent",
    "llm_tokens": "LLM token budget spent",
    "llm_cost": "LLM cost budget spent",
    "max_attempts": "attempt limit reached",
    "plateau": "stopped: no new best for several rounds",
    "roof": "reached the requested share of the device's roof",
    "target": "reached the target speedup",
    "cancelled": "cancelled",
    "exhausted": "stopped: nothing left to try",
    "harness_errors": "stopped: the harness failed several times in a row",
    "out_of_reach": "stopped: every kernel screened was far behind the fastest baseline",
}


def job_status_event(*, job_id: uuid.UUID | str) -> dict[str, Any]:
    """The job's and its tasks' current states, sent on connect and after each transition."""
    job = Job.objects.get(id=job_id)
    tasks = list(Task.objects.filter(job_id=job_id).select_related("problem").order_by("id"))
    label = Job.Status(job.status).label
    # A model job stays running through its end-to-end check: the header says which part.
    verifying = Job.objects.filter(id=job.id, model_run__status=ModelRun.Status.VERIFYING)
    if job.status == Job.Status.RUNNING and verifying.exists():
        label = ModelRun.Status.VERIFYING.label
    searches = task_searches(job_id=job.id, tasks=tasks)
    spots = queue_spots(job_id=job.id, tasks=tasks)
    return {
        "job": str(job.id),
        "status": job.status,
        "status_label": label,
        "terminal": job.is_terminal,
        "cancel_requested": job.cancel_requested,
        "last_seq": job.last_seq,
        "tasks": [
            {
                "id": t.id,
                "problem": t.problem.key,
                "queue": t.queue,
                "status": t.status,
                "status_label": Task.Status(t.status).label,
                "attempt": t.attempt,
                "stop_reason": t.stop_reason,
                "note": queued_note(spots.get(t.id), t.queue)
                or task_note(stop_reason=t.stop_reason, error=t.error, queue=t.queue),
                "queue_position": spots[t.id].ahead if t.id in spots else None,
                "error": scrub_paths(t.error)[:500],
                "search": searches[t.id].to_dict(),
            }
            for t in tasks
        ],
    }


def task_note(*, stop_reason: str, error: str, queue: str) -> str:
    """The job page's Note cell: an error's last line, else why the run stopped, in words."""
    if error.strip():
        return scrub_paths(error.strip().splitlines()[-1])[:200]
    return STOP_REASONS.get(stop_reason, stop_reason).format(time=time_word(queue))


WHY_NOT_CHARS = 320


@dataclass(frozen=True)
class FamilyRow:
    family: str
    screened: int
    passed: int
    best_screened: float | None  # the screen's speedup vs eager PyTorch (quick, GPU time)
    best_verified: float | None  # the full protocol's speedup vs its fastest baseline
    verified_baseline: str  # that baseline's name ("torch", "compile", ...)
    why_not: str  # why its other renders did not pass the screen (counts per reason)


@dataclass(frozen=True)
class TaskSearch:
    families: list[FamilyRow]
    screened: int
    verified: int  # candidates fully verified
    interpreter: bool  # timed in Triton's CPU interpreter: correctness only, never a speed
    outcome: str  # one line, by the one winner rule

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def task_searches(
    *, job_id: uuid.UUID | str, tasks: list[Task] | None = None
) -> dict[int, TaskSearch]:
    """Task id -> its search, for every task of the job (`tasks`, when the caller has them).
    Two queries whatever the history: the passing attempts' small columns, then the
    measurements of each family's best."""
    if tasks is None:
        tasks = list(Task.objects.filter(job_id=job_id).select_related("problem"))
    passed = list(
        Iteration.objects.filter(job_id=job_id, verdict__in=PASSED_VERDICTS)
        .only("id", "task_id", "family", "speedup", "interpreter", "ranked", "verdict", "index")
        .order_by("-speedup", "seq")
    )
    best: dict[tuple[int, str], int] = {}  # (task, family) -> the fastest passing attempt
    for it in passed:
        if it.speedup is not None:
            best.setdefault((it.task_id, it.family), it.id)
    full = {
        it.id: it
        for it in Iteration.objects.filter(id__in=[*best.values(), *_leaders(passed)]).defer(
            "source", "profile", "params"
        )
    }
    return {
        t.id: _task_search(t, [it for it in passed if it.task_id == t.id], best, full)
        for t in tasks
    }


def _leader(passed: list[Iteration]) -> Iteration | None:
    """What a task's outcome line is about: its winner (the fastest ranked attempt, as
    selectors.job_winners picks it), else its fastest kept one. `passed` is fastest first."""
    ranked = [it for it in passed if it.ranked]
    kept = [it for it in passed if it.verdict in BEST_VERDICTS]
    return (ranked or kept or [None])[0]


def _leaders(passed: list[Iteration]) -> list[int]:
    by_task: dict[int, list[Iteration]] = {}
    for it in passed:
        by_task.setdefault(it.task_id, []).append(it)
    return [leader.id for its in by_task.values() if (leader := _leader(its)) is not None]


def _task_search(
    task: Task,
    passed: list[Iteration],
    best: dict[tuple[int, str], int],
    full: dict[int, Iteration],
) -> TaskSearch:
    search = task.search or {}
    screen = search.get("families") or {}
    names = sorted({*screen, *(it.family for it in passed if it.family)})
    rows = []
    for name in names:
        s = screen.get(name) or {}
        verified = full.get(best.get((task.id, name), -1))
        fastest = best_baseline(verified.measurement) if verified is not None else None
        rows.append(
            FamilyRow(
                family=name,
                screened=int(s.get("screened", 0)),
                passed=int(s.get("passed", 0)),
                best_screened=s.get("best_speedup") or None,
                best_verified=fastest.speedup if fastest else None,
                verified_baseline=fastest.baseline if fastest else "",
                why_not=scrub_paths(str(s.get("why_not") or ""))[:WHY_NOT_CHARS],
            )
        )
    interpreter = task.queue == CPU_QUEUE or any(it.interpreter for it in passed)
    first = _leader(passed)
    leader = full.get(first.id) if first is not None else None
    return TaskSearch(
        families=rows,
        screened=int(search.get("screened", 0)),
        verified=int(search.get("fully_verified", 0)),
        interpreter=interpreter,
        outcome=_outcome(task, leader),
    )


def _outcome(task: Task, leader: Iteration | None) -> str:
    """One line, by the one winner rule: a ranked best is the winner a download ships; anything
    else leaves the problem to PyTorch, and says why."""
    if leader is not None and leader.ranked:
        fastest = best_baseline(leader.measurement)
        device = (leader.measurement.get("device") or {}).get("name", "")
        over = f"{fastest.speedup:.2f}× over {fastest.baseline}" if fastest else "verified"
        return (
            f"Winner: {leader.family or 'kernel'} #{leader.index}, {over} (the fastest "
            f"baseline), verified on {device or 'a GPU'}"
        )
    if task.status in Task.ACTIVE:
        return ""
    if task.status == Task.Status.CANCELLED or task.stop_reason == "cancelled":
        return "Cancelled before a winner: PyTorch serves this problem"
    if task.status == Task.Status.FAILED:
        return "Failed: PyTorch serves this problem"
    return f"No winner ({why_not_ranked(leader)}): PyTorch serves this problem"
