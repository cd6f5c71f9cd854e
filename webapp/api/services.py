"""Writes for the API: tokens, and job submission through the web form's own path.

Job submission is webapp.jobs': the same JobForm validates (shape parsing, file limits, queue
choices) and the same service (submission.jobs_submit: quotas, budget, rows, messages) creates
the jobs, so the API and the web page cannot disagree about what a valid job is. The API adds
only its error codes and a record of which token submitted.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import SimpleUploadedFile, UploadedFile
from django.db import transaction
from django.utils import timezone

from webapp.accounts.models import Membership, Team
from webapp.api.errors import ApiError, ErrorCode
from webapp.api.models import ApiToken, JobSubmission
from webapp.api.selectors import Principal
from webapp.jobs import services as job_services
from webapp.jobs.forms import JobForm
from webapp.jobs.models import Job
from webapp.jobs.quotas import QuotaExceeded
from webapp.jobs.shapes import ShapeFormat
from webapp.jobs.submission import JobRequest, jobs_submit

TOKEN_PREFIX = "kf_"
PREFIX_CHARS = 10  # random part of the lookup prefix
LAST_USED_RESOLUTION = timedelta(minutes=1)  # don't write on every request
# What token_create makes; anything else is rejected before it reaches the database.
TOKEN_FORM = re.compile(r"(kf_[0-9a-f]{10})_[A-Za-z0-9_-]{43}")


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(
    *, user: AbstractBaseUser, name: str, teams: Sequence[Team] | None = None
) -> tuple[ApiToken, str]:
    """A new token for `user`, for all their teams (teams=None) or only `teams`.

    Returns the row and the token text, which is shown once and never stored.
    """
    name = name.strip()[:80] or "token"
    if teams is not None:
        member_of = set(Membership.objects.filter(user=user).values_list("team_id", flat=True))
        if not teams or any(team.id not in member_of for team in teams):
            raise ValueError("a token can only be scoped to teams its user belongs to")
    prefix = TOKEN_PREFIX + secrets.token_hex(PREFIX_CHARS // 2)
    raw = f"{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, prefix=prefix, digest=_digest(raw), all_teams=teams is None
        )
        if teams is not None:
            token.teams.set(teams)
    return token, raw


def token_revoke(*, user: AbstractBaseUser, token_id: int) -> bool:
    """Revoke one of the user's own tokens; False if it is not theirs or already revoked."""
    return (
        ApiToken.objects.filter(id=token_id, user=user, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        == 1
    )


def token_authenticate(*, raw: str) -> ApiToken:
    """The live token for this text, or ApiError(not_authenticated | token_revoked)."""
    form = TOKEN_FORM.fullmatch(raw)
    token = (
        ApiToken.objects.filter(prefix=form.group(1)).select_related("user").first()
        if form
        else None
    )
    if token is None or not hmac.compare_digest(token.digest, _digest(raw)):
        raise ApiError(
            ErrorCode.NOT_AUTHENTICATED, "Send a valid API token: Authorization: Bearer kf_…"
        )
    if token.is_revoked:
        raise ApiError(ErrorCode.TOKEN_REVOKED, "This API token was revoked; create a new one.")
    if not token.user.is_active:
        raise ApiError(ErrorCode.NOT_AUTHENTICATED, "The token's user account is disabled.")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(id=token.id).update(last_used_at=now)
        token.last_used_at = now
    return token


def team_for_submission(*, principal: Principal, slug: str) -> Team:
    team = Team.objects.filter(slug=slug).first()
    if team is None or not Membership.objects.filter(team=team, user=principal.user).exists():
        raise ApiError(ErrorCode.UNKNOWN_TEAM, f"You are in no team with the slug {slug!r}.")
    if team.id not in principal.team_ids:
        raise ApiError(
            ErrorCode.PERMISSION_DENIED, f"This token is not allowed to act for team {slug!r}."
        )
    return team


# Which error code a JobForm field's messages map to (first match wins).
_FORM_FIELD_CODES = (
    ("shapes_file", "shapes", ErrorCode.INVALID_SHAPE_SET),
    ("shapes_text", "shapes", ErrorCode.INVALID_SHAPE_SET),
    ("model_file", "model_file", ErrorCode.INVALID_MODEL_FILE),
    ("queue", "queue", ErrorCode.UNKNOWN_QUEUE),
    ("team", "team", ErrorCode.UNKNOWN_TEAM),
    ("title", "title", ErrorCode.VALIDATION_ERROR),
    ("kind", "kind", ErrorCode.VALIDATION_ERROR),
    ("budget", "gpu_minutes", ErrorCode.VALIDATION_ERROR),
    ("__all__", "", ErrorCode.VALIDATION_ERROR),
)


def _validated_form(*, user: AbstractBaseUser, data: dict, files: dict) -> JobForm:
    form = JobForm(data, files, user=user)
    if form.is_valid():
        return form
    details, code = [], None
    for form_field, api_field, field_code in _FORM_FIELD_CODES:
        for message in form.errors.get(form_field, []):
            details.append({"field": api_field, "message": message})
            code = code or field_code
    raise ApiError(code or ErrorCode.VALIDATION_ERROR, details[0]["message"], details)


def job_submit_shapes(
    *,
    principal: Principal,
    team_slug: str,
    title: str,
    shapes: str,
    fmt: ShapeFormat = ShapeFormat.AUTO,
    queue: str | None = None,
    gpu_minutes: int | None = None,
    idempotency_key: str = "",
) -> Job:
    """Validate like the web form, then submit like it (quotas and budget included). A repeat
    of an earlier request's Idempotency-Key returns that request's job."""
    if earlier := submitted_with_key(principal=principal, key=idempotency_key):
        return earlier[0]
    team = team_for_submission(principal=principal, slug=team_slug)
    data = {
        "team": team.id,
        "title": title,
        "kind": Job.Kind.SHAPES,
        "queue": queue or settings.KF_QUEUES[0],
        "budget": gpu_minutes,
    }
    files = {}
    if fmt is ShapeFormat.AUTO:
        data["shapes_text"] = shapes
    else:
        # As an upload named for its format, so the form's size and UTF-8 checks apply too.
        files["shapes_file"] = SimpleUploadedFile(f"shapes.{fmt.value}", shapes.encode())
    form = _validated_form(user=principal.user, data=data, files=files)
    (job,) = _submit(principal, form, idempotency_key)
    return job


def job_submit_model(
    *,
    principal: Principal,
    team_slug: str,
    title: str,
    model_file: UploadedFile,
    queue: str | None = None,
    gpu_minutes: int | None = None,
    idempotency_key: str = "",
) -> list[Job]:
    """A model file (or a .zip of them: one job each), profiled and optimized like the form's.
    A repeat of an earlier request's Idempotency-Key returns that request's jobs."""
    if earlier := submitted_with_key(principal=principal, key=idempotency_key):
        return earlier
    team = team_for_submission(principal=principal, slug=team_slug)
    data = {
        "team": team.id,
        "title": title,
        "kind": Job.Kind.MODEL,
        "queue": queue or settings.KF_QUEUES[0],
        "budget": gpu_minutes,
    }
    form = _validated_form(user=principal.user, data=data, files={"model_file": model_file})
    return _submit(principal, form, idempotency_key)


def submitted_with_key(*, principal: Principal, key: str) -> list[Job]:
    """The jobs this user's earlier request with this Idempotency-Key made ([] if none)."""
    if not key:
        return []
    rows = JobSubmission.objects.filter(token__user=principal.user, idempotency_key=key)
    return list(Job.objects.filter(api_submission__in=rows).order_by("created_at", "id"))


def _submit(principal: Principal, form: JobForm, idempotency_key: str = "") -> list[Job]:
    """The form has checked the budget too (gpu_minutes is its `budget` field). With an
    Idempotency-Key, the team row is locked first, so of two concurrent requests with the same
    key the second waits for the first and then finds its jobs."""
    with transaction.atomic():
        if idempotency_key:
            Team.objects.select_for_update().filter(id=form.cleaned_data["team"].id).first()
            earlier = submitted_with_key(principal=principal, key=idempotency_key)
            if earlier:
                return earlier
        try:
            jobs = jobs_submit(
                user=principal.user,
                request=JobRequest.from_form(form, gpu_minutes=form.gpu_minutes),
            )
        except QuotaExceeded as exc:
            raise ApiError(ErrorCode(exc.code), exc.message, exc.details) from None
        JobSubmission.objects.bulk_create(
            [
                JobSubmission(job=job, token=principal.token, idempotency_key=idempotency_key)
                for job in jobs
            ]
        )
    return jobs


def job_cancel(*, principal: Principal, job: Job) -> Job:
    """Ask the job to stop (idempotent while it is active); 409 once it has ended."""
    if job.is_terminal:
        raise ApiError(
            ErrorCode.JOB_NOT_CANCELLABLE,
            f"The job is {job.status}; only active jobs can be cancelled.",
        )
    job_services.job_cancel(job=job, user=principal.user)
    job.refresh_from_db()
    return job
