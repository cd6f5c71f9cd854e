"""Job pages. Thin: the form validates, services write, selectors read (and scope by team)."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.selectors import teams_for_user
from webapp.dashboard import selectors as dashboard
from webapp.jobs import selectors, services
from webapp.jobs.forms import JobForm
from webapp.jobs.models import Job
from webapp.jobs.quotas import QuotaExceeded
from webapp.jobs.status import job_status_event
from webapp.jobs.submission import JobRequest, jobs_submit


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    filters = dashboard.JobFilters(
        team=request.GET.get("team", ""),
        op=request.GET.get("op", ""),
        status=request.GET.get("status", ""),
    )
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "jobs/list.html",
        {
            "page": dashboard.job_list_page(
                user=request.user, filters=filters, page=request.GET.get("page", 1)
            ),
            "filters": filters,
            "choices": dashboard.job_filter_choices(user=request.user),
            "query": query.urlencode(),
            "has_team": teams_for_user(user=request.user).exists(),
        },
    )


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    if not teams_for_user(user=request.user).exists():
        messages.info(
            request, "Create a team (or join one with an invitation link) before submitting a job."
        )
        return redirect("accounts:teams")
    form = JobForm(request.POST or None, request.FILES or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            jobs = jobs_submit(
                user=request.user, request=JobRequest.from_form(form, gpu_minutes=form.gpu_minutes)
            )
        except QuotaExceeded as exc:
            form.add_error(None, exc.message)
        else:
            if len(jobs) > 1:
                messages.info(request, f"{len(jobs)} model jobs created, one per file.")
                return redirect("jobs:list")
            return redirect("jobs:detail", job_id=jobs[0].id)
    return render(request, "jobs/new.html", {"form": form}, status=400 if form.errors else 200)


@login_required
def job_detail(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    job = _job_or_404(request, job_id)
    has_winner = selectors.job_has_winner(job_id=job.id)
    return render(
        request,
        "jobs/detail.html",
        {
            "job": job,
            "problems": job.problems.all(),
            "status": job_status_event(job_id=job.id),
            "budget": dashboard.job_budget(job=job),
            "hypothesis": dashboard.job_current_hypothesis(job=job),
            "has_winner": has_winner,
            "no_winner": "" if has_winner else selectors.no_winner_message(job_id=job.id),
        },
    )


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    job = _job_or_404(request, job_id)
    if services.job_cancel(job=job, user=request.user):
        messages.info(
            request, "Cancelling: running tasks stop at their next step, keeping the best so far."
        )
    return redirect("jobs:detail", job_id=job.id)


@login_required
def job_events(request: HttpRequest, job_id: uuid.UUID) -> JsonResponse:
    """Events after ?after=<seq> plus the current status: catch-up over plain HTTP."""
    job = _job_or_404(request, job_id)
    try:
        after = max(0, int(request.GET.get("after", "0")))
    except ValueError:
        after = 0
    return JsonResponse(
        {
            "status": job_status_event(job_id=job.id),
            "iterations": selectors.iterations_after(job_id=job.id, after_seq=after),
        }
    )


def _job_or_404(request: HttpRequest, job_id: uuid.UUID) -> Job:
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    if job is None:
        # 404 rather than 403: outsiders do not learn that the job exists.
        raise Http404("No such job")
    return job
