"""API tokens (stored hashed) and which token submitted a job.

A token is shown once, at creation. We keep its first characters (`prefix`) to find the row
and a SHA-256 of the whole token to check it: the token is 32 random bytes, so a fast hash is
enough (slow hashes defend guessable passwords, not random keys).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.accounts.models import Team
from webapp.jobs.models import Job


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)  # sha256 hex of the whole token
    # A token acts for its user in every team the user belongs to (all_teams), or only in
    # `teams`; either way, never beyond the user's current memberships.
    all_teams = models.BooleanField(default=True)
    teams = models.ManyToManyField(Team, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


class JobSubmission(models.Model):
    """Which token submitted a job through the API (the job's budget is Job.gpu_minutes)."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="api_submission"
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The request's Idempotency-Key header, if it sent one: the same user sending the same key
    # again gets these jobs back instead of new ones (a POST retried after a timeout).
    idempotency_key = models.CharField(max_length=200, blank=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.job_id} via token {self.token_id}"
