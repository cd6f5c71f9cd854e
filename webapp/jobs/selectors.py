"""Reads about jobs, always scoped to what the user may see (membership of the job's team)."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import BooleanField, Count, ExpressionWrapper, Q, QuerySet
from django.db.models.fields.json import KT

from webapp.jobs.models import Iteration, Job, Task
from webapp.modeljobs.models import ModelRun


def jobs_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    if not user.is_authenticated:
        return Job.objects.none()
    return Job.objects.filter(team__memberships__user=user)


def job_list_for_user(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    return (
        jobs_visible_to(user=user)
        .select_related("team")
        .annotate(problem_count=Count("problems", distinct=True))
        .order_by("-created_at")
    )


def job_get_for_user(
    *, user: AbstractBaseUser | AnonymousUser, job_id: uuid.UUID | str
) -> Job | None:
    """The job if the user is a member of its team, else None (the caller answers 404)."""
    return jobs_visible_to(user=user).select_related("team", "created_by").filter(id=job_id).first()


def iterations_after(
    *, job_id: uuid.UUID | str, after_seq: int, limit: int = 1000
) -> list[dict[str, Any]]:
    """Events with seq > after_seq, in order: what a (re)connecting browser has not seen."""
    rows = (
        Iteration.objects.filter(job_id=job_id, seq__gt=after_seq)
        .select_related("task__problem")
        # Events never carry the large fields: reading them made a 1,000-event backfill slow.
        .defer("source", "evaluation", "params", "profile")
        .annotate(profile_present=ExpressionWrapper(Q(profile__isnull=False), BooleanField()))
        .annotate(timing_regime=KT("evaluation__timings__regime"))
        .order_by("seq")[:limit]
    )
    return [iteration_event(row) for row in rows]


def iteration_event(it: Iteration) -> dict[str, Any]:
    """The browser's view of one iteration; sources and profiles are fetched by id, not pushed."""
    return {
        "seq": it.seq,
        "task": it.task_id,
        "problem": it.task.problem.key,
        "index": it.index,
        "parent": it.parent,
        "verdict": it.verdict,
        "verdict_label": Iteration.Verdict(it.verdict).label,
        "hypothesis": it.hypothesis,
        "reason": it.reason,
        "candidate_id": it.candidate_id,
        "speedup": it.speedup,
        "best_speedup": it.best_speedup,
        # Triton CPU-interpreter timings check correctness only; the page must not show their
        # ratios as speedups.
        "interpreter": _timing_regime(it) == "interpreter",
        "elapsed_s": round(it.elapsed_s, 3),
        "has_profile": _has_profile(it),
        # For the dashboard's live chart and budget meters (issue 7).
        "at": it.created_at.isoformat(),
        "gpu_s": it.gpu_s,
        "llm_cost_usd": it.llm_cost_usd,
    }


def _timing_regime(it: Iteration) -> str | None:
    if hasattr(it, "timing_regime"):  # annotated where the evaluation JSON is deferred
        return it.timing_regime
    return ((it.evaluation or {}).get("timings") or {}).get("regime")


def _has_profile(it: Iteration) -> bool:
    present = getattr(it, "profile_present", None)  # annotated where the JSON is deferred
    return it.profile is not None if present is None else present


def search_line(search: dict[str, Any]) -> str:
    """A task's search in one line for its row on the job page: screened vs fully verified,
    each tier's candidates per GPU-hour, and where the time went ("" before any)."""
    if not search:
        return ""
    tiers, times = search.get("tiers") or {}, search.get("time_s") or {}

    def tier(name: str, label: str) -> str:
        t = tiers.get(name) or {}
        rate = t.get("per_gpu_hour")
        per = f", {rate:,.0f}/GPU-h" if rate else ""
        return f"{label} {t.get('candidates', 0)}{per}"

    parts = [tier("screen", "screened"), tier("verify", "fully verified")]
    if (tiers.get("check") or {}).get("candidates"):
        parts.append(tier("check", "LLM code checked"))
    spent = ", ".join(
        f"{name} {times.get(key, 0):.0f} s"
        for name, key in (
            ("compile", "compile"),
            ("screen", "screen"),
            ("verify", "verify"),
            ("profile", "profile"),
        )
    )
    line = " · ".join(parts) + f" · time: {spent}"
    if search.get("outcome_reason"):
        line += f" · {search['outcome_reason']}"
    return line


def job_status_event(*, job_id: uuid.UUID | str) -> dict[str, Any]:
    """The job's and its tasks' current states, sent on connect and after each transition."""
    job = Job.objects.get(id=job_id)
    tasks = Task.objects.filter(job_id=job_id).select_related("problem").order_by("id")
    label = Job.Status(job.status).label
    # A model job stays running through its end-to-end check: the header says which part.
    verifying = Job.objects.filter(id=job.id, model_run__status=ModelRun.Status.VERIFYING)
    if job.status == Job.Status.RUNNING and verifying.exists():
        label = ModelRun.Status.VERIFYING.label
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
                "error": t.error[:500],
                "search_line": search_line(t.search),
            }
            for t in tasks
        ],
    }
