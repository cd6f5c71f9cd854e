"""A job's events as server-sent events, read from the database (the record), not the channel layer.

Wire format (text/event-stream), in this order:

    event: status                 the job's and its tasks' states (on start and on each change)
    data: {...}

    id: 17                        one per iteration, id = its seq in the job
    event: iteration
    data: {...}

    event: end                    the job is terminal and every iteration was sent; stream closes
    data: {"status": "done", "last_seq": 17}

Lines starting with ":" are keep-alives. A client that loses the connection reconnects with
`Last-Event-ID: <last seq>` (or `?after=`) and misses nothing. Polling the database every
KF_API_SSE_POLL_S keeps this correct even when a channel-layer message is dropped.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async

from webapp.jobs import selectors as job_selectors
from webapp.jobs.status import job_status_event

BATCH = 500
KEEPALIVE_S = 15.0


def sse(event: str, data: dict[str, Any], *, id_: int | None = None) -> str:
    head = f"id: {id_}\n" if id_ is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def job_event_stream(
    *, job_id: uuid.UUID, after: int, max_s: float, poll_s: float
) -> AsyncIterator[str]:
    read_status = sync_to_async(job_status_event)
    read_iterations = sync_to_async(job_selectors.iterations_after)
    deadline = time.monotonic() + max_s
    last_status: dict[str, Any] | None = None
    last_sent = time.monotonic()
    while True:
        # Status first: once it reads terminal, every iteration is already committed.
        status = await read_status(job_id=job_id)
        rows = await read_iterations(job_id=job_id, after_seq=after, limit=BATCH)
        for row in rows:
            after = row["seq"]
            yield sse("iteration", row, id_=after)
        if status != last_status:
            last_status = status
            yield sse("status", status)
            last_sent = time.monotonic()
        elif rows:
            last_sent = time.monotonic()
        if len(rows) == BATCH:
            continue  # a backlog: send the rest before waiting
        if status["terminal"]:
            yield sse("end", {"status": status["status"], "last_seq": after})
            return
        if time.monotonic() >= deadline:
            yield sse("timeout", {"status": status["status"], "last_seq": after})
            return
        if time.monotonic() - last_sent >= KEEPALIVE_S:
            last_sent = time.monotonic()
            yield ": keep-alive\n\n"
        await asyncio.sleep(poll_s)
