"""A job's events as server-sent events, pushed from the channel layer, backfilled from the database.

Wire format (text/event-stream), in this order:

    event: status                 the job's and its tasks' states (on start and on each change)
    data: {...}

    id: 17                        one per iteration, id = its seq in the job
    event: iteration
    data: {...}

    event: end                    the job is terminal and every iteration was sent; stream closes
    data: {"status": "done", "last_seq": 17}

    event: timeout                the stream's max_s passed, or nothing happened for
    data: {...}                   KF_API_SSE_IDLE_S ("reason": "max_s" | "idle"); reconnect

Lines starting with ":" are keep-alives. A client that loses the connection reconnects with
`Last-Event-ID: <last seq>` (or `?after=`) and misses nothing.

How (issue 28): the stream joins the job's channel-layer group first, then reads the database
(RELIABILITY.md R5.2, as the websocket does), then sends each poke as it arrives: an iteration
that follows the last one sent goes out as it came; a gap (channels is at-most-once) or a
status that says more iterations exist is filled from the database. Polling the database once a
second made events arrive 0.5-1 s late and cost every open stream a thread and a connection.
While idle a stream holds no database connection and no busy thread: it waits on the channel layer
(one Redis connection per process for all streams) and every KF_API_SSE_KEEPALIVE_S sends a
keep-alive and re-reads the database once, in case a poke was lost.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from webapp.api.errors import ApiError, ErrorCode, error_response
from webapp.api.selectors import Principal
from webapp.jobs import events as job_events
from webapp.jobs import selectors as job_selectors
from webapp.jobs.status import job_status_event

BATCH = 500


def sse(event: str, data: dict[str, Any], *, id_: int | None = None) -> str:
    head = f"id: {id_}\n" if id_ is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


# --- how many streams one token or one address may hold ---------------------------------------


@dataclass
class StreamSlots:
    """Open streams per key (a token, an address), in this process.

    One web process serves every stream under `up` and in the compose file; with several, each
    counts its own (a cap per process).
    """

    open: Counter[Hashable] = field(default_factory=Counter)

    def acquire(self, limits: dict[Hashable, int]) -> Hashable | None:
        """Take one slot under every key; the first key at its limit when refused."""
        for key, limit in limits.items():
            if self.open[key] >= limit:
                return key
        for key in limits:
            self.open[key] += 1
        return None

    def release(self, keys: list[Hashable]) -> None:
        for key in keys:
            self.open[key] -= 1
            if self.open[key] <= 0:
                del self.open[key]


SLOTS = StreamSlots()


class Slot:
    """One acquired stream slot, given back exactly once: when the stream ends, or when the
    response is dropped without ever being iterated (a client gone before the first byte)."""

    def __init__(self, keys: list[Hashable]) -> None:
        self.keys = keys
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            SLOTS.release(self.keys)


async def stream_response(
    request: HttpRequest, principal: Principal, job_id: uuid.UUID, after: int, max_s: float
) -> HttpResponse:
    """The event stream of a job the principal may see, or 429 when it holds too many."""
    address = request.META.get("REMOTE_ADDR") or "unknown"
    limits = {
        ("token", principal.token.pk): settings.KF_API_SSE_MAX_PER_TOKEN,
        ("address", address): settings.KF_API_SSE_MAX_PER_IP,
    }
    refused = SLOTS.acquire(limits)
    if refused is not None:
        which = "this token" if refused[0] == "token" else f"the address {address}"
        return error_response(
            ApiError(
                ErrorCode.TOO_MANY_STREAMS,
                f"{which} already has {limits[refused]} event streams open; close one "
                "(or wait for one to end) and try again.",
                [{"limit": limits[refused], "per": refused[0]}],
            )
        )
    # The authentication and the job's lookup ran on this request's thread: give its database
    # connection back now rather than hold it for the stream's life.
    await sync_to_async(_release_connections)()
    stream_limits = StreamLimits(
        max_s=max_s,
        idle_s=settings.KF_API_SSE_IDLE_S,
        keepalive_s=settings.KF_API_SSE_KEEPALIVE_S,
    )
    stream = job_event_stream(
        job_id=job_id, after=after, limits=stream_limits, slot=Slot(list(limits))
    )
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not buffer the stream
    return response


# --- the stream -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamLimits:
    max_s: float  # the stream closes (event `timeout`) after this long at most
    idle_s: float  # ...or after this long without an event
    keepalive_s: float  # a comment line, and one database re-read, after this long of silence


def job_event_stream(
    *, job_id: uuid.UUID, after: int, limits: StreamLimits, slot: Slot | None = None
) -> AsyncIterator[str]:
    stream = _stream(job_id=job_id, after=after, limits=limits, slot=slot)
    if slot is not None:
        weakref.finalize(stream, slot.release)
    return stream


async def _stream(
    *, job_id: uuid.UUID, after: int, limits: StreamLimits, slot: Slot | None
) -> AsyncIterator[str]:
    layer = get_channel_layer()
    assert layer is not None, "CHANNEL_LAYERS is configured in settings"
    channel = await layer.new_channel()
    group = job_events.group_name(job_id)
    receiving: asyncio.Task | None = None
    try:
        await layer.group_add(group, channel)  # before reading: nothing committed after is missed
        cursor = Cursor(job_id=job_id, after=after)
        for chunk in await cursor.resync():
            yield chunk
        now = time.monotonic()
        deadline, last_event, last_sent = now + limits.max_s, now, now
        while not cursor.ended:
            if receiving is None:
                receiving = asyncio.ensure_future(layer.receive(channel))
            wait_s = min(limits.keepalive_s, deadline - now, last_event + limits.idle_s - now)
            # Waiting on the same receive across timeouts: cancelling channels_redis's receive
            # drops what it had buffered for the channel.
            done, _ = await asyncio.wait({receiving}, timeout=max(0.0, wait_s))
            now = time.monotonic()
            if done:
                chunks = await cursor.on_message(receiving.result())
                receiving = None
            elif now >= deadline or now >= last_event + limits.idle_s:
                reason = "max_s" if now >= deadline else "idle"
                data = {"status": cursor.status_value, "last_seq": cursor.after, "reason": reason}
                yield sse("timeout", data)
                return
            elif now - last_sent >= limits.keepalive_s:
                chunks = await cursor.resync() or [": keep-alive\n\n"]
            else:
                chunks = []
            for chunk in chunks:
                yield chunk
            if chunks:
                last_sent = now
                if any(not c.startswith(":") for c in chunks):
                    last_event = now
    finally:
        if receiving is not None:
            receiving.cancel()
        await asyncio.shield(layer.group_discard(group, channel))
        if slot is not None:
            slot.release()


class Cursor:
    """Where one stream is: the last seq sent, the last status sent; what to send next."""

    def __init__(self, *, job_id: uuid.UUID, after: int) -> None:
        self.job_id = job_id
        self.after = after
        self.status: dict[str, Any] | None = None
        self.ended = False

    @property
    def status_value(self) -> str:
        return self.status["status"] if self.status else ""

    async def resync(self) -> list[str]:
        """Everything the database has that this stream has not sent yet."""
        chunks: list[str] = []
        while True:
            # Status first: once it reads terminal, every iteration is already committed.
            status, rows = await _read(self.job_id, self.after)
            chunks += self._iterations(rows)
            if len(rows) < BATCH:
                break
        chunks += self._status(status)
        return chunks

    async def on_message(self, message: dict[str, Any]) -> list[str]:
        payload = message.get("payload") or {}
        if message.get("type") == job_events.ITERATION:
            seq = payload.get("seq", 0)
            if seq <= self.after:
                return []  # already sent (backfill and push overlap)
            if seq == self.after + 1:
                return self._iterations([payload])
            return await self.resync()  # a poke was lost: fill the gap from the record
        if message.get("type") == job_events.STATUS:
            if payload.get("last_seq", 0) > self.after:
                return await self.resync()
            return self._status(payload)
        return []

    def _iterations(self, rows: list[dict[str, Any]]) -> list[str]:
        chunks = []
        for row in rows:
            if row["seq"] > self.after:
                self.after = row["seq"]
                chunks.append(sse("iteration", row, id_=row["seq"]))
        return chunks

    def _status(self, status: dict[str, Any]) -> list[str]:
        chunks = []
        if status != self.status:
            self.status = status
            chunks.append(sse("status", status))
        if status["terminal"] and self.after >= status["last_seq"]:
            self.ended = True
            chunks.append(sse("end", {"status": status["status"], "last_seq": self.after}))
        return chunks


async def _read(job_id: uuid.UUID, after: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    # On the request's own thread (Django's ASGI handler gives every request one, parked while
    # the stream waits), with the connection closed afterwards: between reads a stream holds
    # no database connection.
    return await sync_to_async(_read_now)(job_id, after)


def _read_now(job_id: uuid.UUID, after: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        status = job_status_event(job_id=job_id)
        rows = job_selectors.iterations_after(job_id=job_id, after_seq=after, limit=BATCH)
        return status, rows
    finally:
        _release_connections()


def _release_connections() -> None:
    """Close this thread's database connections, except one inside a transaction (a request
    never is here; a test that runs requests inside its own transaction is)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()
