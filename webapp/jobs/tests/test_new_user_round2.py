"""Smaller things a new user met (issue 27, item 8), checked without a browser; the pages
themselves: tests/test_new_user_round2_in_a_browser.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

import kernels
from webapp.jobs import services
from webapp.jobs.models import ModelRun
from webapp.jobs.selectors import end_to_end_view, without_package
from webapp.jobs.status import job_status_event
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db


def test_a_cancelled_task_says_cancelled(alice, team):
    job = shape_job(alice, team, [kernels.parse_problem("rmsnorm", "8x64", "fp32")])
    claim = services.task_claim(task_id=job.tasks.get().id, worker="w")
    services.job_cancel(job=job, user=alice)  # the run polls the flag and stops
    services.task_finish(task_id=claim.task_id, attempt=claim.attempt, stop_reason="cancelled")
    task = job_status_event(job_id=job.id)["tasks"][0]
    assert task["status"] == "cancelled"
    assert task["note"] == "cancelled"
    assert task["search"]["outcome"] == "Cancelled before a winner: PyTorch serves this problem"


def test_a_model_job_without_a_win_names_no_package():
    harness_says = (
        "Nothing beats the best baseline (torch.compile, 812.0 µs per forward): with the kernels "
        "the best was 820.1 µs (0.990x). The model runs unchanged and the package replaces no "
        "PyTorch op."
    )
    assert without_package(harness_says).endswith(
        "The model runs unchanged: there is no package to download."
    )
    run = ModelRun(end_to_end={"variants": {"eager": {"offline": {"median_us": 1.0}}},
                               "message": harness_says})  # fmt: skip
    assert "package replaces" not in end_to_end_view(run).message


def test_the_form_marks_what_is_required_and_names_every_example(alice, team, client):
    client.force_login(alice)
    page = client.get(reverse("jobs:new")).content.decode()
    assert 'Title <span class="required">(required)</span>' in page
    assert 'Team <span class="required">' not in page  # a select always has a value
    names = "gpt block, gptj block, llama3 decode, llama block, llama decode, mlp, qwen2 block, vit block"
    assert f"{names}. No file to upload." in page
    assert 'data-max-bytes="262144"' in page and 'data-max-text="256.0\xa0KB"' in page


def test_the_token_page_asks_before_revoking(alice, client):
    from webapp.api import services as api_services

    api_services.token_create(user=alice, name="laptop")
    client.force_login(alice)
    page = client.get(reverse("api_tokens")).content.decode()
    assert '<details class="confirm"><summary>Revoke</summary>' in page
    assert "Revoke “laptop”" in page and "cannot be undone" in page


def test_the_empty_compare_page_says_why_and_offers_kernels(alice, team, client):
    client.force_login(alice)
    empty = client.get(reverse("dashboard:compare")).content.decode()
    assert "Nothing to compare yet" in empty
    job = shape_job(alice, team, [kernels.parse_problem("rmsnorm", "8x64", "fp32")], title="J")
    claim = services.task_claim(task_id=job.tasks.get().id, worker="w")
    data = services.IterationData(index=0, verdict="baseline", source="def run(): pass\n")
    it = services.iteration_record(task_id=claim.task_id, attempt=claim.attempt, data=data)
    page = client.get(reverse("dashboard:compare")).content.decode()
    assert f'<option value="{job.id}/{it.seq}">J #{it.seq} · rmsnorm/8x64/fp32</option>' in page
