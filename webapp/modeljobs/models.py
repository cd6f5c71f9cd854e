"""A model job's own record: its profile, Amdahl plan and end-to-end result.

The Job (webapp.jobs) holds the model file and, once profiled, one Problem + Task per planned
problem in plan order; this row holds what only a model job has. State changes are
compare-and-set updates in services.py, like the jobs app's.
"""

from __future__ import annotations

from django.db import models

from webapp.jobs.models import Job


class ModelRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Waiting to be profiled"
        PROFILING = "profiling", "Profiling"
        OPTIMIZING = "optimizing", "Optimizing planned problems"
        VERIFYING = "verifying", "Verifying end to end"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="model_run")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    queue = models.CharField(max_length=40)
    budget_s = models.FloatField()  # split across the planned problems by expected gain
    example = models.CharField(max_length=60, blank=True)  # a shipped example's name, if one
    profile = models.JSONField(null=True, blank=True)  # harness ModelProfile.to_dict()
    plan = models.JSONField(null=True, blank=True)  # agents.amdahl Plan.to_dict()
    end_to_end = models.JSONField(null=True, blank=True)  # harness EndToEnd.to_dict() + extras
    message = models.TextField(blank=True)  # why it failed, in words for the user
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"model run of {self.job_id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)
