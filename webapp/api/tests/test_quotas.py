"""Per-team quotas: concurrent jobs and GPU minutes (used in the window + held by active jobs)."""

import pytest
from django.urls import reverse

from webapp.api.tests.conftest import FakeWorker
from webapp.jobs import quotas
from webapp.jobs.models import Job, Task

pytestmark = pytest.mark.django_db


def test_it_refuses_a_job_beyond_the_teams_concurrent_limit(alice_api, submit, settings):
    settings.KF_TEAM_MAX_ACTIVE_JOBS = 2
    assert submit(alice_api).status_code == 201
    assert submit(alice_api).status_code == 201
    refused = submit(alice_api)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_active_jobs"
    assert refused.json()["error"]["details"][0]["max_active_jobs"] == 2
    Job.objects.filter(id=Job.objects.first().id).update(status=Job.Status.DONE)
    assert submit(alice_api).status_code == 201, "a finished job frees its slot"


def test_it_refuses_a_budget_the_teams_gpu_minutes_cannot_cover(alice_api, submit, settings):
    settings.KF_TEAM_GPU_MINUTES = 100
    assert submit(alice_api, gpu_minutes=60).status_code == 201
    refused = submit(alice_api, gpu_minutes=50)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_gpu_minutes"
    assert refused.json()["error"]["details"][0]["available_gpu_minutes"] == 40
    assert submit(alice_api, gpu_minutes=40).status_code == 201


def test_it_counts_spent_gpu_time_and_releases_the_rest_when_a_job_ends(
    alice, team, alice_api, submit, settings
):
    settings.KF_TEAM_GPU_MINUTES = 100
    job_id = submit(
        alice_api, gpu_minutes=60, shapes="- {op: rmsnorm, shape: 8x64, dtype: fp32}"
    ).json()["id"]
    worker = FakeWorker(Task.objects.get(job_id=job_id).id)
    for _ in range(4):
        worker.iterate()  # 30 GPU seconds each: 2 minutes spent
    usage = quotas.team_usage(team_id=team.id)
    assert (usage.gpu_minutes_used, usage.gpu_minutes_reserved) == (2.0, 58.0)
    worker.finish()
    usage = quotas.team_usage(team_id=team.id)
    assert (usage.active_jobs, usage.gpu_minutes_reserved, usage.gpu_minutes_available) == (
        0,
        0.0,
        98.0,
    )
    me = alice_api.get("/api/v1/teams").json()[0]["usage"]
    assert me["gpu_minutes_available"] == 98.0 and me["gpu_minutes_quota"] == 100


def test_the_web_form_records_the_default_budget_and_the_quota_counts_it(
    alice, team, client, settings, django_capture_on_commit_callbacks
):
    settings.KF_CPU_JOB_DEFAULT_MINUTES = 25  # the form's queue is the CPU's
    client.force_login(alice)
    form = {"team": team.id, "title": "web", "kind": "shapes", "queue": "cpu",
            "shapes_text": "op,shape,dtype\nrmsnorm,8x64,fp32"}  # fmt: skip
    with django_capture_on_commit_callbacks(execute=False):
        assert client.post(reverse("jobs:new"), form).status_code == 302
    assert Job.objects.get().gpu_minutes == 25
    assert quotas.team_usage(team_id=team.id).gpu_minutes_reserved == 25
