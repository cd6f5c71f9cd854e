"""One way to submit (issue 18): the web form, the API (and so `kforge submit`) and model jobs
create jobs through one service, so they cannot drift apart again.

Each test here failed on main before the submission service existed: an API model upload stopped
at "awaiting profiler", model tasks were enqueued without `_send` (no enqueued_at, no guard for a
down broker, so the watchdog sent them a second time), and the agent's GPU budget was the job's
minutes split evenly even for a model job, whose Amdahl plan funds each problem differently.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from kernels.model_source import check_model_source
from webapp.api.tests.conftest import client_for
from webapp.jobs import selectors, services
from webapp.jobs.models import Job, Task
from webapp.jobs.tests.support import model_jobs
from workers.model_tasks import profile_model_job
from workers.tests.support import queue_clear, queue_length

pytestmark = pytest.mark.django_db

MODEL = Path(__file__).with_name("two_norms.py")


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def alice_api(alice, team, make_token_for):
    return client_for(make_token_for(alice))


@pytest.fixture
def make_token_for():
    from webapp.api import services as api_services

    return lambda user: api_services.token_create(user=user, name="test")[1]


def _upload() -> SimpleUploadedFile:
    return SimpleUploadedFile("two_norms.py", MODEL.read_bytes())


def test_a_model_uploaded_through_the_api_is_profiled_like_the_forms(
    alice_api, media, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_api.post(
            "/api/v1/jobs/model",
            {"team": "alices-team", "title": "norms", "model_file": _upload(), "gpu_minutes": 7},
        )
    assert response.status_code == 201, response.content
    job = Job.objects.get(id=response.json()["id"])
    assert job.status == Job.Status.QUEUED, "not parked where nothing reads it"
    assert job.model_run.status == "queued" and job.model_run.queue == "cpu"
    assert len(callbacks) == 1, "profiling is enqueued once, after commit"
    assert response.json()["gpu_minutes"] == 7


def _planned_model_job(alice, team, media, captured, queue: str) -> Job:
    """A two-norm model job submitted through the form's path and profiled (sandboxed, CPU)."""
    source = check_model_source(MODEL.read_text(), "two_norms.py")
    with captured(execute=False):
        (job,) = model_jobs(alice, team, [source], queue=queue, gpu_minutes=100)
    return job


def test_model_job_tasks_are_sent_like_shape_tasks_and_not_again_by_the_watchdog(
    alice, team, media, django_capture_on_commit_callbacks
):
    queue_clear("test.model-sent")
    job = _planned_model_job(
        alice, team, media, django_capture_on_commit_callbacks, queue="test.model-sent"
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert profile_model_job(str(job.id)) == "planned"
    tasks = Task.objects.filter(job=job)
    assert tasks.count() == 2
    assert queue_length("test.model-sent") == 2
    assert tasks.filter(enqueued_at__isnull=False).count() == 2, "the broker took them: noted"

    Job.objects.filter(id=job.id).update(created_at=timezone.now() - timedelta(minutes=5))
    assert services.tasks_send_unsent(older_than_s=60) == [], "the watchdog must not send twice"
    assert queue_length("test.model-sent") == 2
    queue_clear("test.model-sent")


def test_model_job_tasks_survive_a_down_broker_and_are_sent_later(
    alice, team, media, django_capture_on_commit_callbacks, monkeypatch
):
    from kombu.exceptions import OperationalError

    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    queue_clear("test.model-unsent")
    job = _planned_model_job(
        alice, team, media, django_capture_on_commit_callbacks, queue="test.model-unsent"
    )
    with monkeypatch.context() as patch:
        patch.setattr(services.run_task_task, "apply_async", broker_down)
        with django_capture_on_commit_callbacks(execute=True):
            assert profile_model_job(str(job.id)) == "planned"
    tasks = Task.objects.filter(job=job)
    assert tasks.filter(status=Task.Status.QUEUED, enqueued_at__isnull=True).count() == 2

    Job.objects.filter(id=job.id).update(created_at=timezone.now() - timedelta(minutes=5))
    assert sorted(services.tasks_send_unsent(older_than_s=60)) == sorted(
        tasks.values_list("id", flat=True)
    )
    assert queue_length("test.model-unsent") == 2
    queue_clear("test.model-unsent")


def test_a_model_task_gets_the_budget_its_amdahl_plan_gave_it(
    alice, team, media, django_capture_on_commit_callbacks
):
    """The GPU seconds the worker hands the agent (workers/agent.py) for each task."""
    job = _planned_model_job(
        alice, team, media, django_capture_on_commit_callbacks, queue="test.nobody"
    )
    with django_capture_on_commit_callbacks(execute=False):
        assert profile_model_job(str(job.id)) == "planned"
    run = Job.objects.get(id=job.id).model_run
    plan = {item["key"]: item["budget_s"] for item in run.plan["items"]}
    tasks = list(Task.objects.filter(job=job).select_related("problem"))
    budgets = {t.problem.key: selectors.task_budget_s(task_id=t.id) for t in tasks}
    assert budgets == {t.problem.key: plan[t.problem.key] for t in tasks}
    assert len(set(budgets.values())) == 2, "the plan funds the two problems differently"


def test_the_budget_rule_gives_every_problem_of_a_shape_set_enough_to_search(settings):
    from webapp.jobs.submission import BudgetTooSmall, budget_minutes

    settings.KF_JOB_DEFAULT_GPU_MINUTES, settings.KF_MIN_PROBLEM_GPU_MINUTES = 30, 2.0
    assert budget_minutes(n_problems=0, requested=None) == 30  # a model job: its plan splits it
    assert budget_minutes(n_problems=8, requested=None) == 30
    assert budget_minutes(n_problems=40, requested=None) == 80
    assert budget_minutes(n_problems=8, requested=16) == 16
    with pytest.raises(BudgetTooSmall, match="8 problems need at least 16 GPU minutes"):
        budget_minutes(n_problems=8, requested=8)


def test_the_web_form_gives_a_large_shape_set_a_larger_budget(alice, team, client):
    client.force_login(alice)
    shapes = "op,shape,dtype\n" + "".join(f"rmsnorm,8x{64 * (i + 1)},fp32\n" for i in range(20))
    response = client.post(
        "/jobs/new/", {"team": team.id, "title": "many", "kind": "shapes", "queue": "cpu",
                       "shapes_text": shapes},
    )  # fmt: skip
    assert response.status_code == 302, response.content[:2000]
    assert Job.objects.get(title="many").gpu_minutes == 40
