"""A background thread that marks a running task alive in the database every few seconds.

It beats even while the agent is blocked in a long step (a compile, a GPU evaluation), and
stops with the process: a SIGKILLed worker simply stops beating, which the watchdog notices.
"""

from __future__ import annotations

import threading
from types import TracebackType

from django.db import close_old_connections, connection

from webapp.jobs import services


class Heartbeat:
    def __init__(self, *, task_id: int, attempt: int, every_s: float) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{task_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                close_old_connections()
                if not services.task_heartbeat(task_id=self.task_id, attempt=self.attempt):
                    return  # the task is no longer ours; the reporter notices on its next poll
        finally:
            connection.close()
