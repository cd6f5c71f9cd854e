"""DjangoReporter: agents.reporting.Reporter written with webapp's services.

Every call is one service call (row first, then the channel-layer poke). It also knows which
claim of the task it reports for, so a run that lost its task cannot write over the new one.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any

from django.conf import settings

from agents.reporting import IterationEvent, SearchStats
from kernels.problem import Problem
from webapp.jobs import model_services, services
from workers import stopping

log = logging.getLogger(__name__)

_STORED_FIELDS = {f.name for f in dataclasses.fields(services.IterationData)}


class DjangoReporter:
    def __init__(self, *, task_id: int, attempt: int) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.outcome: tuple[str, str] | None = None  # ("finished", reason) or ("failed", error)
        self.lost = False  # True once a write found the task owned by another attempt

    def started(self, *, problem: Problem, budget: dict[str, Any]) -> None:
        log.info(
            "task %s attempt %s started %s with budget %s",
            self.task_id,
            self.attempt,
            problem.key,
            budget,
        )

    def iteration(self, event: IterationEvent) -> None:
        data = {k: v for k, v in event.to_dict().items() if k in _STORED_FIELDS}
        saved = services.iteration_record(
            task_id=self.task_id, attempt=self.attempt, data=services.IterationData(**data)
        )
        if saved is None:
            self.lost = True

    def search(self, stats: SearchStats) -> None:
        if not services.task_search_record(
            task_id=self.task_id, attempt=self.attempt, search=stats.to_dict()
        ):
            self.lost = True

    def profile(self, *, index: int, profile: dict[str, Any]) -> None:
        profile = {**profile, "report_path": self._keep_report(profile.get("report_path"), index)}
        services.iteration_profile_record(task_id=self.task_id, index=index, profile=profile)

    def _keep_report(self, report: str | None, index: int) -> str | None:
        """Copy the harness's .ncu-rep under MEDIA_ROOT (shared with the web server), so users
        can download it; the stored path is relative to MEDIA_ROOT."""
        if not report or not Path(report).is_file():
            return None
        relative = Path("ncu") / f"task-{self.task_id}" / f"{index}.ncu-rep"
        target = Path(settings.MEDIA_ROOT) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(report, target)
        return str(relative)

    def finished(self, *, best: IterationEvent | None, stop_reason: str) -> None:
        self.outcome = ("finished", stop_reason)
        if best is not None and best.evaluation:  # the full-protocol re-evaluation of the best
            services.iteration_final_record(
                task_id=self.task_id,
                attempt=self.attempt,
                index=best.index,
                evaluation=best.evaluation,
                beats_baselines=best.beats_baselines,
            )
        if services.task_finish(
            task_id=self.task_id, attempt=self.attempt, stop_reason=stop_reason
        ):
            model_services.model_after_task(task_id=self.task_id)  # a model job's last task?

    def failed(self, *, error: str) -> None:
        if stopping.requested():
            return  # the run is unwinding to hand the task back (run_task), not failing
        self.outcome = ("failed", error)
        if services.task_fail(task_id=self.task_id, attempt=self.attempt, error=error):
            model_services.model_after_task(task_id=self.task_id)

    def cancel_requested(self) -> bool:
        stopping.raise_if_requested()  # a safe point: the worker is shutting down
        if self.lost:
            return True
        return services.task_should_stop(task_id=self.task_id, attempt=self.attempt)
