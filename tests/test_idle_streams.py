"""Open event streams that carry nothing cost the web server no database connection (issue 28,
item 2), on the server `up` starts and the real PostgreSQL.

On main every stream polled the database from its request's thread and kept that thread's
connection for the stream's life: 200 idle streams were 200 connections (PostgreSQL allows 100
by default) and slowed every page.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.tests.support import web_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
STREAMS = 20


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[int]:
    """The port of the web server, started as `manage.py up` starts it."""
    log_path = tmp_path_factory.mktemp("web") / "web.log"
    with web_server(log_path, KF_API_SSE_MAX_PER_TOKEN=str(STREAMS)) as (port, _):
        yield port


def database_connections() -> int:
    """Connections to the test database other than this test's own."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def idle_stream(port: int, job_id: str, token: str) -> tuple[socket.socket, bytes]:
    """A stream whose client reads the status line and nothing more."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(
        f"GET /api/v1/jobs/{job_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    return sock, sock.recv(15)


def test_idle_streams_hold_no_database_connection(server, alice, team, django_db_blocker):
    from django.db import connection

    from webapp.api import services as api_services
    from webapp.jobs.tests.support import shape_job

    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL's connections")
    import kernels

    token = api_services.token_create(user=alice, name="idle")[1]
    # A job nobody works on: its streams have nothing to carry.
    job = shape_job(alice, team, [kernels.parse_problem("rmsnorm", "8x64", "fp32")],
                    queue="test.nobody")  # fmt: skip
    idle_stream(server, str(job.id), token)[0].close()  # the server's first request warms it
    time.sleep(1)
    before = database_connections()
    streams = [idle_stream(server, str(job.id), token) for _ in range(STREAMS)]
    try:
        assert all(head == b"HTTP/1.1 200 OK" for _, head in streams), streams[0][1]
        time.sleep(2)  # main polled every second, each stream on its own connection
        held = database_connections() - before
    finally:
        for sock, _ in streams:
            sock.close()
    assert held <= 2, f"{STREAMS} idle streams hold {held} database connections"
