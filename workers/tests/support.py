"""Helpers for tests that run real worker processes against the test database and broker."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[2]


def live_database_url() -> str:
    """DATABASE_URL pointing at the database pytest-django created (for worker subprocesses)."""
    from django.conf import settings

    name = settings.DATABASES["default"]["NAME"]
    parsed = urlparse(os.environ["DATABASE_URL"])
    return urlunparse(parsed._replace(path=f"/{name}"))


class WorkerProcess:
    """A real `celery -A workers worker` on the test broker and the test database."""

    def __init__(self, *, queues: str, extra_env: dict[str, str] | None = None, beat: bool = False,
                 log_path: Path, concurrency: int = 1) -> None:  # fmt: skip
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="webapp.settings_test",
            DATABASE_URL=live_database_url(),
            TRITON_INTERPRET="1",
            CUDA_VISIBLE_DEVICES="",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra_env or {})
        argv = [sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", queues,
                "-c", str(concurrency),
                "--loglevel", "INFO", "-n", f"test-{os.getpid()}-{time.monotonic_ns()}@%h",
                "--without-gossip", "--without-mingle"]  # fmt: skip
        if beat:
            argv += ["--beat", "--schedule", str(log_path.with_suffix(".beat"))]
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log()}")
            if " ready." in self.log():
                return
            time.sleep(0.2)
        raise TimeoutError(f"worker not ready in {timeout_s}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def pool_children(self) -> list[tuple[int, int]]:
        """(pid, start time) of the worker's pool processes."""
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(self.process.pid)], capture_output=True, text=True
        )
        return [(int(pid), start_time(int(pid))) for pid in out.stdout.split()]

    def kill(self) -> None:
        """SIGKILL the worker's main process only, as an OOM killer or a crash would."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()


def queue_length(name: str) -> int:
    """Messages waiting in a Celery queue on the test broker, at every priority: kombu's Redis
    transport keeps one list per priority step (0, 3, 6, 9), named <queue><sep><step> above 0."""
    import redis
    from django.conf import settings

    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    keys = [prefix + name] + [f"{prefix}{name}\x06\x16{step}" for step in (3, 6, 9)]
    broker = redis.Redis.from_url(settings.REDIS_URL)
    # redis-py types its sync and async clients alike (Awaitable | int); this one is sync.
    return sum(cast(int, broker.llen(key)) for key in keys)


def queue_clear(name: str) -> None:
    import redis
    from django.conf import settings

    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    keys = [prefix + name] + [f"{prefix}{name}\x06\x16{step}" for step in (3, 6, 9)]
    redis.Redis.from_url(settings.REDIS_URL).delete(*keys)


def start_time(pid: int) -> int:
    """The process's start time in clock ticks (-1 once it is gone): tells it from a pid reuse."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def wait_until(
    predicate: Callable[[], bool], *, timeout_s: float, what: str, every_s: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def web_server(log_path: Path, **extra_env: str) -> Iterator[tuple[int, subprocess.Popen]]:
    """(port, process) of the web server started as `manage.py up` starts it, on the test
    database and broker, answering /api/openapi.json; stopped on exit."""
    from django.conf import settings

    from webapp.embedded.web import web_server_argv

    port = free_port()
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings_test",
        DATABASE_URL=live_database_url(),
        REDIS_URL=settings.REDIS_URL,
        KF_CHANNELS_PREFIX=settings.KF_CHANNELS_PREFIX,
        PYTHONUNBUFFERED="1",
        **extra_env,
    )
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            web_server_argv("127.0.0.1", port),
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/api/openapi.json", timeout=2
                    ):
                        break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"the web server did not start: {log_path.read_text()}"
                        ) from None
                    time.sleep(0.2)
            yield port, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
