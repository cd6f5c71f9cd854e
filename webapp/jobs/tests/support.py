"""Helpers for tests that need a job: made the one way jobs are made (submission.jobs_submit)."""

from __future__ import annotations

from collections.abc import Sequence

import kernels
from kernels.model_source import ModelSource
from webapp.jobs.models import Job
from webapp.jobs.submission import JobRequest, jobs_submit


def shape_job(user, team, problems: Sequence[kernels.Problem], *, queue: str = "test.nobody",
              title: str = "t", gpu_minutes: int = 30) -> Job:  # fmt: skip
    """A shape-set job; its tasks are sent to `queue` after commit (by default one no worker
    reads, so the test drives the task states itself)."""
    request = JobRequest(
        team=team, title=title, queue=queue, gpu_minutes=gpu_minutes, problems=tuple(problems)
    )
    (job,) = jobs_submit(user=user, request=request)
    return job


def model_jobs(user, team, sources: Sequence[ModelSource], *, queue: str = "test.nobody",
               title: str = "m", gpu_minutes: int = 10, example: str = "") -> list[Job]:  # fmt: skip
    request = JobRequest(
        team=team,
        title=title,
        queue=queue,
        gpu_minutes=gpu_minutes,
        model_sources=tuple(sources),
        example=example,
    )
    return jobs_submit(user=user, request=request)
