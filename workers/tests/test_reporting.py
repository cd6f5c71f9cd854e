"""DjangoReporter and run_task in-process, on the real database (no eager mode, no mocks)."""

import pytest

from agents.reporting import AttemptVerdict
from webapp.jobs import selectors as job_selectors
from webapp.jobs import services
from webapp.jobs.models import Iteration, Job, Task
from webapp.jobs.tests.support import shape_job
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
    return shape_job(user=alice, team=team, title="t", problems=problems, queue="nobody")


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
    from webapp.jobs.status import job_status_event

    task = job.tasks.first()
    claim = services.task_claim(task_id=task.id, worker="w")
    reporter = DjangoReporter(task_id=task.id, attempt=claim.attempt)
    stats = SearchStats(
        screen=TierStats(candidates=400, passed=350, gpu_s=120.0),
        verify=TierStats(candidates=3, passed=3, gpu_s=108.0),
        compile_s=900.0,
        profile_s=10.0,
        elapsed_s=590.0,
        families={"matmul_tiled": {"screened": 400, "passed": 350, "best_speedup": 1.1}},
        outcome="verified",
        outcome_reason="#2 matmul_persistent_tma: 1.031x the fastest baseline (cublaslt)",
    )
    reporter.search(stats)

    task.refresh_from_db()
    assert SearchStats.from_dict(task.search).to_dict() == stats.to_dict()
    line = next(t for t in job_status_event(job_id=job.id)["tasks"] if t["id"] == task.id)
    assert (line["search"]["screened"], line["search"]["verified"]) == (400, 3)
    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "400 screened, 3 fully verified" in page

    # A run that lost its task (the watchdog gave it to another attempt) cannot write.
    stale = DjangoReporter(task_id=task.id, attempt=claim.attempt - 1)
    stale.search(SearchStats())
    task.refresh_from_db()
    assert task.search["screened"] == 400 and stale.cancel_requested()


# --- The final verification of a run's best decides whether it is a winner (issue 17/18) ---


def make_job(alice, team, problems):
    from webapp.api.tests.conftest import FakeWorker

    job = shape_job(alice, team, problems)
    return job, [FakeWorker(t.id) for t in Task.objects.filter(job=job).order_by("id")]


def api_winner_speedups(api, job) -> dict[str, float]:
    body = api.get(f"/api/v1/jobs/{job.id}/winners").json()
    return {w["problem"]: w["speedup"] for w in body["winners"]}


def model_winner_speedups(job) -> dict[str, float]:
    winners = job_selectors.job_winners(job_id=job.id)
    return {w.task.problem.key: w.iteration.speedup for w in winners}


@pytest.fixture
def alice_api(alice, team):
    from webapp.api import services as api_services
    from webapp.api.tests.conftest import client_for

    return client_for(api_services.token_create(user=alice, name="t")[1])


def final(speedups: dict[str, float], verdict: str = "passed") -> dict:
    """The full-protocol re-evaluation a run ends with (agents' finish node), every baseline."""
    return {
        "verdict": verdict,
        "implausible": False,
        "timings": {"regime": "offline", "protocol": "kf-timing-v1", "speedups": speedups},
        "device": {"name": "NVIDIA H100 80GB HBM3", "kind": "cuda"},
    }


def finish_with_final(worker, index: int, evaluation: dict) -> None:
    """The run ends as workers/reporting.py reports it: its best, re-evaluated in full, with the
    harness's call on that evaluation (agents.optimize builds the event the same way)."""
    from agents.reporting import IterationEvent
    from harness.judge import wins

    best = IterationEvent(index=index, parent=None, hypothesis="", source="", candidate_id="",
                          verdict=AttemptVerdict.KEPT, reason="", evaluation=evaluation,
                          beats_baselines=wins.of_timings(evaluation["timings"]).beats)  # fmt: skip
    claim = worker.claim
    DjangoReporter(task_id=claim.task_id, attempt=claim.attempt).finished(
        best=best, stop_reason="budget"
    )


def test_a_best_the_final_verification_finds_slower_than_torch_compile_is_no_winner(
    alice, team, problems, alice_api
):
    from webapp.dashboard.models import BoardEntry

    job, (_, rms) = make_job(alice, team, problems)
    rms.iterate(verdict="kept", speedup=1.4)  # the search timed eager PyTorch only
    assert api_winner_speedups(alice_api, job) == {"rmsnorm/8x256/fp32": 1.4}
    assert BoardEntry.objects.count() == 1
    finish_with_final(rms, 0, final({"torch": 1.4, "compile": 0.9}))
    assert api_winner_speedups(alice_api, job) == {}
    assert model_winner_speedups(job) == {}
    assert BoardEntry.objects.count() == 0, "withdrawn from the leaderboard"
    reasons = job_selectors.no_winner_reasons(job_id=job.id)
    assert "0.90x vs compile" in reasons["rmsnorm/8x256/fp32"]
    assert "slower than compile, the fastest baseline" in reasons["rmsnorm/8x256/fp32"]


def test_a_best_the_final_verification_confirms_is_a_winner_over_its_best_baseline(
    alice, team, problems, alice_api
):
    job, (mm, rms) = make_job(alice, team, problems)
    rms.iterate(verdict="kept", speedup=1.5)
    finish_with_final(rms, 0, final({"torch": 1.5, "compile": 1.2}))
    mm.iterate(verdict="kept", speedup=1.6)
    finish_with_final(mm, 0, final({"torch": 1.6, "compile": 1.3}, verdict="incorrect"))
    (winner,) = alice_api.get(f"/api/v1/jobs/{job.id}/winners").json()["winners"]
    assert winner["problem"] == "rmsnorm/8x256/fp32", "a failed final check unranks matmul"
    assert (winner["best_baseline"], winner["best_baseline_speedup"]) == ("compile", 1.2)
