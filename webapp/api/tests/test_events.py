"""The server-sent-events stream, served by the ASGI handler as in production."""

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from webapp.api.events import sse
from webapp.api.tests.conftest import FakeWorker
from webapp.jobs.models import Task

pytestmark = pytest.mark.django_db


def parse(text: str) -> list[dict]:
    """Split an event stream into {"id", "event", "data"} records (comments dropped)."""
    out = []
    for block in text.split("\n\n"):
        record = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            key, _, value = line.partition(": ")
            record[key] = json.loads(value) if key == "data" else value
        if record:
            out.append(record)
    return out


def stream(token: str, path: str, **headers) -> tuple[int, str, str]:
    async def go():
        # Headers per request: AsyncClient(headers=...) mangles their names (Django 5.2).
        response = await AsyncClient().get(
            path, headers={"Authorization": f"Bearer {token}", **headers}
        )
        if not response.streaming:
            return response.status_code, response["Content-Type"], response.content.decode()
        chunks = [chunk async for chunk in response.streaming_content]
        body = "".join(c.decode() if isinstance(c, bytes) else c for c in chunks)
        return response.status_code, response["Content-Type"], body

    return async_to_sync(go)()


@pytest.fixture
def finished_job(alice_api, submit):
    job_id = submit(alice_api, shapes="- {op: rmsnorm, shape: 8x64, dtype: fp32}").json()["id"]
    worker = FakeWorker(Task.objects.get(job_id=job_id).id)
    worker.iterate(verdict="baseline")
    worker.iterate(verdict="kept", speedup=1.5)
    worker.iterate(verdict="reverted")
    worker.finish()
    return job_id


@pytest.fixture
def token(alice, team, make_token):
    return make_token(alice)


def test_it_streams_every_iteration_then_the_final_status_then_end(token, finished_job):
    status, content_type, body = stream(token, f"/api/v1/jobs/{finished_job}/events")
    assert status == 200 and content_type == "text/event-stream"
    events = parse(body)
    assert [e["event"] for e in events] == ["iteration", "iteration", "iteration", "status", "end"]
    assert [e.get("id") for e in events[:3]] == ["1", "2", "3"]
    assert events[1]["data"]["verdict"] == "kept" and events[1]["data"]["speedup"] == 1.5
    assert events[3]["data"]["status"] == "done" and events[3]["data"]["terminal"] is True
    assert events[4]["data"] == {"status": "done", "last_seq": 3}


def test_it_resumes_after_last_event_id_or_the_after_parameter(token, finished_job):
    _, _, body = stream(token, f"/api/v1/jobs/{finished_job}/events", **{"Last-Event-ID": "2"})
    assert [e.get("id") for e in parse(body) if e["event"] == "iteration"] == ["3"]
    _, _, body = stream(token, f"/api/v1/jobs/{finished_job}/events?after=3")
    assert [e["event"] for e in parse(body)] == ["status", "end"]


def test_it_stops_a_stream_of_a_running_job_at_max_s_with_a_timeout_event(token, alice_api, submit):
    job_id = submit(alice_api).json()["id"]
    _, _, body = stream(token, f"/api/v1/jobs/{job_id}/events?max_s=0.2")
    events = parse(body)
    assert [e["event"] for e in events] == ["status", "timeout"]
    assert events[1]["data"] == {"status": "queued", "last_seq": 0, "reason": "max_s"}


def test_it_refuses_a_stream_to_another_team(bob, bob_team, make_token, finished_job):
    status, _, body = stream(make_token(bob), f"/api/v1/jobs/{finished_job}/events")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_an_event_is_one_block_of_id_event_and_json_data():
    assert sse("iteration", {"seq": 4}, id_=4) == 'id: 4\nevent: iteration\ndata: {"seq":4}\n\n'
