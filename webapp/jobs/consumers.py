"""The live job page's websocket: join the job's group, then backfill from the database.

Order matters (R5.2): joining first means nothing committed after the backfill query can be
missed; the browser drops anything it sees twice by `seq`. Clients send
{"type": "backfill", "after": <seq>} when they notice a gap (channels is at-most-once).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.jobs import events, selectors
from webapp.jobs.status import job_status_event

CLOSE_FORBIDDEN = 4403
BACKFILL_PAGE = 500


class JobConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        self.job_id = self.scope["url_route"]["kwargs"]["job_id"]
        if user is None or not user.is_authenticated or not await self._may_view(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = events.group_name(self.job_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._send_status()
        await self._backfill(_last_seq(self.scope))

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "backfill":
            after = content.get("after")
            if isinstance(after, int) and after >= 0:
                await self._backfill(after)

    async def job_iteration(self, message: dict[str, Any]) -> None:
        await self.send_json({"type": "iteration", "iteration": message["payload"]})

    async def job_status(self, message: dict[str, Any]) -> None:
        await self.send_json({"type": "status", "status": message["payload"]})

    async def _backfill(self, after: int) -> None:
        rows = await database_sync_to_async(selectors.iterations_after)(
            job_id=self.job_id, after_seq=after, limit=BACKFILL_PAGE
        )
        # A full page means there may be more: the client asks again after the last one.
        more = len(rows) == BACKFILL_PAGE
        await self.send_json({"type": "backfill", "after": after, "iterations": rows, "more": more})

    async def _send_status(self) -> None:
        status = await database_sync_to_async(job_status_event)(job_id=self.job_id)
        await self.send_json({"type": "status", "status": status})

    @database_sync_to_async
    def _may_view(self, user: Any) -> bool:
        return selectors.job_get_for_user(user=user, job_id=self.job_id) is not None


def _last_seq(scope: dict[str, Any]) -> int:
    values = parse_qs(scope.get("query_string", b"").decode()).get("last_seq", ["0"])
    try:
        return max(0, int(values[0]))
    except ValueError:
        return 0
