"""A Job is what a team asked for; it splits into Problems, each run as a Task on a worker queue.

Every attempt the agent makes is an Iteration row, written before anyone is told about it
(the database is the record; websocket messages are notifications). State changes are
compare-and-set updates in services.py, so a redelivered task cannot apply twice. A model job
also has a ModelRun: its profile, Amdahl plan and end-to-end result (model_services.py).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from webapp.accounts.models import Team


class Job(models.Model):
    class Kind(models.TextChoices):
        SHAPES = "shapes", "Shape set"
        MODEL = "model", "Model file"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="jobs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    title = models.CharField(max_length=120)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    model_file = models.FileField(upload_to="models/%Y/%m/", blank=True)
    # The GPU minutes the job may spend, set at submission (submission.py); its tasks share it
    # (selectors.task_budget_s) and the team's quota counts it while the job is active.
    gpu_minutes = models.PositiveIntegerField()
    cancel_requested = models.BooleanField(default=False)
    # The last event sequence number handed out for this job (see services.iteration_record).
    last_seq = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title

    @property
    def is_terminal(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED, self.Status.CANCELLED)


class Problem(models.Model):
    """One (op, shape, dtype, layout) of a job, already validated by kernels.parse_problem."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="problems")
    position = models.PositiveIntegerField()
    op = models.CharField(max_length=40)
    shape = models.JSONField()
    dtype = models.CharField(max_length=10)
    layout = models.CharField(max_length=20, blank=True)
    key = models.CharField(max_length=200)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="problem_position_unique")
        ]

    def __str__(self) -> str:
        return self.key

    def to_dict(self) -> dict:
        return {
            "op": self.op,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "layout": self.layout,
        }


class Task(models.Model):
    """One problem's optimization run on one worker queue."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks")
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="tasks")
    queue = models.CharField(max_length=40)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    # Incremented by every claim; a run only writes while its attempt is the current one, so a
    # run that the watchdog gave up on cannot overwrite the run that replaced it.
    attempt = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    # When the broker accepted this task's message; None while a message still has to be sent
    # (the broker was down at submission), which the watchdog retries.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    # The run's search so far (agents.reporting.SearchStats.to_dict()): screened vs fully
    # verified counts, candidates per GPU-hour per tier, where the time went, the outcome.
    search = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="task_status_heartbeat")]

    def __str__(self) -> str:
        return f"task {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status not in self.ACTIVE


class Iteration(models.Model):
    """One attempt reported by the agent (agents.reporting.IterationEvent), in seq order per job."""

    class Verdict(models.TextChoices):
        # Same values as agents.reporting.AttemptVerdict (webapp may not import agents/;
        # workers/tests checks the two stay in step).
        KEPT = "kept", "Kept"
        REVERTED = "reverted", "Reverted"
        COMPILE_FAILED = "compile_failed", "Compile failed"
        INCORRECT = "incorrect", "Incorrect"
        CHEAT = "cheat", "Cheat detected"
        TIMEOUT = "timeout", "Timeout"
        CRASH = "crash", "Crash"
        ERROR = "error", "Error"
        BASELINE = "baseline", "Baseline"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="iterations")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="iterations")
    index = models.PositiveIntegerField()  # attempt number within the task: the dedupe key
    seq = models.PositiveIntegerField()  # position in the job's event stream: the backfill key
    attempt = models.PositiveIntegerField()  # which claim of the task wrote it
    parent = models.PositiveIntegerField(null=True, blank=True)
    verdict = models.CharField(max_length=20, choices=Verdict.choices)
    hypothesis = models.TextField(blank=True)
    reason = models.CharField(max_length=500, blank=True)
    candidate_id = models.CharField(max_length=100, blank=True)
    family = models.CharField(max_length=100, blank=True)
    params = models.JSONField(default=dict, blank=True)
    source = models.TextField(blank=True)
    evaluation = models.JSONField(null=True, blank=True)
    # The task's best, evaluated once more when its run ended: the harness's full protocol
    # against every baseline (agents' verify node). When present, the rules read it.
    final_evaluation = models.JSONField(null=True, blank=True)
    profile = models.JSONField(null=True, blank=True)
    speedup = models.FloatField(null=True, blank=True)
    best_speedup = models.FloatField(null=True, blank=True)
    # The speedup over the fastest baseline `measurement` timed (selectors.best_baseline): the
    # headline every page, the API, the leaderboards and the package show, so one result never
    # reads 1.77x in one place (over eager) and 1.14x in another (over torch.compile).
    fastest_speedup = models.FloatField(null=True, blank=True)
    # Whether `measurement` beats every baseline it was timed against beyond noise, as the
    # harness decided it (harness/judge/wins.py; the worker passes it, webapp never recomputes it).
    beats_baselines = models.BooleanField(default=False)
    # The domain rules, applied once when the iteration is recorded (selectors.result_facts):
    # timed in Triton's CPU interpreter; faster than the measured roof allows; and "ranked":
    # a verified win on a GPU, the only kind a leaderboard shows, a download ships and a model
    # job substitutes.
    interpreter = models.BooleanField(default=False)
    implausible = models.BooleanField(default=False)
    ranked = models.BooleanField(default=False)
    elapsed_s = models.FloatField(default=0.0)
    gpu_s = models.FloatField(default=0.0)
    llm_tokens = models.PositiveIntegerField(default=0)
    llm_cost_usd = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["task", "index"], name="iteration_task_index_unique"),
            models.UniqueConstraint(fields=["job", "seq"], name="iteration_job_seq_unique"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} task {self.task_id} index {self.index}: {self.verdict}"

    @property
    def measurement(self) -> dict:
        """The evaluation its numbers come from: the final full-protocol one when the run made
        it, else its own."""
        return self.final_evaluation or self.evaluation or {}


class ModelRun(models.Model):
    """What only a model job has: its profile, Amdahl plan and end-to-end result.

    The Job holds the model file and, once profiled, one Problem + Task per planned problem in
    plan order. The table keeps the name it had in the former webapp.modeljobs app.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Waiting to be profiled"
        PROFILING = "profiling", "Profiling"
        OPTIMIZING = "optimizing", "Optimizing planned problems"
        VERIFYING = "verifying", "Verifying end to end"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="model_run")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    queue = models.CharField(max_length=40)  # where its tasks optimize
    example = models.CharField(max_length=60, blank=True)  # a shipped example's name, if one
    profile = models.JSONField(null=True, blank=True)  # harness ModelProfile.to_dict()
    plan = models.JSONField(null=True, blank=True)  # agents.amdahl Plan.to_dict()
    end_to_end = models.JSONField(null=True, blank=True)  # harness EndToEnd.to_dict() + extras
    message = models.TextField(blank=True)  # why it failed, in words for the user
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "modeljobs_modelrun"

    def __str__(self) -> str:
        return f"model run of {self.job_id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)
