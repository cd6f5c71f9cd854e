"""One headline everywhere (issue 27, item 7): a result's speedup over the fastest baseline it
was timed against. The leaderboard said 1.77x (over eager) where the package said 1.14x (over
torch.compile) for the same kernel."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.urls import reverse

import kernels
from webapp.api import services as api_services
from webapp.api.tests.conftest import client_for
from webapp.dashboard.models import BoardEntry
from webapp.dashboard.services import board_rebuild
from webapp.jobs import services
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db

KEY = "rmsnorm/8x256/fp32"


@pytest.fixture
def won(alice, team):
    job = shape_job(alice, team, [kernels.parse_problem("rmsnorm", "8x256", "fp32")],
                    title="Over compile")  # fmt: skip
    claim = services.task_claim(task_id=job.tasks.get().id, worker="w")
    evaluation = {
        "verdict": "passed",
        "timings": {"regime": "offline", "speedups": {"torch": 1.77, "compile": 1.14}},
        "device": {"name": "NVIDIA H100 80GB HBM3", "kind": "cuda", "torch": "2.11.0",
                   "triton": "3.6.0"},
    }  # fmt: skip
    data = services.IterationData(
        index=0, verdict="kept", family="rmsnorm_rowwise", speedup=1.77, evaluation=evaluation,
        source="def run(x, w, out):\n    out.copy_(x)\n", beats_baselines=True,
    )  # fmt: skip
    it = services.iteration_record(task_id=claim.task_id, attempt=claim.attempt, data=data)
    assert it.ranked and it.fastest_speedup == 1.14
    return job


def test_the_leaderboard_the_api_and_the_package_say_the_same_number(won, alice, client):
    assert BoardEntry.objects.get().speedup == 1.14
    client.force_login(alice)
    page = client.get("/leaderboards/").content.decode()
    assert '1.14× <span class="muted small nowrap">over compile' in page
    assert "1.77× <span" not in page
    jobs = client.get("/").content.decode()
    assert "1.14×" in jobs and "1.77×" not in jobs

    api = client_for(api_services.token_create(user=alice, name="t")[1])
    entry = api.get("/api/v1/leaderboard").json()["groups"][0]["entries"][0]
    assert (entry["speedup"], entry["baseline"]) == (1.14, "compile")
    assert api.get(f"/api/v1/jobs/{won.id}").json()["tasks"][0]["best_speedup"] == 1.14

    data = client.get(reverse("dashboard:job_package", args=[won.id])).content
    archive = zipfile.ZipFile(io.BytesIO(data))
    readme = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("README.md"))
    assert f"| {KEY} | 1.14x | compile |" in readme


def test_a_rebuilt_board_ranks_by_the_same_number(won):
    BoardEntry.objects.update(speedup=1.77)
    assert board_rebuild() == 1 and BoardEntry.objects.get().speedup == 1.14


def test_migrations_give_old_rows_and_the_board_the_headline(won):
    import importlib

    from django.apps import apps

    from webapp.jobs.models import Iteration

    fill = importlib.import_module("webapp.jobs.migrations.0008_iteration_fastest_speedup").fill
    rebuild = importlib.import_module("webapp.dashboard.migrations.0003_board_fastest_baseline")
    Iteration.objects.update(fastest_speedup=None)  # rows as they were before 0008
    BoardEntry.objects.update(speedup=1.77)
    fill(apps, None)
    rebuild.rebuild(apps, None)
    assert Iteration.objects.get().fastest_speedup == 1.14
    assert BoardEntry.objects.get().speedup == 1.14
