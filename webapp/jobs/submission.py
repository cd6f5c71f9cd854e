"""The one way a job is made. The web form, the API (and so `kforge submit`) and model uploads
all validate with JobForm and create through jobs_submit, so they cannot drift apart again.

Inside one transaction: the user's membership, the team's quotas under a lock on the team row,
the job's GPU budget, the rows, and (after commit) the broker messages: one optimization per
problem of a shape set; a profile per model file, whose plan then makes the tasks
(model_services.model_profile_record).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.base import ContentFile
from django.db import transaction

import kernels
from kernels.model_source import ModelSource
from webapp.accounts.models import Team
from webapp.jobs import model_services
from webapp.jobs.models import Job, ModelRun
from webapp.jobs.queue import CPU_QUEUE, time_word
from webapp.jobs.quotas import quota_check_locked
from webapp.jobs.services import require_member, tasks_create

if TYPE_CHECKING:
    from webapp.jobs.forms import JobForm


@dataclass(frozen=True)
class JobRequest:
    """What a user asked for, already validated (JobForm): a shape set or model files."""

    team: Team
    title: str
    queue: str
    gpu_minutes: int  # for each job made
    problems: Sequence[kernels.Problem] = ()  # a shape set: one job, one task per problem
    model_sources: Sequence[ModelSource] = ()  # model files: one job each, profiled first
    example: str = ""  # the shipped example the model came from, if it did

    @classmethod
    def from_form(cls, form: JobForm, *, gpu_minutes: int) -> JobRequest:
        data = form.cleaned_data
        return cls(
            team=data["team"],
            title=data["title"],
            queue=data["queue"],
            gpu_minutes=gpu_minutes,
            problems=tuple(form.problems),
            model_sources=tuple(form.model_sources),
            example=data.get("example") or "",
        )


class BudgetTooSmall(ValueError):
    """A shape set's explicit budget leaves its problems too little for a search."""


def default_minutes(queue: str) -> int:
    """A job's budget when none is asked for: less on the CPU queue (one worker, every team)."""
    if queue == CPU_QUEUE:
        return settings.KF_CPU_JOB_DEFAULT_MINUTES
    return settings.KF_JOB_DEFAULT_GPU_MINUTES


def budget_minutes(*, n_problems: int, requested: int | None, queue: str = "") -> int:
    """A job's budget: what was asked for, else the queue's default, which grows with a shape
    set so that each of its `n_problems` gets KF_MIN_PROBLEM_GPU_MINUTES (0 problems: a model
    job, whose plan splits the budget). An explicit budget below that floor is refused."""
    floor = math.ceil(n_problems * settings.KF_MIN_PROBLEM_GPU_MINUTES)
    if requested is None:
        return max(default_minutes(queue), floor)
    if requested < floor:
        raise BudgetTooSmall(
            f"{n_problems} {'problem needs' if n_problems == 1 else 'problems need'} at least"
            f" {floor} {time_word(queue)} minutes "
            f"({settings.KF_MIN_PROBLEM_GPU_MINUTES:g} each: a search keeps its last "
            f"verification back from the start); {requested} would give each "
            f"{requested * 60 / n_problems:.0f} s, too little to search. Ask for {floor} or "
            "more, or split the shape set."
        )
    return requested


def jobs_submit(*, user: AbstractBaseUser, request: JobRequest) -> list[Job]:
    """Make the jobs of one submission: a shape set is one job; each model file is one.

    Raises PermissionDenied (not a member of the team), quotas.QuotaExceeded (does not fit the
    team's limits) or ValueError (neither or both of problems and model sources).
    """
    if bool(request.problems) == bool(request.model_sources):
        raise ValueError("a submission is either a shape set or model files")
    if request.gpu_minutes < 1:
        raise ValueError("a job needs a budget of at least one GPU minute")
    n_jobs = 1 if request.problems else len(request.model_sources)
    with transaction.atomic():
        require_member(user, request.team)
        quota_check_locked(team_id=request.team.id, gpu_minutes=request.gpu_minutes, jobs=n_jobs)
        if request.problems:
            job = _job(user, request, request.title, Job.Kind.SHAPES)
            job.save()
            tasks_create(job=job, problems=request.problems, queue=request.queue)
            return [job]
        return [_model_job(user, request, source) for source in request.model_sources]


def _job(user: AbstractBaseUser, request: JobRequest, title: str, kind: str) -> Job:
    return Job(
        team=request.team,
        created_by=user,
        title=title,
        kind=kind,
        gpu_minutes=request.gpu_minutes,
    )


def _model_job(user: AbstractBaseUser, request: JobRequest, source: ModelSource) -> Job:
    several = len(request.model_sources) > 1
    title = f"{request.title}: {source.title}"[:120] if several else request.title
    job = _job(user, request, title, Job.Kind.MODEL)
    job.model_file.save(source.name, ContentFile(source.text.encode()), save=False)
    job.save()
    ModelRun.objects.create(job=job, queue=request.queue, example=request.example)
    model_services.profile_send_after_commit(job_id=job.id, queue=request.queue)
    return job
