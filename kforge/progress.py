"""What `--wait` shows while a job runs: a bar of finished problems, iterations, best speedup."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm


class Progress:
    def __init__(self, *, title: str, stream: TextIO = sys.stderr, quiet: bool = False) -> None:
        self.bar = tqdm(
            desc=title[:40], unit="problem", file=stream, disable=quiet, mininterval=0.5, leave=True
        )
        self.iterations = 0
        self.best: float | None = None
        self.status = "queued"

    def on_status(self, status: dict[str, Any]) -> None:
        tasks = status.get("tasks", [])
        self.status = status.get("status", self.status)
        self.bar.total = len(tasks)
        self.bar.n = sum(1 for t in tasks if t.get("status") not in ("queued", "running"))
        self._refresh()

    def on_iteration(self, iteration: dict[str, Any]) -> None:
        self.iterations += 1
        speedup = iteration.get("speedup")
        if iteration.get("verdict") == "kept" and speedup is not None:
            self.best = max(self.best or 0.0, speedup)
        self._refresh()

    def _refresh(self) -> None:
        best = f"{self.best:.2f}x" if self.best is not None else "-"
        self.bar.set_postfix_str(f"{self.status}, {self.iterations} iterations, best {best}")
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
