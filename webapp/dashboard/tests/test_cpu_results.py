"""What a user without a GPU sees (issue 17): interpreter results are marked, never read as
speedups; the job page names CPU time; ended jobs and starting points read as such.
The same pages in a browser: tests/test_new_user_in_a_browser.py."""

from __future__ import annotations

import re

import pytest

from webapp.api.tests.conftest import FakeWorker
from webapp.dashboard.tests.cpu_run import seed_cpu_run
from webapp.jobs.models import Iteration

pytestmark = pytest.mark.django_db


@pytest.fixture
def cpu(alice, team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # nothing reaches a broker
        return seed_cpu_run(user=alice, team=team)


def speedups_shown(page: str) -> list[str]:
    return re.findall(r"\d+\.\d+×", page)


def test_the_jobs_list_marks_an_interpreter_best_and_ranks_only_gpu_numbers(
    alice_client, cpu, runs
):
    page = alice_client.get("/").content.decode()
    row = page[page.index("CPU run (interpreter)") :].split("</tr>")[0]
    assert "interp." in row and "×" not in row, row
    # Django writes "2\xa0seconds ago" (a no-break space) once a second has passed: \s takes it.
    assert re.search(r">(now|an?\s\w+\sago|\d+\s\w+\sago)<", row) and "0 minutes" not in row
    gpu_row = page[page.index("Norms on H100") :].split("</tr>")[0]
    assert re.search(r"\d\.\d\d×", gpu_row) and "interp." not in gpu_row


def test_a_job_with_both_kinds_of_result_shows_its_gpu_best(alice_client, cpu):
    worker = FakeWorker(cpu.waiting.tasks.get().id)
    worker.iterate(verdict="kept", speedup=0.15, kind="interpreter", regime="interpreter")
    row = alice_client.get("/").content.decode().split("Waiting for a worker")[1].split("</tr>")[0]
    assert "interp." in row
    worker.iterate(verdict="kept", speedup=1.31)
    row = alice_client.get("/").content.decode().split("Waiting for a worker")[1].split("</tr>")[0]
    assert "1.31×" in row and "interp." not in row


def test_the_team_board_best_is_never_an_interpreter_ratio(alice_client, team, cpu):
    page = alice_client.get(f"/leaderboards/teams/{team.slug}/").content.decode()
    assert "kept kernel" in page and "best" not in page.split("</h1>")[1].split("</p>")[0]
    worker = FakeWorker(cpu.waiting.tasks.get().id)
    worker.iterate(verdict="kept", speedup=1.31)
    page = alice_client.get(f"/leaderboards/teams/{team.slug}/").content.decode()
    assert "best 1.31×" in page


def test_an_interpreter_iteration_shows_no_speedup_number(alice_client, cpu):
    job = cpu.job
    rmsnorm = Iteration.objects.get(job=job, task__problem__op="rmsnorm", index=0)
    page = alice_client.get(f"/jobs/{job.id}/iterations/{rmsnorm.seq}/").content.decode()
    assert "Timed in Triton&#x27;s CPU interpreter" in page or "Timed in Triton's CPU" in page
    assert speedups_shown(page) == [], speedups_shown(page)  # no "0.00×"
    assert 'class="interp"' in page and "TFLOP/s" not in page
    assert "12984975.00" in page  # the measured µs stay: they are true CPU times
    assert "0.00266x vs torch (CPU interpreter)" in page  # the judge's reason, readable


def test_a_starting_point_shows_its_code_alone_not_a_diff_against_nothing(alice_client, cpu):
    job = cpu.job
    first = Iteration.objects.get(job=job, task__problem__op="matmul", index=0)
    page = alice_client.get(f"/jobs/{job.id}/iterations/{first.seq}/").content.decode()
    assert "no parent to compare with" in page and 'class="diff code source"' in page
    assert "d-added" not in page and "this candidate" not in page
    kept = Iteration.objects.get(job=job, task__problem__op="matmul", index=2)
    page = alice_client.get(f"/jobs/{job.id}/iterations/{kept.seq}/").content.decode()
    assert "vs parent" in page and 'class="d-changed"' in page


def test_the_job_page_names_cpu_time_on_a_cpu_job_and_gpu_time_on_a_gpu_job(
    alice_client, cpu, runs
):
    page = alice_client.get(f"/jobs/{cpu.job.id}/").content.decode()
    assert '<label for="gpu-meter">CPU time</label>' in page and "GPU time" not in page
    gpu_job, _ = runs
    page = alice_client.get(f"/jobs/{gpu_job.id}/").content.decode()
    assert '<label for="gpu-meter">GPU time</label>' in page


def test_an_ended_job_says_it_ended_not_that_results_are_coming(alice_client, cpu):
    page = alice_client.get(f"/jobs/{cpu.ended_empty.id}/").content.decode()
    assert "No iterations: the job ended before the worker reported one." in page
    assert "Nothing yet" not in page and "Last hypothesis" in page
    page = alice_client.get(f"/jobs/{cpu.waiting.id}/").content.decode()
    assert "Nothing yet: iterations appear here" in page and "Current hypothesis" in page


def test_an_untimed_attempt_on_the_cpu_carries_no_timed_in_the_interpreter_banner(
    alice_client, cpu
):
    """Issue 17: CUDA C++ candidates that failed with "need a GPU" said "Timed in Triton's CPU
    interpreter" although nothing was timed."""
    from webapp.jobs import services

    task = cpu.waiting.tasks.get()
    claim = services.task_claim(task_id=task.id, worker="cpu@up")
    services.iteration_record(
        task_id=claim.task_id,
        attempt=claim.attempt,
        data=services.IterationData(
            index=0,
            verdict="compile_failed",
            source="# a CUDA C++ candidate\n",
            reason="CUDA C++ candidates need a GPU; none is visible",
            evaluation={
                "verdict": "compile_error",
                "compile": {"ok": False, "log": "CUDA C++ candidates need a GPU; none is visible"},
                "device": {"name": "cpu (triton interpreter)", "kind": "interpreter"},
            },
        ),
    )
    seq = Iteration.objects.get(task=task).seq
    page = alice_client.get(f"/jobs/{cpu.waiting.id}/iterations/{seq}/").content.decode()
    assert "need a GPU" in page and "Timed in Triton" not in page


def test_a_model_job_without_tasks_says_cpu_time_and_a_failed_one_no_empty_meter(
    alice, team, alice_client, django_capture_on_commit_callbacks
):
    """Issue 27: a failed model job on a CPU box said "GPU time 0 min of 30 min"."""
    from kernels.model_source import check_model_source
    from webapp.jobs import model_services
    from webapp.jobs.tests.support import model_jobs
    from webapp.jobs.tests.test_model_job_status import MODEL

    source = check_model_source(MODEL.read_text(), "two_norms.py")
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = model_jobs(alice, team, [source], queue="cpu")
    page = alice_client.get(f"/jobs/{job.id}/").content.decode()
    assert '<label for="gpu-meter">CPU time</label>' in page and "GPU time" not in page
    assert model_services.model_fail(job_id=job.id, message="the profile failed")
    page = alice_client.get(f"/jobs/{job.id}/").content.decode()
    assert "the profile failed" in page and "gpu-meter" not in page and "GPU time" not in page
