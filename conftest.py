"""Fixtures shared by webapp/, workers/ and the cross-cutting tests/ (real PostgreSQL and Redis).

Kept free of module-level Django imports so the packages that never touch Django (kernels,
harness, agents) pay nothing for it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import pytest

if TYPE_CHECKING:
    from workers.tests.support import WorkerProcess


@pytest.fixture(scope="session")
def redis_url() -> str:
    from django.conf import settings

    return settings.REDIS_URL


@pytest.fixture(scope="session", autouse=True)
def _clean_test_redis(request: pytest.FixtureRequest) -> Iterator[None]:
    """Start every session without this run's leftovers in the test Redis db (never the one `up`
    uses). Only this run's keys: FLUSHDB also emptied the queues of another run on the same
    machine, whose worker then waited for a task that no longer existed."""
    if "django" not in sys.modules:
        yield
        return
    from django.conf import settings

    url = settings.REDIS_URL
    if urlparse(url).path.strip("/") in ("", "0"):
        raise RuntimeError(f"tests must not run on Redis db 0 ({url}); see webapp/settings_test.py")
    import redis

    client = redis.Redis.from_url(url)
    # If Redis is down, the tests that need it fail with their own clear message.
    with contextlib.suppress(redis.RedisError):
        keys = list(client.scan_iter(match=f"{settings.KF_TEST_REDIS_PREFIX}*", count=1000))
        if keys:
            client.delete(*keys)
    yield


@pytest.fixture
def make_user(django_user_model) -> Callable[..., object]:
    def make(username: str, password: str = "pw-for-tests-1"):
        return django_user_model.objects.create_user(username=username, password=password)

    return make


@pytest.fixture
def alice(make_user):
    return make_user("alice")


@pytest.fixture
def bob(make_user):
    return make_user("bob")


@pytest.fixture
def team(alice):
    from webapp.accounts.services import team_create

    return team_create(user=alice, name="Alice's team")


@pytest.fixture
def problems():
    import kernels

    return [
        kernels.parse_problem("matmul", "64x48x32", "fp16", "NN"),
        kernels.parse_problem("rmsnorm", "8x256", "fp32"),
    ]


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    from workers.tests.support import WorkerProcess

    started: list[WorkerProcess] = []

    def start(
        *,
        queues: str = "cpu,control",
        beat: bool = False,
        env: dict[str, str] | None = None,
        concurrency: int = 1,
    ) -> WorkerProcess:
        worker = WorkerProcess(
            queues=queues,
            extra_env=env,
            beat=beat,
            log_path=tmp_path / f"worker{len(started)}.log",
            concurrency=concurrency,
        )
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
