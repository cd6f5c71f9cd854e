"""Per-team limits on what may be queued: concurrent jobs and GPU minutes in a rolling window.

GPU minutes count what iterations actually used (Iteration.gpu_s) inside the window, plus
what active jobs may still spend (their budget minus what they used), so a burst of
submissions cannot overbook the team. submission.jobs_submit checks them, under a lock on the
team row, for the web form and the API alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.jobs.models import Iteration, Job


class QuotaExceeded(Exception):
    """A new job does not fit the team's limits; `code` is the API's stable error code."""

    def __init__(self, code: str, message: str, details: list[dict]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@dataclass(frozen=True)
class TeamUsage:
    active_jobs: int
    max_active_jobs: int
    gpu_minutes_used: float  # spent inside the window
    gpu_minutes_reserved: float  # still spendable by the team's active jobs
    gpu_minutes_quota: int
    window_days: int

    @property
    def gpu_minutes_available(self) -> float:
        return max(0.0, self.gpu_minutes_quota - self.gpu_minutes_used - self.gpu_minutes_reserved)


def team_usage(*, team_id: int) -> TeamUsage:
    window_days = settings.KF_TEAM_GPU_WINDOW_DAYS
    since = timezone.now() - timedelta(days=window_days)
    used_s = (
        Iteration.objects.filter(job__team_id=team_id, created_at__gte=since).aggregate(
            s=Sum("gpu_s")
        )["s"]
        or 0.0
    )
    budgets = dict(
        Job.objects.filter(team_id=team_id, status__in=Job.ACTIVE).values_list("id", "gpu_minutes")
    )
    active = list(budgets)
    spent = dict(
        Iteration.objects.filter(job_id__in=active)
        .values("job_id")
        .annotate(s=Sum("gpu_s"))
        .values_list("job_id", "s")
    )
    reserved_min = sum(
        max(0.0, budgets[job_id] - (spent.get(job_id) or 0.0) / 60) for job_id in active
    )
    return TeamUsage(
        active_jobs=len(active),
        max_active_jobs=settings.KF_TEAM_MAX_ACTIVE_JOBS,
        gpu_minutes_used=round(used_s / 60, 3),
        gpu_minutes_reserved=round(reserved_min, 3),
        gpu_minutes_quota=settings.KF_TEAM_GPU_MINUTES,
        window_days=window_days,
    )


def quota_check(*, team_id: int, gpu_minutes: int, jobs: int = 1) -> TeamUsage:
    """Raise QuotaExceeded if `jobs` new jobs of `gpu_minutes` each do not fit; else the usage."""
    usage = team_usage(team_id=team_id)
    if usage.active_jobs + jobs > usage.max_active_jobs:
        raise QuotaExceeded(
            "quota_active_jobs",
            f"The team already has {usage.active_jobs} queued or running jobs; the limit is "
            f"{usage.max_active_jobs}"
            + (f", and this upload would add {jobs}" if jobs > 1 else "")
            + ". Wait for one to finish or cancel one.",
            [{"active_jobs": usage.active_jobs, "max_active_jobs": usage.max_active_jobs}],
        )
    wanted = gpu_minutes * jobs
    if wanted > usage.gpu_minutes_available:
        raise QuotaExceeded(
            "quota_gpu_minutes",
            f"A budget of {wanted} GPU minutes does not fit: the team has "
            f"{usage.gpu_minutes_available:.1f} of {usage.gpu_minutes_quota} left in this "
            f"{usage.window_days}-day window (active jobs hold {usage.gpu_minutes_reserved:.1f}).",
            [
                {
                    "requested_gpu_minutes": wanted,
                    "available_gpu_minutes": usage.gpu_minutes_available,
                    "quota_gpu_minutes": usage.gpu_minutes_quota,
                }
            ],
        )
    return usage


def quota_check_locked(*, team_id: int, gpu_minutes: int, jobs: int = 1) -> TeamUsage:
    """quota_check under a lock on the team row, so concurrent submissions are checked in turn.

    Call inside the transaction that creates the jobs (submission.jobs_submit does).
    """
    Team.objects.select_for_update().filter(id=team_id).values_list("id", flat=True).get()
    return quota_check(team_id=team_id, gpu_minutes=gpu_minutes, jobs=jobs)
