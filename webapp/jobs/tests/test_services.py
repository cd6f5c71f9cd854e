"""Job services on the real database: compare-and-set transitions, seq order, idempotency."""

import threading
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.utils import timezone

from webapp.jobs import services
from webapp.jobs.models import Iteration, Job, Task
from webapp.jobs.tests.support import shape_job
from workers.tests.support import queue_clear, queue_length

pytestmark = pytest.mark.django_db


def make_job(user, team, problems, queue="test.nobody"):
    # A queue no worker listens on: these tests drive the task states themselves.
    return shape_job(user=user, team=team, title="t", problems=problems, queue=queue)


def record(task, attempt, index, verdict="reverted"):
    return services.iteration_record(
        task_id=task.id, attempt=attempt, data=services.IterationData(index=index, verdict=verdict)
    )


def test_it_splits_a_job_into_problems_and_tasks_and_enqueues_them_after_commit(
    alice, team, problems, django_capture_on_commit_callbacks
):
    queue_clear("test.enqueue")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = make_job(alice, team, problems, queue="test.enqueue")
    assert queue_length("test.enqueue") == 0, "nothing may be enqueued before the commit"
    for callback in callbacks:
        callback()
    assert queue_length("test.enqueue") == 2
    queue_clear("test.enqueue")
    assert job.tasks.filter(enqueued_at__isnull=False).count() == 2
    assert job.status == Job.Status.QUEUED
    assert [p.key for p in job.problems.all()] == [p.key for p in problems]
    assert job.tasks.filter(status=Task.Status.QUEUED, queue="test.enqueue").count() == 2


def test_it_keeps_a_job_submitted_while_the_broker_is_down_and_sends_it_later(
    alice, team, problems, django_capture_on_commit_callbacks, monkeypatch
):
    from kombu.exceptions import OperationalError

    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    queue_clear("test.unsent")
    with monkeypatch.context() as patch:
        patch.setattr(services.run_task_task, "apply_async", broker_down)
        with django_capture_on_commit_callbacks(execute=True):
            job = make_job(alice, team, problems, queue="test.unsent")
    assert job.tasks.filter(status=Task.Status.QUEUED, enqueued_at__isnull=True).count() == 2
    assert services.tasks_send_unsent(older_than_s=60) == [], "too recent: maybe still sending"

    Job.objects.filter(id=job.id).update(created_at=timezone.now() - timedelta(minutes=5))
    sent = services.tasks_send_unsent(older_than_s=60)  # the broker is back (the real Redis)
    assert sorted(sent) == sorted(job.tasks.values_list("id", flat=True))
    assert queue_length("test.unsent") == 2
    assert services.tasks_send_unsent(older_than_s=60) == [], "sent once, not on every tick"
    queue_clear("test.unsent")


def test_it_refuses_a_job_for_a_team_the_user_is_not_in(bob, team, problems):
    with pytest.raises(PermissionDenied):
        make_job(bob, team, problems)
    assert Job.objects.count() == 0


def test_it_lets_only_one_delivery_claim_a_task(alice, team, problems):
    task = make_job(alice, team, problems).tasks.first()
    first = services.task_claim(task_id=task.id, worker="w1")
    second = services.task_claim(task_id=task.id, worker="w2")
    assert first is not None and first.attempt == 1 and first.resume_from == 0
    assert second is None
    assert Job.objects.get(id=task.job_id).status == Job.Status.RUNNING


def test_it_numbers_iterations_in_order_and_ignores_a_repeated_index(alice, team, problems):
    job = make_job(alice, team, problems)
    t1, t2 = job.tasks.all()
    services.task_claim(task_id=t1.id, worker="w")
    services.task_claim(task_id=t2.id, worker="w")
    a = record(t1, 1, 0, "baseline")
    b = record(t2, 1, 0, "baseline")
    c = record(t1, 1, 1)
    again = record(t1, 1, 1)
    assert [a.seq, b.seq, c.seq] == [1, 2, 3]
    assert again.id == c.id
    assert Iteration.objects.filter(job=job).count() == 3
    assert Job.objects.get(id=job.id).last_seq == 3


def test_it_refuses_writes_from_a_run_that_lost_its_task(alice, team, problems):
    task = make_job(alice, team, problems).tasks.first()
    services.task_claim(task_id=task.id, worker="w")
    Task.objects.filter(id=task.id).update(status=Task.Status.QUEUED)  # the watchdog took it back
    services.task_claim(task_id=task.id, worker="w2")  # attempt 2 now owns it
    assert record(task, 1, 0) is None
    assert services.task_should_stop(task_id=task.id, attempt=1)
    assert not services.task_should_stop(task_id=task.id, attempt=2)
    assert not services.task_finish(task_id=task.id, attempt=1, stop_reason="stale")
    assert Task.objects.get(id=task.id).status == Task.Status.RUNNING


def test_it_finishes_the_job_only_when_its_last_task_ends(alice, team, problems):
    job = make_job(alice, team, problems)
    t1, t2 = job.tasks.all()
    services.task_claim(task_id=t1.id, worker="w")
    services.task_claim(task_id=t2.id, worker="w")
    assert services.task_finish(task_id=t1.id, attempt=1, stop_reason="done")
    assert Job.objects.get(id=job.id).status == Job.Status.RUNNING
    assert not services.task_finish(task_id=t1.id, attempt=1, stop_reason="again"), (
        "a second finish is a no-op"
    )
    assert services.task_fail(task_id=t2.id, attempt=1, error="boom")
    job.refresh_from_db()
    assert job.status == Job.Status.DONE and job.finished_at is not None


def test_it_fails_the_job_when_every_task_failed(alice, team, problems):
    job = make_job(alice, team, problems[:1])
    task = job.tasks.get()
    services.task_claim(task_id=task.id, worker="w")
    services.task_fail(task_id=task.id, attempt=1, error="Traceback: boom")
    assert Job.objects.get(id=job.id).status == Job.Status.FAILED


def test_it_cancels_queued_tasks_and_asks_running_ones_to_stop(alice, team, problems):
    job = make_job(alice, team, problems)
    running, queued = job.tasks.all()
    services.task_claim(task_id=running.id, worker="w")
    assert services.job_cancel(job=job, user=alice)
    assert not services.job_cancel(job=job, user=alice), "cancelling twice changes nothing"
    assert Task.objects.get(id=queued.id).status == Task.Status.CANCELLED
    assert services.task_claim(task_id=queued.id, worker="w") is None
    assert services.task_should_stop(task_id=running.id, attempt=1)
    assert Job.objects.get(id=job.id).status == Job.Status.RUNNING
    services.task_finish(task_id=running.id, attempt=1, stop_reason="cancelled")
    assert Task.objects.get(id=running.id).status == Task.Status.CANCELLED
    assert Job.objects.get(id=job.id).status == Job.Status.CANCELLED


def test_it_requeues_a_task_whose_heartbeat_stopped_and_resumes_after_saved_iterations(
    alice, team, problems
):
    task = make_job(alice, team, problems[:1]).tasks.get()
    services.task_claim(task_id=task.id, worker="w")
    record(task, 1, 0, "baseline")
    record(task, 1, 1)
    assert services.tasks_requeue_stale(stale_after_s=60, max_attempts=3) == [], (
        "a fresh heartbeat is left alone"
    )
    Task.objects.filter(id=task.id).update(heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert services.tasks_requeue_stale(stale_after_s=60, max_attempts=3) == [task.id]
    claim = services.task_claim(task_id=task.id, worker="w2")
    assert claim.attempt == 2 and claim.resume_from == 2


def test_it_gives_up_on_a_task_after_too_many_lost_workers(alice, team, problems):
    task = make_job(alice, team, problems[:1]).tasks.get()
    services.task_claim(task_id=task.id, worker="w")
    Task.objects.filter(id=task.id).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert services.tasks_requeue_stale(stale_after_s=60, max_attempts=1) == []
    task.refresh_from_db()
    assert task.status == Task.Status.FAILED and "stopped responding" in task.error
    assert Job.objects.get(id=task.job_id).status == Job.Status.FAILED


@pytest.mark.django_db(transaction=True)
def test_it_hands_out_unique_contiguous_seqs_to_concurrent_writers(alice, team, problems):
    """Several workers report at once for one job: every seq is used exactly once."""
    doubled = [p.with_shape(*[s * 2 for s in p.shape]) for p in problems]
    job = make_job(alice, team, [*problems, *doubled])
    tasks = list(job.tasks.all())
    for task in tasks:
        services.task_claim(task_id=task.id, worker="w")
    errors = []

    def report(task):
        try:
            for index in range(8):
                record(task, 1, index)
        except Exception as error:  # surfaced by the assertion below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=report, args=(t,)) for t in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    seqs = sorted(Iteration.objects.filter(job=job).values_list("seq", flat=True))
    assert seqs == list(range(1, 8 * len(tasks) + 1))
