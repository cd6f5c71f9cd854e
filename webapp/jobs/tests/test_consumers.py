"""The job websocket through the real ASGI stack (origin check, session auth) and channels_redis."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from webapp.asgi import application
from webapp.jobs import services
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db(transaction=True)


def session_headers(client, user, origin=b"http://localhost"):
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return [(b"origin", origin), (b"cookie", cookie), (b"host", b"localhost")]


@pytest.fixture
def running_job(alice, team, problems):
    job = shape_job(user=alice, team=team, title="live", problems=problems[:1], queue="x")
    task = job.tasks.get()
    services.task_claim(task_id=task.id, worker="w")
    return job, task


def record(task, index):
    return services.iteration_record(
        task_id=task.id, attempt=1, data=services.IterationData(index=index, verdict="reverted")
    )


def run(coroutine_function):
    return async_to_sync(coroutine_function)()


def test_it_backfills_after_last_seq_then_streams_new_iterations(client, alice, running_job):
    job, task = running_job
    for index in range(3):
        record(task, index)
    headers = session_headers(client, alice)

    async def scenario():
        ws = WebsocketCommunicator(application, f"/ws/jobs/{job.id}/?last_seq=1", headers=headers)
        connected, _ = await ws.connect()
        assert connected
        status = await ws.receive_json_from(timeout=5)
        assert status["type"] == "status" and status["status"]["last_seq"] == 3
        backfill = await ws.receive_json_from(timeout=5)
        assert [it["seq"] for it in backfill["iterations"]] == [2, 3]
        await sync_to_async(record)(task, 3)  # a worker saves one more: row first, then the poke
        live = await ws.receive_json_from(timeout=5)
        assert live["type"] == "iteration" and live["iteration"]["seq"] == 4
        await ws.send_json_to({"type": "backfill", "after": 2})
        again = await ws.receive_json_from(timeout=5)
        assert [it["seq"] for it in again["iterations"]] == [3, 4]
        await ws.disconnect()

    run(scenario)


def test_it_pushes_status_changes(client, alice, running_job):
    job, task = running_job
    headers = session_headers(client, alice)

    async def scenario():
        ws = WebsocketCommunicator(application, f"/ws/jobs/{job.id}/", headers=headers)
        assert (await ws.connect())[0]
        await ws.receive_json_from(timeout=5)  # status
        await ws.receive_json_from(timeout=5)  # empty backfill
        await sync_to_async(services.task_finish)(task_id=task.id, attempt=1, stop_reason="done")
        message = await ws.receive_json_from(timeout=5)
        assert message["type"] == "status" and message["status"]["status"] == "done"
        assert message["status"]["terminal"] is True
        await ws.disconnect()

    run(scenario)


@pytest.mark.parametrize("who", ["anonymous", "outsider"])
def test_it_refuses_people_outside_the_team(client, bob, running_job, who):
    job, _ = running_job
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if who == "outsider":
        headers = session_headers(client, bob)

    async def scenario():
        ws = WebsocketCommunicator(application, f"/ws/jobs/{job.id}/", headers=headers)
        connected, code = await ws.connect()
        assert not connected and code == 4403

    run(scenario)


def test_it_refuses_a_foreign_origin_even_with_a_valid_session(client, alice, running_job):
    job, _ = running_job
    headers = session_headers(client, alice, origin=b"http://evil.example")

    async def scenario():
        ws = WebsocketCommunicator(application, f"/ws/jobs/{job.id}/", headers=headers)
        connected, _ = await ws.connect()
        assert not connected

    run(scenario)


def test_it_pages_a_long_backfill(client, alice, running_job, monkeypatch):
    from webapp.jobs import consumers

    monkeypatch.setattr(consumers, "BACKFILL_PAGE", 2)
    job, task = running_job
    for index in range(3):
        record(task, index)
    headers = session_headers(client, alice)

    async def scenario():
        ws = WebsocketCommunicator(application, f"/ws/jobs/{job.id}/", headers=headers)
        assert (await ws.connect())[0]
        await ws.receive_json_from(timeout=5)  # status
        first = await ws.receive_json_from(timeout=5)
        assert [it["seq"] for it in first["iterations"]] == [1, 2] and first["more"] is True
        await ws.send_json_to({"type": "backfill", "after": 2})
        rest = await ws.receive_json_from(timeout=5)
        assert [it["seq"] for it in rest["iterations"]] == [3] and rest["more"] is False
        await ws.disconnect()

    run(scenario)
