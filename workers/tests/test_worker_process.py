"""A real Celery worker process on the real Redis broker and the test PostgreSQL database.

No eager mode: the job is enqueued on commit, a separate `celery -A workers worker` picks the
tasks up, and the rows it writes are what we check. The second test SIGKILLs that worker
mid-task and shows the watchdog re-queue it, a new worker finish it, and no iteration twice.
"""

import time

import pytest

from webapp.jobs.models import Iteration, Job, Task
from webapp.jobs.tests.support import shape_job
from workers.tests.support import start_time, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def job_status(job):
    return Job.objects.values_list("status", flat=True).get(id=job.id)


def test_it_runs_a_job_to_done_on_a_real_worker(start_worker, alice, team, problems):
    start_worker(env={"KF_STANDIN_ITERATIONS": "3", "KF_STANDIN_PAUSE_S": "0.05"})
    job = shape_job(user=alice, team=team, title="real", problems=problems, queue="cpu")
    wait_until(lambda: job_status(job) == Job.Status.DONE, timeout_s=45, what="the job to finish")
    assert list(Iteration.objects.filter(job=job).values_list("seq", flat=True)) == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    assert set(Task.objects.filter(job=job).values_list("status", "attempt")) == {
        (Task.Status.DONE, 1)
    }


def test_it_reruns_a_task_after_its_worker_is_killed_without_duplicating_iterations(
    start_worker, alice, team, problems
):
    steps = 12
    env = {
        "KF_STANDIN_ITERATIONS": str(steps),
        "KF_STANDIN_PAUSE_S": "0.4",
        "KF_HEARTBEAT_S": "0.5",
        "KF_HEARTBEAT_STALE_S": "3",
        "KF_WATCHDOG_INTERVAL_S": "1",
    }
    first = start_worker(env=env)
    job = shape_job(user=alice, team=team, title="kill", problems=problems[:1], queue="cpu")
    task = job.tasks.get()
    wait_until(
        lambda: Iteration.objects.filter(task=task).count() >= 3, timeout_s=30, what="3 iterations"
    )
    children = first.pool_children()
    first.kill()  # SIGKILL the worker's main process mid-task
    assert children, "the prefork pool should have a child running the task"
    # The pool child dies with its parent (PR_SET_PDEATHSIG), so nothing keeps heartbeating.
    wait_until(
        lambda: not any(start_time(pid) == started for pid, started in children),
        timeout_s=10,
        what="orphans to die",
    )
    saved_before = Iteration.objects.filter(task=task).count()
    assert saved_before < steps and Task.objects.get(id=task.id).status == Task.Status.RUNNING

    start_worker(env=env, beat=True)  # a fresh worker, with the watchdog's beat
    wait_until(
        lambda: job_status(job) == Job.Status.DONE,
        timeout_s=50,
        what="the job to finish after the kill",
    )

    task.refresh_from_db()
    assert task.attempt == 2, "the task ran exactly twice: once killed, once to the end"
    rows = list(
        Iteration.objects.filter(task=task).order_by("seq").values_list("index", "seq", "attempt")
    )
    assert [index for index, _, _ in rows] == list(range(steps)), "every step once, in order"
    assert [seq for _, seq, _ in rows] == list(range(1, steps + 1)), "no gaps or repeats in seq"
    assert {attempt for index, _, attempt in rows if index >= saved_before} == {2}
    time.sleep(0.5)
    assert Iteration.objects.filter(task=task).count() == steps


def test_it_runs_the_real_agent_graph_through_the_harness_on_a_real_worker(
    start_worker, alice, team, tmp_path
):
    """The product path with nothing stood in: worker -> agents.optimize -> harness sandbox.

    On this CPU-only machine the harness runs candidates under Triton's interpreter, so the
    evaluations are real (compiled, checked, timed) but labelled as interpreter results.
    """
    import kernels

    start_worker(
        env={
            "KF_AGENT": "graph",
            "KF_CHECKPOINT_URL": f"sqlite:///{tmp_path / 'checkpoints.sqlite3'}",
        }
    )
    job = shape_job(
        user=alice,
        team=team,
        title="graph",
        problems=[kernels.parse_problem("rmsnorm", "8x256", "fp32")],
        queue="cpu",
        # One task: a 120 s cap on harness and wall time. One full verification (~45 s
        # estimated) is kept back from the start, so a 60 s cap left the screen nothing.
        gpu_minutes=2,
    )
    wait_until(lambda: job_status(job) == Job.Status.DONE, timeout_s=240, what="the graph's job")
    rows = list(Iteration.objects.filter(job=job).order_by("seq"))
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    kept = [r for r in rows if r.verdict == Iteration.Verdict.KEPT]
    assert kept, [(r.verdict, r.reason) for r in rows]
    first = kept[0].evaluation  # a screen finalist, fully verified
    assert first["verdict"] == "passed"
    assert first["timings"]["regime"] == "interpreter"
    assert "run(" in kept[0].source and "@triton.jit" in kept[0].source
    assert len({r.index for r in rows}) == len(rows)
    # The run's best carries its full-protocol evaluation (the reporter's finished()).
    assert [r.index for r in rows if r.final_evaluation] == [kept[-1].index]
    task = Task.objects.get(job=job)
    assert task.status == Task.Status.DONE and task.stop_reason
    # Many points screened, only finalists verified: every iteration row is one of those.
    assert task.search["screened"] > task.search["fully_verified"] == len(rows)
