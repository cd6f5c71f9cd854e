"""Jobs: create (shape set or model file), list, read, cancel; their tasks and iterations;
their event stream; their winning kernels."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Literal

from asgiref.sync import sync_to_async
from django.db.models import Count, Max, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from ninja import File, Form, Path, Query, Router, Status
from ninja.files import UploadedFile

from webapp.api import events, selectors, services
from webapp.api.errors import ApiError, ErrorCode
from webapp.api.routes.common import ERRORS, principal
from webapp.api.schemas import (
    ErrorOut,
    IterationOut,
    IterationPage,
    JobCreateIn,
    JobDetailOut,
    JobPage,
    ModelJobOut,
    TaskOut,
    Text,
    WinnersOut,
)
from webapp.downloads.builder import build_package
from webapp.downloads.manifest import winner_path
from webapp.jobs import selectors as job_selectors
from webapp.jobs.failures import job_failure, scrub_paths
from webapp.jobs.models import Job, Task
from webapp.jobs.queue import QueueSpot, queue_spots
from webapp.jobs.shapes import ShapeFormat

router = Router(tags=["jobs"])

PG_INT_MAX = 2**31 - 1  # seq and counters are 32-bit columns
PG_BIGINT_MAX = 2**63 - 1
JobId = Annotated[uuid.UUID, Path(description="The job's id.")]
Seq = Annotated[int, Query(ge=0, le=PG_INT_MAX)]
JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]


# --- helpers ---------------------------------------------------------------------------------


def _job_or_404(request: HttpRequest, job_id: uuid.UUID) -> Job:
    job = selectors.job_for_principal(principal=principal(request), job_id=job_id)
    if job is None:
        raise ApiError(ErrorCode.NOT_FOUND, "No such job among this token's teams.")
    return job


def _job_out(request: HttpRequest, job: Job) -> dict:
    return {
        "id": job.id,
        "title": job.title,
        "team": job.team.slug,
        "kind": job.kind,
        "status": job.status,
        "terminal": job.is_terminal,
        "cancel_requested": job.cancel_requested,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "last_seq": job.last_seq,
        "gpu_minutes": job.gpu_minutes,
        "web_url": request.build_absolute_uri(reverse("jobs:detail", args=[job.id])),
    }


def _tasks(job: Job) -> QuerySet[Task]:
    return (
        Task.objects.filter(job=job)
        .select_related("problem")
        .annotate(
            n_iterations=Count("iterations"),
            # The one headline: over the fastest baseline timed (Iteration.fastest_speedup).
            best=Max("iterations__fastest_speedup", filter=Q(iterations__verdict="kept")),
        )
        .order_by("id")
    )


def _task_out(task: Task, spot: QueueSpot | None = None) -> dict:
    return {
        "id": task.id,
        "problem": task.problem.key,
        "queue": task.queue,
        "status": task.status,
        "attempt": task.attempt,
        "stop_reason": task.stop_reason,
        "error": scrub_paths(task.error),
        "started_at": task.started_at,
        "finished_at": task.finished_at,
        "iterations": task.n_iterations,
        "best_speedup": task.best,
        "queue_position": spot.ahead if spot else None,
        "wait_estimate_s": round(spot.wait_s) if spot else None,
    }


def _job_detail(request: HttpRequest, job: Job) -> dict:
    problems = [
        {
            "position": p.position,
            "key": p.key,
            "op": p.op,
            "shape": list(p.shape),
            "dtype": p.dtype,
            "layout": p.layout,
        }
        for p in job.problems.all()
    ]
    spots = queue_spots(job_id=job.id)
    tasks = [_task_out(t, spots.get(t.id)) for t in _tasks(job)]
    failure = job_failure(job=job)
    return {
        **_job_out(request, job),
        "problems": problems,
        "tasks": tasks,
        "failure": failure.to_dict() if failure else None,
    }


# --- jobs ------------------------------------------------------------------------------------


@router.post(
    "/jobs",
    response={201: JobDetailOut, 429: ErrorOut, **ERRORS},
    summary="Create a job from a shape set",
)
def job_create(request: HttpRequest, payload: JobCreateIn) -> Status:
    """Same validation as the web form; counts against the team's quotas (429 when full).
    With an `Idempotency-Key` header, a repeat of the request returns the job it made."""
    if payload.problems is not None:
        shapes, fmt = _problems_json(payload), ShapeFormat.JSON
    else:
        shapes, fmt = payload.shapes or "", ShapeFormat(payload.format)
    job = services.job_submit_shapes(
        principal=principal(request),
        team_slug=payload.team,
        title=payload.title or "Shape set from the API",
        shapes=shapes,
        fmt=fmt,
        queue=payload.queue,
        gpu_minutes=payload.gpu_minutes,
        idempotency_key=_idempotency_key(request),
    )
    return Status(201, _job_detail(request, job))


def _idempotency_key(request: HttpRequest) -> str:
    """The Idempotency-Key header: a client's name for one submission, so a retried POST
    (a timeout, a dropped connection) gets the job it already made instead of a second one."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > 200:
        raise ApiError(ErrorCode.VALIDATION_ERROR, "Idempotency-Key is longer than 200 characters.")
    return key


def _problems_json(payload: JobCreateIn) -> str:
    return json.dumps([p.dict() for p in payload.problems or []])


@router.post(
    "/jobs/model",
    response={201: ModelJobOut, 429: ErrorOut, **ERRORS},
    summary="Create a job from a model file (multipart)",
)
def job_create_from_model(
    request: HttpRequest,
    team: Annotated[Text, Form(min_length=1, max_length=90)],
    model_file: File[UploadedFile],
    title: Annotated[Text | None, Form(None, min_length=1, max_length=120)] = None,
    queue: Annotated[Text | None, Form(None, max_length=40)] = None,
    gpu_minutes: Annotated[int | None, Form(None, ge=1, le=1_000_000)] = None,
) -> Status:
    """A .py in the KernelBench convention (Model, get_inputs, get_init_inputs), or a .zip of
    them (one job each), as on the web form: profiled, planned, optimized and verified end to
    end. Each job gets `gpu_minutes` (the default when omitted). With an `Idempotency-Key`
    header, a repeat of the request returns the jobs it made."""
    jobs = services.job_submit_model(
        principal=principal(request),
        team_slug=team,
        title=title or model_file.name or "Model from the API",
        model_file=model_file,
        queue=queue,
        gpu_minutes=gpu_minutes,
        idempotency_key=_idempotency_key(request),
    )
    return Status(
        201, {**_job_detail(request, jobs[0]), "submitted_jobs": [job.id for job in jobs]}
    )


@router.get("/jobs", response={200: JobPage, **ERRORS}, summary="List jobs, newest first")
def job_list(
    request: HttpRequest,
    team: Annotated[Text | None, Query(max_length=90, description="A team's slug")] = None,
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=PG_INT_MAX)] = 0,
) -> dict:
    jobs = selectors.jobs_for_principal(principal=principal(request))
    if team:
        jobs = jobs.filter(team__slug=team)
    if status:
        jobs = jobs.filter(status=status)
    return {
        "count": jobs.count(),
        "items": [_job_out(request, job) for job in jobs[offset : offset + limit]],
    }


@router.get("/jobs/{job_id}", response={200: JobDetailOut, **ERRORS}, summary="Read a job")
def job_read(request: HttpRequest, job_id: JobId) -> dict:
    return _job_detail(request, _job_or_404(request, job_id))


@router.post(
    "/jobs/{job_id}/cancel",
    response={202: JobDetailOut, 409: ErrorOut, **ERRORS},
    summary="Cancel a job",
)
def job_cancel(request: HttpRequest, job_id: JobId) -> Status:
    """Queued tasks are cancelled now; running ones stop at their next step, keeping their best."""
    job = services.job_cancel(principal=principal(request), job=_job_or_404(request, job_id))
    return Status(202, _job_detail(request, job))


# --- tasks and iterations ---------------------------------------------------------------------


@router.get(
    "/jobs/{job_id}/tasks", response={200: list[TaskOut], **ERRORS}, summary="A job's tasks"
)
def task_list(request: HttpRequest, job_id: JobId) -> list[dict]:
    return [_task_out(t) for t in _tasks(_job_or_404(request, job_id))]


@router.get("/jobs/{job_id}/tasks/{task_id}", response={200: TaskOut, **ERRORS}, summary="A task")
def task_read(
    request: HttpRequest, job_id: JobId, task_id: Annotated[int, Path(ge=1, le=PG_BIGINT_MAX)]
) -> dict:
    task = _tasks(_job_or_404(request, job_id)).filter(id=task_id).first()
    if task is None:
        raise ApiError(ErrorCode.NOT_FOUND, "No such task in this job.")
    return _task_out(task)


@router.get(
    "/jobs/{job_id}/iterations",
    response={200: IterationPage, **ERRORS},
    summary="A job's iterations, in seq order",
)
def iteration_list(
    request: HttpRequest,
    job_id: JobId,
    after: Seq = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict:
    """Summaries without sources; page with `after` = the last `seq` you saw."""
    job = _job_or_404(request, job_id)
    items = job_selectors.iterations_after(job_id=job.id, after_seq=after, limit=limit)
    return {"items": items, "next_after": items[-1]["seq"] if items else after}


@router.get(
    "/jobs/{job_id}/iterations/{seq}",
    response={200: IterationOut, **ERRORS},
    summary="One iteration in full: source, evaluation, profile",
)
def iteration_read(
    request: HttpRequest, job_id: JobId, seq: Annotated[int, Path(ge=1, le=PG_INT_MAX)]
) -> dict:
    it = selectors.iteration_detail(job=_job_or_404(request, job_id), seq=seq)
    if it is None:
        raise ApiError(ErrorCode.NOT_FOUND, "No iteration with this seq in this job.")
    return {
        **job_selectors.iteration_event(it),
        "attempt": it.attempt,
        "family": it.family,
        "params": it.params,
        "source": it.source,
        "evaluation": it.evaluation,
        "final_evaluation": it.final_evaluation,
        "profile": it.profile,
        "gpu_s": it.gpu_s,
        "llm_tokens": it.llm_tokens,
        "llm_cost_usd": it.llm_cost_usd,
        "created_at": it.created_at,
    }


# --- events ----------------------------------------------------------------------------------

EVENTS_DOC = {
    "responses": {
        "200": {
            "description": (
                "A text/event-stream: `status` events (the job and its tasks), `iteration` "
                "events with `id:` = seq, then `end` when the job is over (or `timeout` after "
                "`max_s`, or after KF_API_SSE_IDLE_S without an event). Reconnect with "
                "`Last-Event-ID` or `?after=` to resume."
            ),
            "content": {
                "text/event-stream": {
                    # One schema per event (how OpenAPI tools read SSE streams).
                    "schema": {
                        "type": "object",
                        "required": ["event", "data"],
                        "properties": {
                            "event": {"enum": ["status", "iteration", "end", "timeout"]},
                            "id": {"type": "string", "description": "iteration events: seq"},
                            "data": {"type": "string", "description": "a JSON object"},
                        },
                    }
                }
            },
        }
    }
}


@router.get(
    "/jobs/{job_id}/events",
    response={429: ErrorOut, **ERRORS},
    summary="Stream a job's events (server-sent events)",
    openapi_extra=EVENTS_DOC,
)
async def job_events(
    request: HttpRequest,
    job_id: JobId,
    after: Seq = 0,
    max_s: Annotated[float, Query(gt=0, le=3600)] = 3600,
) -> HttpResponse:
    """See the description of the 200 response for the wire format. A token (and an address)
    may hold only so many streams at once: 429 `too_many_streams` past that."""
    job = await sync_to_async(_job_or_404)(request, job_id)
    last_event_id = request.headers.get("Last-Event-ID", "")
    if last_event_id.isdigit():
        after = max(after, min(int(last_event_id), PG_INT_MAX))
    return await events.stream_response(request, principal(request), job.id, after, max_s)


# --- winners ---------------------------------------------------------------------------------


@router.get(
    "/jobs/{job_id}/winners",
    response={200: WinnersOut, **ERRORS},
    summary="The best verified kernel per problem",
)
def winners(request: HttpRequest, job_id: JobId) -> dict:
    """Per problem, its best kernel verified faster than every baseline on a GPU (the one rule
    of webapp.jobs.selectors); problems with none are served by PyTorch."""
    job = _job_or_404(request, job_id)
    found = job_selectors.job_winners(job_id=job.id)
    won = {w.task.problem_id for w in found}
    return {
        "job": job.id,
        "winners": [_winner_out(w) for w in found],
        "problems_without_winner": [p.key for p in job.problems.all() if p.id not in won],
    }


def _winner_out(winner: job_selectors.Winner) -> dict:
    it = winner.iteration
    evaluation = it.measurement
    best = job_selectors.best_baseline(evaluation)
    return {
        "task": winner.task.id,
        "problem": winner.task.problem.key,
        "seq": it.seq,
        "candidate_id": it.candidate_id,
        "speedup": it.speedup,
        "best_baseline": best.baseline if best else "",
        "best_baseline_speedup": best.speedup if best else it.speedup,
        "regime": (evaluation.get("timings") or {}).get("regime", ""),
        "device": evaluation.get("device") or {},
        "path": winner_path(winner),
    }


DOWNLOAD_DOC = {
    "responses": {
        "200": {
            "description": "A zip that pip installs: the kernels, a dispatch table with PyTorch "
            "fallback, tests, benchmark JSON, provenance and manifest.json.",
            "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
        }
    }
}


@router.get(
    "/jobs/{job_id}/download",
    response=ERRORS,
    summary="Download the winning kernels as a zip",
    openapi_extra=DOWNLOAD_DOC,
)
def download(request: HttpRequest, job_id: JobId) -> HttpResponse:
    """404 with code `no_winners` while no kernel of the job is verified faster than PyTorch on
    a GPU, or a model job's model with its kernels is not verified faster than its best
    baseline end to end (the message says why)."""
    job = _job_or_404(request, job_id)
    found = job_selectors.package_winners(job_id=job.id)
    if not found:
        reason = job_selectors.no_winner_message(job_id=job.id) or "No kernel was kept yet."
        raise ApiError(ErrorCode.NO_WINNERS, reason)
    job_url = request.build_absolute_uri(reverse("jobs:detail", args=[job.id]))
    package = build_package(
        job=job, winners=found, problems=list(job.problems.all()), job_url=job_url
    )
    response = HttpResponse(package.data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="kernelforge-{job.id}.zip"'
    return response
