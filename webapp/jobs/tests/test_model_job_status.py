"""A model Job's status follows its ModelRun to the end: it stays running while the end-to-end
check runs (the page says "verifying"), a task the watchdog gives up on still lets the
finished problems be verified, and a cancelled job skips the check. Real PostgreSQL, the real
sandboxed CPU profile and verify of a tiny model (two_norms.py); only the agent is stood in for (a kept
kernel written as its iteration)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from kernels.model_source import check_model_source
from webapp.api.tests.conftest import evaluation
from webapp.jobs import model_services as services
from webapp.jobs import services as job_services
from webapp.jobs.models import Job, ModelRun, Task
from webapp.jobs.status import job_status_event
from webapp.jobs.tests.support import model_jobs
from workers.model_tasks import profile_model_job, verify_model_job
from workers.reporting import DjangoReporter
from workers.tasks import watchdog

pytestmark = pytest.mark.django_db

MODEL = Path(__file__).with_name("two_norms.py")
RMSNORM_KEY = "rmsnorm/32x64/fp32"
RMSNORM_KERNEL = """
import torch

def run(x, weight, out):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight)
"""


@pytest.fixture
def planned(alice, team, django_capture_on_commit_callbacks):
    """A two-norm model job, profiled (sandboxed, CPU) and planned: two tasks queued (a
    budget large enough that each problem gets its minimum slice)."""
    source = check_model_source(MODEL.read_text(), "two_norms.py")
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = model_jobs(alice, team, [source], gpu_minutes=100)
        assert profile_model_job(str(job.id)) == "planned"
    tasks = list(Task.objects.filter(job=job).select_related("problem").order_by("id"))
    assert len(tasks) == 2 and RMSNORM_KEY in [t.problem.key for t in tasks]
    return job, tasks


def _finish_with_winner(task: Task, captured) -> None:
    claim = job_services.task_claim(task_id=task.id, worker="w")
    job_services.iteration_record(
        task_id=task.id,
        attempt=claim.attempt,
        data=job_services.IterationData(
            index=0,
            verdict="kept",
            source=RMSNORM_KERNEL,
            speedup=1.5,
            best_speedup=1.5,
            evaluation=evaluation(speedup=1.5),
            beats_baselines=True,  # the harness's call, passed by the worker
        ),
    )
    with captured(execute=False):
        DjangoReporter(task_id=claim.task_id, attempt=claim.attempt).finished(
            best=None, stop_reason="budget"
        )


def _status(job: Job) -> tuple[str, str]:
    job.refresh_from_db()
    return job.status, ModelRun.objects.get(job=job).status


def test_the_job_stays_running_until_the_end_to_end_check_ends(
    planned, alice, client, django_capture_on_commit_callbacks
):
    job, tasks = planned
    for task in tasks:
        if task.problem.key == RMSNORM_KEY:
            _finish_with_winner(task, django_capture_on_commit_callbacks)
        else:
            claim = job_services.task_claim(task_id=task.id, worker="w")
            with django_capture_on_commit_callbacks(execute=False):
                DjangoReporter(task_id=claim.task_id, attempt=claim.attempt).finished(
                    best=None, stop_reason="budget"
                )
        if task != tasks[-1]:
            assert _status(job) == (Job.Status.RUNNING, ModelRun.Status.OPTIMIZING)

    # Every task is over, the check is not: the job is still running, and says why.
    assert _status(job) == (Job.Status.RUNNING, ModelRun.Status.VERIFYING)
    assert job.finished_at is None
    event = job_status_event(job_id=job.id)
    assert event["status"] == "running" and not event["terminal"]
    assert event["status_label"] == "Verifying end to end"
    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "Verifying end to end" in page and 'id="model-verifying"' in page
    assert 'aria-live="polite">Verifying end to end</span>' in page  # the header badge too

    assert verify_model_job(str(job.id)) == "verified"
    assert _status(job) == (Job.Status.DONE, ModelRun.Status.DONE)
    assert job.finished_at is not None
    assert job_status_event(job_id=job.id)["terminal"]
    run = ModelRun.objects.get(job=job)
    assert run.end_to_end["hits"] == {RMSNORM_KEY: 1} and run.end_to_end["variants"]["ours"]["ok"]
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert 'id="way-ours"' in page and 'id="model-verifying"' not in page


def test_a_task_the_watchdog_gives_up_on_still_lets_the_finished_problems_verify(
    planned, settings, django_capture_on_commit_callbacks
):
    job, tasks = planned
    settings.KF_TASK_MAX_ATTEMPTS = 1
    lost = [t for t in tasks if t.problem.key != RMSNORM_KEY]
    for task in lost:  # claimed by a worker that then died: heartbeat long stopped
        job_services.task_claim(task_id=task.id, worker="dead")
    Task.objects.filter(id__in=[t.id for t in lost]).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    rmsnorm = next(t for t in tasks if t.problem.key == RMSNORM_KEY)
    _finish_with_winner(rmsnorm, django_capture_on_commit_callbacks)
    assert _status(job) == (Job.Status.RUNNING, ModelRun.Status.OPTIMIZING)

    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        assert watchdog() == [], "at the attempt limit nothing is re-queued"
    assert set(Task.objects.filter(job=job).values_list("status", flat=True)) == {
        Task.Status.DONE,
        Task.Status.FAILED,
    }
    assert _status(job) == (Job.Status.RUNNING, ModelRun.Status.VERIFYING)
    assert len(enqueued) >= 1, "the verify step is enqueued by the watchdog's sweep"
    assert services.model_runs_settle() == [], "the sweep moves a run on once"

    assert verify_model_job(str(job.id)) == "verified"
    assert _status(job) == (Job.Status.DONE, ModelRun.Status.DONE)
    e2e = ModelRun.objects.get(job=job).end_to_end
    assert e2e["hits"] == {RMSNORM_KEY: 1}
    assert e2e["winners"] == [{"key": RMSNORM_KEY, "kernel_speedup": 1.5}]


def test_a_model_job_whose_every_task_failed_ends_failed_after_its_check(
    planned, django_capture_on_commit_callbacks
):
    job, tasks = planned
    for task in tasks:
        claim = job_services.task_claim(task_id=task.id, worker="w")
        with django_capture_on_commit_callbacks(execute=False):
            DjangoReporter(task_id=claim.task_id, attempt=claim.attempt).failed(error="boom")
    assert _status(job) == (Job.Status.RUNNING, ModelRun.Status.VERIFYING)
    assert verify_model_job(str(job.id)) == "verified"
    assert _status(job) == (Job.Status.FAILED, ModelRun.Status.DONE)
    assert "No kernel beat" in ModelRun.objects.get(job=job).message


def test_a_cancelled_model_job_skips_the_check(planned, alice, django_capture_on_commit_callbacks):
    job, _tasks = planned
    with django_capture_on_commit_callbacks(execute=False):
        assert job_services.job_cancel(job=job, user=alice)
        assert services.model_runs_settle() == [str(job.id)]
    assert _status(job) == (Job.Status.CANCELLED, ModelRun.Status.FAILED)
    assert "Cancelled" in ModelRun.objects.get(job=job).message
    assert verify_model_job(str(job.id)) == "skipped", "no end-to-end check after a cancel"


def test_a_lost_verify_message_is_sent_again_by_the_sweep_once(
    planned, django_capture_on_commit_callbacks
):
    job, tasks = planned
    for task in tasks:
        claim = job_services.task_claim(task_id=task.id, worker="w")
        with django_capture_on_commit_callbacks(execute=False):
            DjangoReporter(task_id=claim.task_id, attempt=claim.attempt).finished(
                best=None, stop_reason="budget"
            )
    assert _status(job) == (Job.Status.RUNNING, ModelRun.Status.VERIFYING)
    with django_capture_on_commit_callbacks(execute=False) as sent:
        services.model_runs_settle()
    assert sent == [], "a check that just started is not sent twice"

    ModelRun.objects.filter(job=job).update(updated_at=timezone.now() - timedelta(hours=1))
    with django_capture_on_commit_callbacks(execute=False) as sent:
        assert services.model_runs_settle() == []
    assert len(sent) == 1, "the verify message goes out again"
    with django_capture_on_commit_callbacks(execute=False) as sent:
        services.model_runs_settle()
    assert sent == [], "and not on every sweep"
    assert verify_model_job(str(job.id)) == "verified"
    assert _status(job) == (Job.Status.DONE, ModelRun.Status.DONE)


def _job_with_recorded_check(alice, team, captured, **changes):
    """A model job whose run holds the H100 end-to-end record of llama_block (+ changes)."""
    recorded = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
    h100 = json.loads((recorded / "model_llama_block_h100.json").read_text())["result"]
    source = check_model_source(MODEL.read_text(), "two_norms.py")
    with captured(execute=False):
        (job,) = model_jobs(alice, team, [source], gpu_minutes=1)
    e2e = h100["end_to_end"] | {"winners": [], "predicted": h100["predicted_from_kernels"]}
    ModelRun.objects.filter(job=job).update(
        status=ModelRun.Status.DONE,
        end_to_end=e2e | changes,
        profile=h100["profile"],
        plan=h100["plan"],
    )
    return job, e2e


def test_the_page_shows_every_baseline_and_the_speedup_over_the_best(
    alice, team, client, django_capture_on_commit_callbacks
):
    job, e2e = _job_with_recorded_check(alice, team, django_capture_on_commit_callbacks)
    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert 'id="end-to-end-timings"' in page and 'id="end-to-end-chart"' in page
    for name in ("eager", "cuda_graphs", "compile", "compile_max_autotune", "compile_cuda_graphs"):
        variant = e2e["variants"][name]
        assert f'id="way-{name}"' in page and variant["label"] in page
        assert f"{variant['compile_s']:.1f}" in page  # each with its own compile time
    assert f"{e2e['speedup']:.3f}x faster than the best baseline" in page
    assert "the compiled model&#x27;s kernels" in page or "the compiled model's kernels" in page
    # Its timing ran in the model's own process: labelled so (issue 23).
    assert 'id="end-to-end-provenance"' in page and "with its own code" in page


def test_the_page_says_so_when_nothing_beats_the_best_baseline(
    alice, team, client, django_capture_on_commit_callbacks
):
    job, _ = _job_with_recorded_check(
        alice,
        team,
        django_capture_on_commit_callbacks,
        faster=False,
        speedup=0.97,
        speedup_ci=[0.95, 0.99],
        message="Nothing beats the best baseline (torch.compile + CUDA graphs).",
    )
    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "<strong>Nothing beats the best baseline.</strong>" in page
    assert "faster than the best baseline" not in page
