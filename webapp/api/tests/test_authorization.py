"""The authorization matrix: another team's token sees nothing of yours, on every endpoint."""

import pytest

from webapp.accounts.models import Membership
from webapp.accounts.services import team_create
from webapp.api import services
from webapp.api.tests.conftest import FakeWorker, client_for
from webapp.jobs.models import Job, Task

pytestmark = pytest.mark.django_db

# Every endpoint that names a job; {job} and {task} are filled in per test.
JOB_ENDPOINTS = [
    ("get", "/api/v1/jobs/{job}"),
    ("post", "/api/v1/jobs/{job}/cancel"),
    ("get", "/api/v1/jobs/{job}/tasks"),
    ("get", "/api/v1/jobs/{job}/tasks/{task}"),
    ("get", "/api/v1/jobs/{job}/iterations"),
    ("get", "/api/v1/jobs/{job}/iterations/1"),
    ("get", "/api/v1/jobs/{job}/events?max_s=1"),
    ("get", "/api/v1/jobs/{job}/winners"),
    ("get", "/api/v1/jobs/{job}/download"),
]
ALL_ENDPOINTS = JOB_ENDPOINTS + [
    ("get", "/api/v1/me"),
    ("get", "/api/v1/teams"),
    ("get", "/api/v1/jobs"),
    ("post", "/api/v1/jobs"),
    ("post", "/api/v1/jobs/model"),
    ("get", "/api/v1/leaderboard"),
]


@pytest.fixture
def alices_job(alice_api, submit):
    """A job of Alice's team with a kept, GPU-timed kernel: something worth hiding."""
    job_id = submit(alice_api).json()["id"]
    task = Task.objects.filter(job_id=job_id).order_by("id").first()
    worker = FakeWorker(task.id)
    worker.iterate(verdict="kept", speedup=2.0, source="# alice's secret kernel\n")
    worker.finish()
    return Job.objects.get(id=job_id), task


def call(client, method, path, job, task):
    url = path.format(job=job.id, task=task.id)
    return getattr(client, method)(url, content_type="application/json")


@pytest.mark.parametrize(("method", "path"), JOB_ENDPOINTS)
def test_another_teams_token_gets_404_on_every_job_endpoint(bob_api, alices_job, method, path):
    job, task = alices_job
    response = call(bob_api, method, path, job, task)
    assert response.status_code == 404, (path, response.content)
    assert response.json()["error"]["code"] == "not_found"
    assert b"secret" not in response.content
    assert not Job.objects.get(id=job.id).cancel_requested


@pytest.mark.parametrize(("method", "path"), JOB_ENDPOINTS)
def test_the_owning_teams_token_reaches_every_job_endpoint(alice_api, alices_job, method, path):
    job, task = alices_job
    response = call(alice_api, method, path, job, task)
    # The job still has a queued task, so cancelling it is accepted (202).
    assert response.status_code == (202 if path.endswith("/cancel") else 200), (
        path,
        response.content,
    )


def test_another_teams_token_lists_and_ranks_nothing_of_yours(bob_api, alices_job):
    assert bob_api.get("/api/v1/jobs").json() == {"count": 0, "items": []}
    assert bob_api.get("/api/v1/leaderboard").json() == {"groups": []}
    assert [t["slug"] for t in bob_api.get("/api/v1/me").json()["teams"]] == ["bobs-team"]


def test_another_teams_token_cannot_submit_to_your_team(bob_api, submit, alices_job):
    response = submit(bob_api, team="alices-team")
    assert response.status_code == 422 and response.json()["error"]["code"] == "unknown_team"
    assert Job.objects.count() == 1


@pytest.mark.parametrize(("method", "path"), ALL_ENDPOINTS)
def test_a_revoked_token_is_refused_everywhere(alice, alices_job, method, path):
    token, raw = services.token_create(user=alice, name="soon revoked")
    services.token_revoke(user=alice, token_id=token.id)
    job, task = alices_job
    response = call(client_for(raw), method, path, job, task)
    assert response.status_code == 401 and response.json()["error"]["code"] == "token_revoked"


def test_a_token_scoped_to_one_team_sees_only_that_team(alice, alices_job, submit):
    side = team_create(user=alice, name="Side project")
    _, raw = services.token_create(user=alice, name="side ci", teams=[side])
    api = client_for(raw)
    job, _ = alices_job
    assert api.get("/api/v1/jobs").json()["count"] == 0
    assert api.get(f"/api/v1/jobs/{job.id}").status_code == 404
    refused = submit(api, team="alices-team")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert submit(api, team="side-project").status_code == 201


def test_leaving_a_team_takes_the_tokens_access_away(alice, bob, alices_job, make_token):
    job, _ = alices_job
    Membership.objects.create(team=job.team, user=bob)
    api = client_for(make_token(bob))
    assert api.get(f"/api/v1/jobs/{job.id}").status_code == 200
    Membership.objects.filter(team=job.team, user=bob).delete()
    assert api.get(f"/api/v1/jobs/{job.id}").status_code == 404
