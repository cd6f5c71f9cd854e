"""What `--wait` shows while a job runs: a bar, problems done, iterations, best speedup.

The bar moves with what a job spends: its GPU budget when the job has one (a one-problem job
would otherwise sit at 0/1 until it ends), else the problems finished. Best speedups timed in
the CPU interpreter read "interp.", as on the job page: they check correctness, not speed.
"""

from __future__ import annotations

import shutil
import sys
import threading
from typing import Any, TextIO

from tqdm import tqdm


class Progress:
    def __init__(
        self,
        *,
        title: str,
        problems: int,
        budget_minutes: float | None = None,
        stream: TextIO = sys.stderr,
        quiet: bool = False,
    ) -> None:
        self.problems = problems
        self.by_budget = bool(budget_minutes)
        if self.by_budget:
            total, unit = float(budget_minutes or 0), " min"
            counter = "{n:.1f}/{total:.0f}"
        else:
            total, unit, counter = problems, " problems", "{n}/{total}"
        self.bar = tqdm(
            desc=title[:24],
            total=total,
            file=stream,
            disable=quiet,
            mininterval=0.5,
            leave=True,
            bar_format=f"{{desc}}: {{percentage:3.0f}}%|{{bar}}| {counter}{unit} [{{elapsed}}{{postfix}}]",
            # A terminal that reports 0 columns (some ptys) makes tqdm drop the bar and this
            # format; shutil falls back to 80 columns there.
            ncols=shutil.get_terminal_size().columns,
        )
        self.iterations = 0
        self.spent_s = 0.0
        self.done = 0
        self.best: float | None = None
        self.interpreter_best = False  # something was kept, but only in the CPU interpreter
        self.interpreter_tasks: set[int] = set()  # tasks whose kept results are interpreter ones
        self.status = "queued"
        self.budget_minutes = float(budget_minutes or 0)
        # Events can be minutes apart (a long screen round): a ticker keeps the clock moving.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="kforge-progress", daemon=True)
        if not quiet:
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if not self._stop.is_set():
                    self.bar.refresh()

    def on_status(self, status: dict[str, Any]) -> None:
        tasks = status.get("tasks", [])
        self.status = status.get("status", self.status)
        self.problems = len(tasks) or self.problems
        self.done = sum(1 for t in tasks if t.get("status") not in ("queued", "running"))
        if not self.by_budget:
            self.bar.total = self.problems
            self.bar.n = self.done
        self._refresh()

    def on_iteration(self, iteration: dict[str, Any]) -> None:
        self.iterations += 1
        self.spent_s += iteration.get("gpu_s") or 0.0
        if self.by_budget:
            self.bar.n = min(self.bar.total, self.spent_s / 60.0)
        # The headline is over the fastest baseline (what `kforge status` and the pages show);
        # a server from before it sends only the speedup over eager PyTorch.
        speedup = iteration.get("fastest_speedup") or iteration.get("speedup")
        if iteration.get("verdict") == "kept" and speedup is not None:
            if iteration.get("interpreter"):
                self.interpreter_best = True
                self.interpreter_tasks.add(iteration.get("task"))
            else:
                self.best = max(self.best or 0.0, speedup)
        self._refresh()

    @property
    def best_text(self) -> str:
        if self.best is not None:
            return f"{self.best:.2f}x"
        return "interp." if self.interpreter_best else "-"

    def _refresh(self) -> None:
        # Most telling first: a narrow terminal cuts the end of the line.
        parts = [self.status, f"best {self.best_text}", f"{self.iterations} iter"]
        if self.by_budget:
            parts.append(f"{self.done}/{self.problems} done")
        with self._lock:
            self.bar.set_postfix_str(", ".join(parts), refresh=False)
            self.bar.refresh()

    def finish(self, status: str) -> None:
        """The job ended: the bar is full (a job that stops early used part of its budget, and
        the bar sat at "6 %", issue 27), and the line says how much it spent."""
        self.status = status
        with self._lock:
            if self.by_budget:
                spent = self.spent_s / 60.0
                self.bar.bar_format = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}{postfix}]"
                self.bar.set_postfix_str(
                    f"{status}, {spent:.1f} of {self.budget_minutes:.0f} min used, "
                    f"best {self.best_text}, {self.iterations} iter",
                    refresh=False,
                )
            self.bar.n = self.bar.total
            self.bar.refresh()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self.bar.close()
        if self._ticker.is_alive():
            self._ticker.join(timeout=2)
