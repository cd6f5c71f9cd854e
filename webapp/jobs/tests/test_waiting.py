"""Why a job waits, and for how long (issue 27, item 4): a queued task's place on its queue and
the most its wait can be (from the budgets ahead), on the job page, in the API; and the form's
budget field, whose default on the CPU is short because one worker serves every team there."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

import kernels
from webapp.accounts.services import team_create
from webapp.api import services as api_services
from webapp.api.tests.conftest import client_for
from webapp.jobs import services
from webapp.jobs.models import Job, Task
from webapp.jobs.queue import queue_spots
from webapp.jobs.status import job_status_event
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db

RMS = kernels.parse_problem("rmsnorm", "8x64", "fp32")
SOFTMAX = kernels.parse_problem("softmax", "8x64", "fp32")


@pytest.fixture
def busy_cpu(alice, bob, team, django_capture_on_commit_callbacks):
    """Bob's 20-minute job runs on the one CPU worker (5 minutes in); alice's two-problem job
    was queued after it."""
    bobs = team_create(user=bob, name="Bob's team")
    with django_capture_on_commit_callbacks(execute=False):
        first = shape_job(bob, bobs, [RMS], queue="cpu", gpu_minutes=20)
        mine = shape_job(alice, team, [RMS, SOFTMAX], queue="cpu", gpu_minutes=10)
    running = first.tasks.get()
    assert services.task_claim(task_id=running.id, worker="cpu@up")
    Task.objects.filter(id=running.id).update(started_at=timezone.now() - timedelta(minutes=5))
    return mine


def test_a_queued_task_knows_what_is_ahead_of_it_and_how_long_it_can_take(busy_cpu):
    spots = queue_spots(job_id=busy_cpu.id)
    first, second = busy_cpu.tasks.order_by("id")
    # The running task has ~15 of its 20 minutes left; alice's first problem has 5 (10 / 2).
    assert (spots[first.id].ahead, spots[first.id].running) == (1, 1)
    assert spots[first.id].wait_s == pytest.approx(15 * 60, abs=5)
    assert spots[second.id].ahead == 2
    assert spots[second.id].wait_s == pytest.approx(20 * 60, abs=5)


def test_the_job_page_and_the_api_say_why_it_waits(busy_cpu, alice, client):
    notes = [t["note"] for t in job_status_event(job_id=busy_cpu.id)["tasks"]]
    assert notes[0] == (
        "1 task ahead on cpu (a worker runs one task at a time, for every team): starts within "
        "about 15 min"
    )
    assert notes[1].startswith("2 tasks ahead on cpu") and notes[1].endswith("about 20 min")
    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[busy_cpu.id])).content.decode()
    assert "1 task ahead on cpu" in page
    api = client_for(api_services.token_create(user=alice, name="t")[1])
    tasks = api.get(f"/api/v1/jobs/{busy_cpu.id}").json()["tasks"]
    assert [(t["queue_position"], round(t["wait_estimate_s"] / 60)) for t in tasks] == [
        (1, 15), (2, 20)]  # fmt: skip


def test_nothing_ahead_says_next_and_a_running_task_has_no_spot(alice, team):
    job = shape_job(alice, team, [RMS], queue="cpu")
    assert job_status_event(job_id=job.id)["tasks"][0]["note"].startswith("next on cpu")
    services.task_claim(task_id=job.tasks.get().id, worker="w")
    assert queue_spots(job_id=job.id) == {}


def post_form(client, team, **fields):
    form = {"team": team.id, "title": "t", "kind": "shapes", "queue": "cpu",
            "shapes_text": "op,shape,dtype\nrmsnorm,8x64,fp32", **fields}  # fmt: skip
    return client.post(reverse("jobs:new"), form)


def test_the_form_takes_a_budget_and_defaults_to_a_short_one_on_the_cpu(
    alice, team, client, settings, django_capture_on_commit_callbacks
):
    settings.KF_QUEUES = ["cpu", "gpu.h100"]
    client.force_login(alice)
    page = client.get(reverse("jobs:new")).content.decode()
    assert 'name="budget"' in page and "Empty: 5 min on the CPU, 30 min on a GPU" in page
    with django_capture_on_commit_callbacks(execute=False):
        assert post_form(client, team).status_code == 302
        assert post_form(client, team, queue="gpu.h100").status_code == 302
        assert post_form(client, team, budget="12").status_code == 302
    assert [j.gpu_minutes for j in Job.objects.order_by("created_at")] == [5, 30, 12]
    refused = post_form(client, team, budget="1")
    assert refused.status_code == 400
    assert "1 problem needs at least 2 CPU minutes" in refused.content.decode()
    assert Job.objects.count() == 3
