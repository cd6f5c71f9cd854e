"""One rule per concept (issue 18): what a winner is, what may be ranked, what an interpreter
result is, what is implausible. Every reader (the job page, the API, the downloads, a model
job's end-to-end check, the leaderboards) gets the same answer.

Each test here failed on main: model winners kept implausible and slower kernels and read once
per task, the download took a kernel slower than PyTorch, the event stream and the API disagreed
about an interpreter result, and the API ranked one entry per job where the page ranks one per
team.
"""

from __future__ import annotations

import pytest

from webapp.api.tests.conftest import FakeWorker, client_for
from webapp.jobs import selectors
from webapp.jobs.models import Job, Task
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_api(alice, team):
    from webapp.api import services as api_services

    return client_for(api_services.token_create(user=alice, name="t")[1])


def make_job(alice, team, problems, title="t") -> tuple[Job, list[FakeWorker]]:
    job = shape_job(alice, team, problems, title=title)
    return job, [FakeWorker(t.id) for t in Task.objects.filter(job=job).order_by("id")]


def model_winner_speedups(job: Job) -> dict[str, float]:
    """What a model job's end-to-end check substitutes (workers/model_tasks.verify_model_job)."""
    return {w.task.problem.key: w.iteration.speedup for w in selectors.job_winners(job_id=job.id)}


def api_winner_speedups(api, job: Job) -> dict[str, float]:
    body = api.get(f"/api/v1/jobs/{job.id}/winners").json()
    return {w["problem"]: w["speedup"] for w in body["winners"]}


def test_an_implausible_result_is_no_winner_anywhere(alice, team, problems, alice_api):
    job, (mm, rms) = make_job(alice, team, problems)
    rms.iterate(verdict="kept", speedup=1.4)
    rms.iterate(verdict="kept", speedup=9.0, implausible=True)
    assert api_winner_speedups(alice_api, job) == {"rmsnorm/8x256/fp32": 1.4}
    assert model_winner_speedups(job) == {"rmsnorm/8x256/fp32": 1.4}


def test_a_kernel_measured_slower_than_pytorch_is_no_winner_anywhere(
    alice, team, problems, alice_api
):
    job, (mm, rms) = make_job(alice, team, problems)
    mm.iterate(verdict="kept", speedup=0.15)  # the first correct candidate is kept, however slow
    rms.iterate(verdict="kept", speedup=1.3)
    assert api_winner_speedups(alice_api, job) == {"rmsnorm/8x256/fp32": 1.3}
    assert model_winner_speedups(job) == {"rmsnorm/8x256/fp32": 1.3}


def test_an_interpreter_result_is_no_winner_anywhere(alice, team, problems, alice_api):
    job, (mm, rms) = make_job(alice, team, problems)
    mm.iterate(verdict="kept", speedup=1.8, kind="interpreter", regime="interpreter")
    rms.iterate(verdict="kept", speedup=1.3)
    assert api_winner_speedups(alice_api, job) == {"rmsnorm/8x256/fp32": 1.3}
    assert model_winner_speedups(job) == {"rmsnorm/8x256/fp32": 1.3}


def test_an_interpreter_result_is_called_one_everywhere(alice, team, problems, alice_api):
    """The device says interpreter but the timings carry no regime: still an interpreter result."""
    job, (mm, _) = make_job(alice, team, problems)
    mm.iterate(verdict="kept", speedup=1.8, kind="interpreter", regime="")
    event = alice_api.get(f"/api/v1/jobs/{job.id}/iterations").json()["items"][0]
    assert event["interpreter"] is True
    assert alice_api.get(f"/api/v1/jobs/{job.id}/winners").json()["winners"] == []


def test_model_winners_cost_a_fixed_number_of_queries(alice, team, django_assert_max_num_queries):
    import kernels

    many = [kernels.parse_problem("rmsnorm", f"8x{64 * (i + 1)}", "fp32") for i in range(6)]
    job, workers = make_job(alice, team, many)
    for worker in workers:
        worker.iterate(verdict="kept", speedup=1.2)
    with django_assert_max_num_queries(2):
        assert len(selectors.job_winners(job_id=job.id)) == 6


def test_the_api_leaderboard_ranks_one_entry_per_team_like_the_page(
    alice, team, problems, alice_api
):
    first, (_, rms1) = make_job(alice, team, problems, title="first")
    second, (_, rms2) = make_job(alice, team, problems, title="second")
    rms1.iterate(verdict="kept", speedup=1.6)
    rms2.iterate(verdict="kept", speedup=2.1)
    groups = alice_api.get("/api/v1/leaderboard").json()["groups"]
    assert [(g["problem_key"], len(g["entries"])) for g in groups] == [("rmsnorm/8x256/fp32", 1)]
    entry = groups[0]["entries"][0]
    assert (entry["team_slug"], entry["job_title"], entry["speedup"]) == (
        "alices-team",
        "second",
        2.1,
    )


def test_the_web_app_ranks_by_the_harness_call_and_never_recomputes_it(
    alice, team, problems, alice_api
):
    """Whether a result beats every baseline beyond noise is decided once, by the harness
    (harness/judge/wins.py), and passed by the worker: timings that look like a win are no winner
    when the call says a baseline was not beaten, and a final evaluation's call replaces it."""
    from webapp.api.tests.conftest import evaluation
    from webapp.jobs import services
    from webapp.jobs.models import Iteration

    job, (mm, rms) = make_job(alice, team, problems)
    rms.iterate(verdict="kept", speedup=1.4, beats_baselines=False)
    assert api_winner_speedups(alice_api, job) == {}
    it = Iteration.objects.get(task_id=rms.claim.task_id, index=0)
    assert not it.beats_baselines and not it.ranked

    final = services.iteration_final_record(
        task_id=rms.claim.task_id,
        attempt=rms.claim.attempt,
        index=0,
        evaluation=evaluation(speedup=1.4),
        beats_baselines=True,
    )
    assert final is not None and final.beats_baselines and final.ranked
    assert api_winner_speedups(alice_api, job) == {"rmsnorm/8x256/fp32": 1.4}


def test_migration_0007_gives_old_rows_the_call_they_were_ranked_by(alice, team, problems):
    import importlib

    from django.apps import apps

    from webapp.jobs.models import Iteration

    fill = importlib.import_module("webapp.jobs.migrations.0007_iteration_beats_baselines").fill
    job, (mm, rms) = make_job(alice, team, problems)
    rms.iterate(verdict="kept", speedup=1.4)  # no interval, no noise: 1.4 beats torch
    rms.iterate(verdict="reverted", speedup=0.9)
    mm.iterate(verdict="reverted")  # not timed
    Iteration.objects.update(beats_baselines=False)  # rows as they were before 0007
    fill(apps, None)
    assert list(Iteration.objects.order_by("id").values_list("beats_baselines", flat=True)) == [
        True,
        False,
        False,
    ]
