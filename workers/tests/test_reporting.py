"""DjangoReporter and run_task in-process, on the real database (no eager mode, no mocks)."""

import pytest

from agents.reporting import AttemptVerdict
from webapp.jobs import services
from webapp.jobs.models import Iteration, Job, Task
from workers.reporting import DjangoReporter
from workers.tasks import run_task, watchdog

pytestmark = pytest.mark.django_db


def test_it_keeps_the_stored_verdicts_in_step_with_the_agents_enum():
    assert {v.value for v in AttemptVerdict} == set(Iteration.Verdict.values)


def test_it_keeps_the_stored_iteration_fields_in_step_with_the_event():
    from dataclasses import fields

    from agents.reporting import IterationEvent

    stored = {f.name for f in fields(services.IterationData)}
    assert stored <= {f.name for f in fields(IterationEvent)}


@pytest.fixture
def job(alice, team, problems):
    return services.job_create_from_shapes(
        user=alice, team=team, title="t", problems=problems, queue="nobody"
    )


def test_it_runs_a_task_through_the_stand_in_and_closes_it(job, settings):
    settings.KF_STANDIN_ITERATIONS = 3
    settings.KF_STANDIN_PAUSE_S = 0
    t1, t2 = job.tasks.all()
    assert run_task.run(t1.id) == "finished"
    assert run_task.run(t1.id) == "skipped", "a duplicate delivery does nothing"
    assert run_task.run(t2.id) == "finished"
    job.refresh_from_db()
    assert job.status == Job.Status.DONE
    assert list(job.iterations.values_list("seq", flat=True)) == [1, 2, 3, 4, 5, 6]
    assert Iteration.objects.filter(task=t1).count() == 3


def test_it_stops_a_running_task_when_the_job_is_cancelled(job, alice):
    task = job.tasks.first()
    claim = services.task_claim(task_id=task.id, worker="w")
    reporter = DjangoReporter(task_id=task.id, attempt=claim.attempt)
    assert not reporter.cancel_requested()
    services.job_cancel(job=job, user=alice)
    assert reporter.cancel_requested()
    reporter.finished(best=None, stop_reason="cancelled")
    assert Task.objects.get(id=task.id).status == Task.Status.CANCELLED
    assert Job.objects.get(id=job.id).status == Job.Status.CANCELLED


def test_it_marks_the_task_failed_when_the_agent_raises(job, settings, monkeypatch):
    import workers.agent

    def broken(problem, reporter, *, task_id, resume_from):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(workers.agent, "run_agent", broken)
    task = job.tasks.first()
    with pytest.raises(RuntimeError):
        run_task.run(task.id)
    task.refresh_from_db()
    assert task.status == Task.Status.FAILED and "planner exploded" in task.error


def test_it_runs_the_watchdog_as_a_task(job):
    assert watchdog.run() == []


def test_it_keeps_the_ncu_report_where_the_web_server_can_serve_it(
    job, alice, client, settings, tmp_path
):
    from pathlib import Path

    from django.urls import reverse

    settings.MEDIA_ROOT = str(tmp_path / "media")
    fixture = Path(__file__).resolve().parents[2] / "harness/tests/fixtures"
    recorded = fixture / "h100_triton_matmul_4096_fp16.ncu-rep"  # a real report from an H100
    task = job.tasks.first()
    claim = services.task_claim(task_id=task.id, worker="w")
    reporter = DjangoReporter(task_id=task.id, attempt=claim.attempt)
    services.iteration_record(
        task_id=task.id, attempt=claim.attempt, data=services.IterationData(index=0, verdict="kept")
    )
    reporter.profile(index=0, profile={"metrics": {}, "report_path": str(recorded)})

    stored = Iteration.objects.get(task=task, index=0).profile["report_path"]
    assert not Path(stored).is_absolute() and (tmp_path / "media" / stored).is_file()
    client.force_login(alice)
    seq = Iteration.objects.get(task=task, index=0).seq
    response = client.get(reverse("dashboard:ncu_report", args=[job.id, seq]))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == recorded.read_bytes()

    reporter.profile(index=0, profile={"metrics": {}, "report_path": "/nonexistent.ncu-rep"})
    assert Iteration.objects.get(task=task, index=0).profile["report_path"] is None


def test_it_carries_the_search_to_the_task_row_and_the_job_page(job, alice, client):
    from django.urls import reverse

    from agents.reporting import SearchStats, TierStats
    from webapp.jobs import selectors

    task = job.tasks.first()
    claim = services.task_claim(task_id=task.id, worker="w")
    reporter = DjangoReporter(task_id=task.id, attempt=claim.attempt)
    stats = SearchStats(
        screen=TierStats(candidates=400, passed=350, gpu_s=120.0),
        verify=TierStats(candidates=3, passed=3, gpu_s=108.0),
        compile_s=900.0,
        profile_s=10.0,
        elapsed_s=590.0,
        outcome="verified",
        outcome_reason="#2 matmul_persistent_tma: 1.031x the fastest baseline (cublaslt)",
    )
    reporter.search(stats)

    task.refresh_from_db()
    assert SearchStats.from_dict(task.search).to_dict() == stats.to_dict()
    line = next(t for t in selectors.job_status_event(job_id=job.id)["tasks"] if t["id"] == task.id)
    assert line["search_line"].startswith(
        "screened 400, 12,000/GPU-h · fully verified 3, 100/GPU-h"
    )
    assert "time: compile 900 s, screen 120 s, verify 108 s, profile 10 s" in line["search_line"]
    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "screened 400, 12,000/GPU-h" in page and "1.031x the fastest baseline" in page

    # A run that lost its task (the watchdog gave it to another attempt) cannot write.
    stale = DjangoReporter(task_id=task.id, attempt=claim.attempt - 1)
    stale.search(SearchStats())
    task.refresh_from_db()
    assert task.search["screened"] == 400 and stale.cancel_requested()
