"""Why a job failed, the same on its page, in the API and in `kforge status` (issue 27, item 3),
and tracebacks without the server's paths (item 8)."""

from __future__ import annotations

import pytest
from django.conf import settings

import kernels
from kernels.model_source import check_model_source
from webapp.api import services as api_services
from webapp.api.tests.conftest import FakeWorker, client_for
from webapp.jobs import model_services
from webapp.jobs.failures import describe, scrub_paths
from webapp.jobs.tests.support import model_jobs, shape_job
from webapp.jobs.tests.test_model_job_status import MODEL

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_api(alice, team):
    return client_for(api_services.token_create(user=alice, name="t")[1])


@pytest.fixture
def alice_client(alice, client):
    client.force_login(alice)
    return client


PROFILE_FAILURE = """The model's forward pass raised an error:
  File "/srv/kf/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _call_impl
    return forward_call(*args, **kwargs)
  File "/tmp/kf-model-16631-112392-rvu_lry3/model.py", line 4, in forward
    return x @ torch.ones(3, 5)
RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x4 and 3x5)"""


def test_paths_keep_what_a_user_can_read_and_lose_where_we_keep_them():
    root = str(settings.BASE_DIR)
    text = (
        f'File "{root}/harness/model/child.py", line 3\n'
        'File "/usr/lib/python3/dist-packages/numpy/core.py"\n'
        "cannot open /var/lib/kernelforge/media/models/2026/11/x.py: 4x4 / 3 and a/b"
    )
    assert scrub_paths(text) == (
        'File "harness/model/child.py", line 3\nFile "numpy/core.py"\n'
        "cannot open x.py: 4x4 / 3 and a/b"
    )


def test_a_failure_reads_as_one_line_and_a_tail():
    line, tail = describe(PROFILE_FAILURE)
    assert line == (
        "The model's forward pass raised an error: RuntimeError: mat1 and mat2 shapes cannot "
        "be multiplied (4x4 and 3x5)"
    )
    assert 'File "model.py", line 4, in forward' in tail and "/tmp/" not in tail
    assert describe("Profiling failed on our side: OSError('disk full')") == (
        "Profiling failed on our side: OSError('disk full')",
        "",
    )


def failed_model_job(alice, team):
    source = check_model_source(MODEL.read_text(), "two_norms.py")
    (job,) = model_jobs(alice, team, [source], queue="cpu")
    assert model_services.model_fail(
        job_id=job.id, message=PROFILE_FAILURE, profile={"ok": False, "failure": "forward"}
    )
    return job


def test_the_api_says_why_a_model_job_failed(alice, team, alice_api):
    job = failed_model_job(alice, team)
    body = alice_api.get(f"/api/v1/jobs/{job.id}").json()
    assert body["status"] == "failed" and body["tasks"] == []
    assert body["failure"]["stage"] == "profile (forward)"
    assert body["failure"]["message"].endswith("(4x4 and 3x5)")
    assert "/tmp/" not in str(body) and "/srv/" not in str(body)


def test_the_api_says_which_problem_failed_a_shape_job_and_nothing_for_others(
    alice, team, alice_api
):
    job = shape_job(alice, team, [kernels.parse_problem("rmsnorm", "8x64", "fp32")])
    assert alice_api.get(f"/api/v1/jobs/{job.id}").json()["failure"] is None
    FakeWorker(job.tasks.get().id).fail(
        f'Traceback (most recent call last):\n  File "{settings.BASE_DIR}/agents/graph.py", '
        "line 9, in run\nValueError: the harness gave up"
    )
    body = alice_api.get(f"/api/v1/jobs/{job.id}").json()
    assert body["failure"] == {
        "stage": "optimize rmsnorm/8x64/fp32",
        "message": "ValueError: the harness gave up",
        "traceback": 'Traceback (most recent call last):\n  File "agents/graph.py", line 9, in '
        "run\nValueError: the harness gave up",
    }
    assert str(settings.BASE_DIR) not in body["tasks"][0]["error"]


def test_the_page_shows_the_failure_without_server_paths(alice, team, alice_client):
    job = failed_model_job(alice, team)
    page = alice_client.get(f"/jobs/{job.id}/").content.decode()
    assert "RuntimeError: mat1 and mat2" in page and "/tmp/kf-model" not in page
    assert "site-packages" not in page and "File &quot;model.py&quot;, line 4" in page
