"""Reads about model jobs: the winners to substitute, and the page's profile/plan/result."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Q

from webapp.jobs.models import Iteration, Task
from webapp.modeljobs.models import ModelRun


def model_winners(*, job_id: uuid.UUID | str) -> list[dict[str, Any]]:
    """Per problem, the best kept candidate measured faster than the baseline (key, source,
    speedup); problems with none keep the model's own code."""
    winners = []
    tasks = (
        Task.objects.filter(job_id=job_id).select_related("problem").order_by("problem__position")
    )
    for task in tasks:
        best = (
            Iteration.objects.filter(task=task, speedup__gt=1.0)
            .filter(Q(verdict=Iteration.Verdict.KEPT))
            .exclude(source="")
            .order_by("-speedup")
            .first()
        )
        if best is not None:
            winners.append(
                {"key": task.problem.key, "source": best.source, "speedup": best.speedup}
            )
    return winners


def model_run_for_job(*, job_id: uuid.UUID | str) -> ModelRun | None:
    return ModelRun.objects.filter(job_id=job_id).first()


def profile_chart(run: ModelRun) -> dict[str, Any] | None:
    """Data for the plotly bar chart: time per op group, largest first (at most 25 bars)."""
    if not run.profile or not run.profile.get("groups"):
        return None
    groups = run.profile["groups"][:25]
    return {
        "label": run.profile.get("label", ""),
        "device": run.profile.get("device_name", ""),
        "labels": [g["label"] for g in groups],
        "time_us": [round(g["time_us"], 2) for g in groups],
        "share": [g["share"] for g in groups],
        "op": [g["op"] for g in groups],
        "optimizable": [bool(g["problem"]) for g in groups],
    }


def task_budget_s(*, task_id: int) -> float | None:
    """A model job task's slice of the job budget (the Amdahl plan's split), None for others.

    workers/agent.py passes it to the agent as its GPU-time and wall-time caps.
    """
    task = Task.objects.filter(id=task_id).select_related("problem").first()
    run = ModelRun.objects.filter(job_id=task.job_id).first() if task else None
    if run is None or not run.plan:
        return None
    for item in run.plan["items"]:
        if item["key"] == task.problem.key:
            return float(item["budget_s"])
    return None
