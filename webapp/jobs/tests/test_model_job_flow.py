"""A model job through the services on the real database: upload -> sandboxed CPU profile ->
Amdahl plan -> one task per planned problem -> winners substituted -> end-to-end result."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from kernels.model_source import check_model_source
from webapp.api.tests.conftest import evaluation
from webapp.jobs import selectors
from webapp.jobs import services as job_services
from webapp.jobs.models import Job, ModelRun, Task
from webapp.jobs.tests.support import model_jobs
from workers.model_tasks import profile_model_job, verify_model_job
from workers.reporting import DjangoReporter

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[3] / "harness" / "tests" / "fixtures" / "models"
RMSNORM_KERNEL = """
import torch

def run(x, weight, out):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight)
"""


def _create(alice, team, name, gpu_minutes=10):
    source = check_model_source((FIXTURES / f"{name}.py").read_text(), f"{name}.py")
    (job,) = model_jobs(alice, team, [source], gpu_minutes=gpu_minutes)
    return job


def test_it_profiles_plans_optimizes_and_verifies_a_model_job(
    alice, team, client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = _create(alice, team, "tiny_mlp")
    assert len(callbacks) == 1, "profiling is enqueued once, after commit"
    assert job.model_run.status == ModelRun.Status.QUEUED

    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        assert profile_model_job(str(job.id)) == "planned"
    run = ModelRun.objects.get(job=job)
    assert run.status == ModelRun.Status.OPTIMIZING
    assert run.profile["device"] == "cpu" and run.profile["groups"]
    funded = [i for i in run.plan["items"] if i["budget_s"] > 0]
    assert [p.key for p in job.problems.order_by("position")] == [i["key"] for i in funded]
    assert "rmsnorm/32x64/fp32" in [i["key"] for i in funded]
    assert sum(i["budget_s"] for i in funded) == pytest.approx(600, abs=1)
    assert len(enqueued) == len(funded) + 1  # one run_task per problem, then the status poke
    assert profile_model_job(str(job.id)) == "skipped", "a redelivery does nothing"
    first = Task.objects.filter(job=job).order_by("id").first()
    assert selectors.task_budget_s(task_id=first.id) == funded[0]["budget_s"]

    # Stand in for the agent: each task ends, the rmsnorm one with a kept, faster kernel.
    for task in Task.objects.filter(job=job).select_related("problem"):
        claim = job_services.task_claim(task_id=task.id, worker="w")
        reporter = DjangoReporter(task_id=claim.task_id, attempt=claim.attempt)
        if task.problem.key == "rmsnorm/32x64/fp32":
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
        with django_capture_on_commit_callbacks(execute=False) as verify_enqueued:
            reporter.finished(best=None, stop_reason="budget")
    run.refresh_from_db()
    assert run.status == ModelRun.Status.VERIFYING
    assert len(verify_enqueued) >= 1, "the last task's end enqueues the end-to-end check"

    assert verify_model_job(str(job.id)) == "verified"
    run.refresh_from_db()
    assert run.status == ModelRun.Status.DONE
    e2e = run.end_to_end
    assert e2e["variants"]["ours"]["ok"] and e2e["hits"] == {"rmsnorm/32x64/fp32": 1}
    assert e2e["winners"] == [{"key": "rmsnorm/32x64/fp32", "kernel_speedup": 1.5}]
    assert e2e["predicted"] > 1.0 and e2e["speedup"] > 0

    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    for text in (
        "Amdahl plan",
        "profile-chart",
        "vendor/plotly.min.js",
        "End to end",
        'id="way-eager"',
        'id="way-ours"',
    ):
        assert text in page


def test_it_fails_a_model_job_whose_forward_raises_with_the_reason(alice, team):
    job = _create(alice, team, "raises_on_forward")
    assert profile_model_job(str(job.id)) == "failed"
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert job.model_run.status == ModelRun.Status.FAILED
    assert "forward pass" in job.model_run.message and "kf-forward-boom" in job.model_run.message


def _submit(client, team, **fields):
    data = {"team": team.id, "title": "Mine", "kind": "model", "queue": "cpu", **fields}
    return client.post(reverse("jobs:new"), data)


def test_it_starts_a_job_from_a_shipped_example(
    alice, team, client, django_capture_on_commit_callbacks
):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=False):
        response = _submit(client, team, example="llama_block")
    job = Job.objects.get()
    assert response.status_code == 302 and job.kind == Job.Kind.MODEL
    assert job.model_run.example == "llama_block" and job.model_run.queue == "cpu"
    assert b"class RMSNorm" in job.model_file.read()


def test_it_makes_one_job_per_file_of_a_kernelbench_zip(
    alice, team, client, django_capture_on_commit_callbacks
):
    good = (FIXTURES / "tiny_mlp.py").read_text()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("level1/1_a.py", good)
        z.writestr("level2/2_b.py", good)
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = _submit(client, team, model_file=SimpleUploadedFile("kb.zip", buf.getvalue()))
    assert response.status_code == 302
    assert sorted(Job.objects.values_list("title", flat=True)) == ["Mine: 1_a", "Mine: 2_b"]
    assert len(callbacks) == 2


def test_it_refuses_a_python_file_outside_the_convention(alice, team, client):
    client.force_login(alice)
    upload = SimpleUploadedFile("m.py", (FIXTURES / "no_get_inputs.py").read_bytes())
    response = _submit(client, team, model_file=upload)
    assert response.status_code == 400
    assert "get_inputs()" in response.content.decode()
    assert not Job.objects.exists()


def test_a_budget_that_fits_no_problem_funds_none_and_says_why(alice, team, client):
    """Issue 24: each funded problem gets at least a full screen round and one verification;
    a minute is less than any problem needs, so nothing is queued and the job says why."""
    job = _create(alice, team, "tiny_mlp", gpu_minutes=1)
    assert profile_model_job(str(job.id)) == "planned"
    run = ModelRun.objects.get(job=job)
    assert run.status == ModelRun.Status.DONE and not Task.objects.filter(job=job).exists()
    items = run.plan["items"]
    assert items and all(i["budget_s"] == 0 and i["least_s"] > 60 for i in items)
    assert run.message.startswith(f"The budget fits no problem: the largest, {items[0]['key']}")
    assert "needs at least" in run.message and "of the 60 s budget" in run.message
    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "Left out because" in page and "a screen of 48 points" in page
