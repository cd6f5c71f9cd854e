"""The Celery settings that long GPU jobs depend on (RELIABILITY.md R4.2)."""

import workers.tasks  # noqa: F401 (registers the tasks, as the worker does)
from workers.celery import app


def test_it_configures_celery_for_long_gpu_jobs():
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_reject_on_worker_lost is False
    assert conf.task_track_started is True
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is True
    assert conf.worker_soft_shutdown_timeout > 0
    assert conf.task_soft_time_limit < conf.task_time_limit
    for options in (conf.broker_transport_options, conf.result_backend_transport_options):
        assert options["visibility_timeout"] > conf.task_time_limit
    assert conf.visibility_timeout > conf.task_time_limit


def test_it_routes_the_watchdog_to_the_control_queue_and_schedules_it():
    assert app.conf.task_routes["workers.watchdog"] == {"queue": "control"}
    assert app.conf.beat_schedule["watchdog"]["task"] == "workers.watchdog"
    assert "workers.run_task" in app.tasks and "workers.watchdog" in app.tasks
