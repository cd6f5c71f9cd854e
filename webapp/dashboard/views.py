"""Dashboard pages. Thin: selectors read (scoped to the user's teams), templates draw."""

from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from webapp.dashboard import code, selectors
from webapp.downloads.builder import build_package
from webapp.jobs.models import Iteration, Job, Problem
from webapp.jobs.selectors import (
    LEFT_OUT_MESSAGE,
    Winner,
    job_get_for_user,
    jobs_visible_to,
    kernel_ships,
    model_unbeaten,
    no_winner_message,
    package_winners,
)


def _job_or_404(request: HttpRequest, job_id: uuid.UUID | str) -> Job:
    job = job_get_for_user(user=request.user, job_id=job_id)
    if job is None:
        raise Http404("No such job")  # outsiders do not learn that it exists
    return job


def _iteration_or_404(job: Job, seq: int) -> Iteration:
    iteration = selectors.iteration_get(job=job, seq=seq)
    if iteration is None:
        raise Http404("No such iteration")
    return iteration


@login_required
def iteration_detail(request: HttpRequest, job_id: uuid.UUID, seq: int) -> HttpResponse:
    job = _job_or_404(request, job_id)
    iteration = _iteration_or_404(job, seq)
    parent = selectors.iteration_parent(iteration=iteration)
    view = selectors.iteration_view(iteration=iteration, parent=parent)
    # A starting point has no parent: its code alone, not a diff against nothing.
    rows, truncated = code.side_by_side(parent.source, iteration.source) if parent else ([], False)
    return render(
        request,
        "dashboard/iteration.html",
        {
            "job": job,
            "v": view,
            "it": iteration,
            "downloadable": iteration.ranked
            and kernel_ships(job_id=job.id, problem_key=iteration.task.problem.key),
            "parent": parent,
            "diff": rows,
            "diff_truncated": truncated,
            "listing": [] if parent else code.highlighted_lines(iteration.source),
            "pygments_css": code.pygments_css(),
        },
    )


@login_required
def ncu_report(request: HttpRequest, job_id: uuid.UUID, seq: int) -> FileResponse:
    """The iteration's raw .ncu-rep, when the worker stored it under MEDIA_ROOT."""
    job = _job_or_404(request, job_id)
    iteration = _iteration_or_404(job, seq)
    stored = (iteration.profile or {}).get("report_path")
    if not stored:
        raise Http404("No Nsight Compute report for this iteration")
    root = Path(settings.MEDIA_ROOT).resolve()
    path = (root / stored).resolve()
    # report_path comes from a worker; never serve anything outside the media folder.
    if not path.is_relative_to(root) or not path.is_file():
        raise Http404("The report file is not available")
    name = f"kf-{str(job.id)[:8]}-{seq}.ncu-rep"
    return FileResponse(path.open("rb"), as_attachment=True, filename=name)


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    """Two iterations side by side: ?a=<job uuid>/<seq>&b=<job uuid>/<seq>."""
    sides = []
    for key in ("a", "b"):
        job_id, _, seq = request.GET.get(key, "").partition("/")
        try:
            job = _job_or_404(request, uuid.UUID(job_id))
            sides.append(_iteration_or_404(job, int(seq)))
        except (ValueError, Http404):
            sides.append(None)
    a, b = sides
    context: dict = {"a_ref": request.GET.get("a", ""), "b_ref": request.GET.get("b", "")}
    if a is not None and b is not None:
        rows, truncated = code.side_by_side(a.source, b.source)
        context.update(
            a=selectors.iteration_view(iteration=a, parent=None),
            b=selectors.iteration_view(iteration=b, parent=None),
            metrics=selectors.metric_rows(b.profile, a.profile),
            diff=rows,
            diff_truncated=truncated,
            pygments_css=code.pygments_css(),
        )
    else:
        if request.GET.get("a") or request.GET.get("b"):
            context["error"] = "Pick two iterations you can see, as <job id>/<seq>."
        context["choices"] = selectors.compare_choices(user=request.user)
    return render(request, "dashboard/compare.html", context)


def _board_context(request: HttpRequest, team_slug: str = "") -> dict:
    filters = selectors.BoardFilters(
        op=request.GET.get("op", ""),
        dtype=request.GET.get("dtype", ""),
        device=request.GET.get("device", ""),
    )
    jobs = jobs_visible_to(user=request.user)
    page, groups, devices = selectors.leaderboard_page(
        jobs=jobs, filters=filters, page=request.GET.get("page", 1), team_slug=team_slug
    )
    query = request.GET.copy()
    query.pop("page", None)
    return {
        "page": page,
        "groups": groups,
        "filters": filters,
        "choices": selectors.board_filter_choices(jobs=jobs, groups_devices=devices),
        "query": query.urlencode(),
    }


@login_required
def leaderboard(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/leaderboard.html", _board_context(request))


@login_required
def team_board(request: HttpRequest, slug: str) -> HttpResponse:
    team = selectors.team_visible(user=request.user, slug=slug)
    if team is None:
        raise Http404("No such team")
    context = _board_context(request, team_slug=slug)
    context["team"] = team
    context["stats"] = selectors.team_stats(team=team)
    return render(request, "dashboard/team.html", context)


def _package_response(
    request: HttpRequest, job: Job, winners: list[Winner], problems: list[Problem]
) -> HttpResponse:
    job_url = request.build_absolute_uri(reverse("jobs:detail", args=[job.id]))
    package = build_package(job=job, winners=winners, problems=problems, job_url=job_url)
    response = HttpResponse(package.data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{package.filename}"'
    return response


@login_required
def job_package(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    """The job's winners as one package; with none, back to the job page, which says why."""
    job = _job_or_404(request, job_id)
    winners = package_winners(job_id=job.id)
    if not winners:
        messages.info(request, no_winner_message(job_id=job.id))
        return redirect("jobs:detail", job_id=job.id)
    return _package_response(request, job, winners, list(job.problems.all()))


@login_required
def problem_package(request: HttpRequest, job_id: uuid.UUID, seq: int) -> HttpResponse:
    """One verified win (a leaderboard entry) as its own package."""
    job = _job_or_404(request, job_id)
    iteration = _iteration_or_404(job, seq)
    if not iteration.ranked:
        messages.info(
            request,
            "Only a kernel verified faster than PyTorch on a GPU has a package; this one is not.",
        )
        return redirect("dashboard:iteration", job_id=job.id, seq=seq)
    if model_unbeaten(job_id=job.id):
        messages.info(request, no_winner_message(job_id=job.id))
        return redirect("dashboard:iteration", job_id=job.id, seq=seq)
    if not kernel_ships(job_id=job.id, problem_key=iteration.task.problem.key):
        messages.info(request, LEFT_OUT_MESSAGE)
        return redirect("dashboard:iteration", job_id=job.id, seq=seq)
    winner = Winner(task=iteration.task, iteration=iteration)
    return _package_response(request, job, [winner], [iteration.task.problem])
