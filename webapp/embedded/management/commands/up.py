"""`python manage.py up`: the whole product on this machine, stopped by Ctrl-C.

Migrates the database (SQLite under var/ unless DATABASE_URL says otherwise), ensures a demo
account, uses the Redis at REDIS_URL or starts one there, starts one Celery worker per visible
GPU (or one CPU worker when there is none) plus the watchdog's beat, and the ASGI server.
A process that exits on its own is restarted (webapp/embedded/supervisor.py); only Ctrl-C (or
SIGTERM to `up`) stops them all.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from webapp.embedded import redis_server
from webapp.embedded.demo import demo_account_ensure, demo_password
from webapp.embedded.gpus import detect_gpus
from webapp.embedded.supervisor import GaveUp, Supervisor
from webapp.embedded.web import web_server_argv
from webapp.embedded.workers import (
    WorkerSpec,
    intentionally_root,
    node_names,
    work_queues,
    worker_argv,
    worker_env,
    worker_plan,
)


class Command(BaseCommand):
    help = (
        "Run KernelForge locally: database, Redis, workers and the web server. Ctrl-C stops it all."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--stop-timeout", type=float, default=15.0, help="seconds each process gets to stop"
        )
        parser.add_argument(
            "--worker-stop-timeout",
            type=float,
            default=settings.CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT + 30,
            help="seconds a worker gets to hand its running task back before it is killed",
        )

    def handle(self, *args, host: str, port: int, stop_timeout: float,
               worker_stop_timeout: float, **options) -> None:  # fmt: skip
        say = self._say
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        say(f"database ready: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
        demo = demo_account_ensure(password=demo_password(settings.VAR_DIR))

        # Ctrl-C (SIGINT) and SIGTERM both end in the same orderly stop below. SIGINT is set
        # explicitly: a shell that starts us in the background would have it ignored.
        signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        supervisor = Supervisor(log=say, max_quick_crashes=settings.KF_UP_MAX_QUICK_CRASHES)
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "webapp.settings"),
        )
        env.setdefault("KF_VAR_DIR", str(settings.VAR_DIR))
        try:
            self._start_redis(supervisor, env)
            plan, queues = self._start_workers(supervisor, env, stop_timeout_s=worker_stop_timeout)
            env["KF_QUEUES"] = ",".join(queues)
            web = supervisor.start("web", web_server_argv(host, port), env=env)
            if not _wait_for_port(host, port, alive=lambda: web.running, timeout_s=90):
                raise CommandError(f"the web server did not start listening on {host}:{port}")
            # The banner comes last: after the workers' own start-up output, not buried in it.
            if not _wait_for_workers(node_names(plan, socket.gethostname()), timeout_s=90):
                say("some workers have not answered yet: jobs wait in the queue until they do")
            shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
            say("")
            say(f"KernelForge is up: http://{shown}:{port}/")
            say(
                f"  demo login: username {demo.username}  password {demo.password}"
                f"  (team: {demo.team}, slug {demo.team_slug})"
            )
            say(f"  queues: {', '.join(queues)}   Ctrl-C stops everything.")
            say(
                f"  command line: export KFORGE_URL=http://{shown}:{port} KFORGE_TOKEN=<a token"
                f" from /settings/tokens/>; {_kforge_command()} submit shapes.csv"
                f" --team {demo.team_slug} --wait"
            )
            say("")
            supervisor.watch()  # restarts what exits, until Ctrl-C
            exit_code = 0
        except GaveUp as error:
            say(f"{error}; stopping the rest")
            exit_code = 1
        except KeyboardInterrupt:
            say("stopping…")
            exit_code = 0
        finally:
            signal.signal(
                signal.SIGINT, signal.SIG_IGN
            )  # a second Ctrl-C must not cut the cleanup short
            # The web server first (nothing new comes in), the workers, then Redis.
            supervisor.stop_all(timeout_s=stop_timeout, first=("web",), last=("redis",))
            say("all stopped")
        if exit_code:
            raise CommandError("a process of `up` kept crashing")

    def _start_redis(self, supervisor: Supervisor, env: dict[str, str]) -> None:
        url = settings.REDIS_URL
        if redis_server.reachable(url):
            self._say(f"using Redis at {url}")
            return
        try:
            argv = redis_server.server_argv(url, data_dir=settings.VAR_DIR / "redis")
        except RuntimeError as error:
            raise CommandError(str(error)) from None
        supervisor.start("redis", argv, env=env)
        if not redis_server.wait_until_reachable(url, timeout_s=15):
            raise CommandError(f"started redis-server, but {url} did not answer")
        self._say(f"started a private Redis at {url} (keeps nothing on disk)")
        # It starts empty: the queued tasks' messages (a task handed back by a worker that
        # stopped with the last `up`, say) are gone. Send them again.
        from webapp.jobs.services import tasks_send_queued

        if sent := tasks_send_queued():
            self._say(f"sent {len(sent)} queued task(s) again")

    def _start_workers(
        self, supervisor: Supervisor, env: dict[str, str], *, stop_timeout_s: float
    ) -> tuple[list[WorkerSpec], list[str]]:
        plan = worker_plan(detect_gpus(os.environ.get("CUDA_VISIBLE_DEVICES")))
        schedule = settings.VAR_DIR / "celerybeat-schedule"
        quiet_root = intentionally_root()
        if quiet_root:
            self._say(
                "running as root on purpose (a container, or KF_ALLOW_ROOT): Celery's superuser warning is set aside"
            )
        for spec in plan:
            argv = worker_argv(spec, beat_schedule=schedule)
            # SIGTERM to the worker's main process only: Celery's warm shutdown, which hands
            # the running task back (workers/stopping.py); the group would kill it mid-task.
            supervisor.start(
                spec.name,
                argv,
                env=worker_env(env, spec, quiet_root=quiet_root),
                stop_main_only=True,
                stop_timeout_s=stop_timeout_s,
            )
            self._say(f"{spec.name} -> queues {', '.join(spec.queues)}")
        return plan, work_queues(plan)

    def _say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()


def _wait_for_port(host: str, port: int, *, alive, timeout_s: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            with socket.create_connection((host, port), timeout=1) as sock:
                # A connect to a free ephemeral port can "succeed" by connecting to itself.
                if sock.getsockname() != sock.getpeername():
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def _wait_for_workers(nodes: set[str], *, timeout_s: float) -> bool:
    """Until every worker answers a ping (it has printed its start-up banner and is consuming):
    True, or False at the timeout."""
    from workers.celery import app

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0)
        if nodes <= {name for reply in replies for name in reply}:
            return True
    return False


def _kforge_command() -> str:
    """How to run kforge from this shell: `make install` puts it next to this Python (the
    .venv is usually not on PATH)."""
    script = Path(sys.executable).with_name("kforge")
    if not script.exists():
        return f"{sys.executable} -m kforge"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
