"""Notifications to a job's websocket group. The database is the record; these are pokes.

Everything sent here is already committed, so a lost message (channels is at-most-once) costs
nothing: the browser notices the gap in `seq` or reconnects, and backfills from the database.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

# Message types; the consumer handles them as job_iteration / job_status.
ITERATION = "job.iteration"
STATUS = "job.status"


def group_name(job_id: uuid.UUID | str) -> str:
    return f"job.{job_id}"


def broadcast(job_id: uuid.UUID | str, type_: str, payload: dict[str, Any]) -> None:
    """Send to the job's group; never raises, because the write it announces already happened."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group_name(job_id), {"type": type_, "payload": payload})
    except Exception:  # a down Redis must not fail the task whose rows are already saved
        log.warning("broadcast to job %s failed; clients will backfill", job_id, exc_info=True)
