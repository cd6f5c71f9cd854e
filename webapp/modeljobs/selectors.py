"""Reads about model jobs: the winners to substitute, and the page's profile/plan/result."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
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


@dataclass(frozen=True)
class WayRow:
    """One way the model ran in the end-to-end check (harness.model.verify's variants)."""

    name: str
    label: str
    side: str  # "baseline": PyTorch alone; "ours": with the kernels substituted
    offline_us: float | None  # median forward, back to back
    server_us: float | None  # median forward, one call at a time (GPU only)
    compile_s: float | None
    ok: bool  # outputs within tolerance of eager PyTorch's
    error: str
    vs_best_baseline: float | None  # best baseline's median / this one's
    best: bool  # the best of its side


@dataclass(frozen=True)
class EndToEndView:
    rows: list[WayRow]
    best_baseline: WayRow | None
    best_ours: WayRow | None
    speedup: float | None
    speedup_ci: list[float] | None
    faster: bool  # verified faster than the best baseline: the only case that ships
    message: str
    device_name: str
    chart: dict[str, Any]


# The order the page lists the ways in: baselines first, each next to its counterpart with the
# kernels (JSONB keeps no key order, so the table cannot take the stored one).
WAYS = (
    "eager",
    "cuda_graphs",
    "compile",
    "compile_max_autotune",
    "compile_cuda_graphs",
    "ours",
    "ours_cuda_graphs",
    "ours_compile",
    "ours_compile_cuda_graphs",
)


def end_to_end_view(run: ModelRun) -> EndToEndView | None:
    """The end-to-end table and chart: every baseline and every way with the kernels, their
    compile times, and how each compares to the best baseline. None for a run with no check
    yet (or one recorded before the baselines were timed)."""
    e2e = run.end_to_end or {}
    variants = e2e.get("variants")
    if not variants:
        return None
    regime = "offline" if any(v.get("offline") for v in variants.values()) else "interpreter"
    best_us = e2e.get("baseline_us")
    rows = []
    order = sorted(variants, key=lambda n: (WAYS.index(n) if n in WAYS else len(WAYS), n))
    for name in order:
        v = variants[name]
        median = (v.get(regime) or {}).get("median_us")
        rows.append(
            WayRow(
                name=name,
                label=v.get("label", name),
                side=v.get("side", ""),
                offline_us=median,
                server_us=(v.get("server") or {}).get("median_us"),
                compile_s=v.get("compile_s"),
                ok=bool(v.get("ok")),
                error=(v.get("error") or "")[-300:],
                vs_best_baseline=best_us / median if best_us and median else None,
                best=name in (e2e.get("best_baseline"), e2e.get("best_ours")),
            )
        )
    by_name = {r.name: r for r in rows}
    timed = [r for r in rows if r.offline_us]
    return EndToEndView(
        rows=rows,
        best_baseline=by_name.get(e2e.get("best_baseline")),
        best_ours=by_name.get(e2e.get("best_ours")),
        speedup=e2e.get("speedup"),
        speedup_ci=e2e.get("speedup_ci"),
        faster=bool(e2e.get("faster")),
        message=e2e.get("message", ""),
        device_name=e2e.get("device_name", ""),
        chart={
            "labels": [r.label for r in timed],
            "us": [round(r.offline_us, 2) for r in timed],
            "side": [r.side for r in timed],
            "unit": "µs per forward" if regime == "offline" else "CPU µs per forward",
        },
    )
