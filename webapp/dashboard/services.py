"""Writes of the dashboard: keeping the leaderboard rows (models.BoardEntry) current.

Eligibility is Iteration.ranked, the jobs app's rule (webapp.jobs.selectors.result_facts: a
verified win on a GPU), written when the iteration was recorded.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F

from webapp.dashboard.models import BoardEntry
from webapp.jobs.models import Iteration, Job
from webapp.jobs.selectors import ranked_iterations


def board_offer(*, iteration: Iteration) -> bool:
    """Make this iteration its team's entry if it beats the current one (ties keep the older),
    by its speedup over the fastest baseline (Iteration.fastest_speedup: the one headline)."""
    speedup = iteration.fastest_speedup
    if not iteration.ranked or speedup is None:
        return False
    problem = iteration.task.problem
    fields = {
        "problem_key": problem.key,
        "device": str(iteration.measurement["device"].get("name", "")),
        "team_id": iteration.job.team_id,
    }
    with transaction.atomic():
        current = BoardEntry.objects.select_for_update().filter(**fields).first()
        if current is None:
            try:
                with transaction.atomic():
                    BoardEntry.objects.create(
                        **fields, op=problem.op, dtype=problem.dtype,
                        iteration=iteration, speedup=speedup,
                    )  # fmt: skip
                return True
            except IntegrityError:  # another writer created it first: compare with theirs
                current = BoardEntry.objects.select_for_update().get(**fields)
        # The entry's own iteration re-measured (its final verification) takes its new number.
        if speedup <= current.speedup and current.iteration_id != iteration.id:
            return False
        current.iteration, current.speedup = iteration, speedup
        current.save(update_fields=["iteration", "speedup", "updated_at"])
        return True


def board_withdraw(*, iteration: Iteration) -> bool:
    """An iteration lost its rank (its final verification found it slower than a baseline):
    its team's entry, if it was this iteration, falls back to the team's next best there."""
    with transaction.atomic():
        entry = BoardEntry.objects.select_for_update().filter(iteration=iteration).first()
        if entry is None:
            return False
        entry.delete()
        rest = (
            ranked_iterations(jobs=Job.objects.filter(team_id=entry.team_id))
            .filter(task__problem__key=entry.problem_key, evaluation__device__name=entry.device)
            .select_related("task__problem", "job")
            .order_by(F("fastest_speedup").desc(nulls_last=True), "seq")
            .first()
        )
        if rest is not None:
            board_offer(iteration=rest)
    return True


def board_rebuild() -> int:
    """Recompute every entry from the iterations (after deletions, or for old data)."""
    rows = (
        ranked_iterations(jobs=Job.objects.all())
        .filter(fastest_speedup__isnull=False)
        .select_related("task__problem", "job")
        .defer("source", "profile", "params")
        .order_by(F("fastest_speedup").desc(), "seq")
    )
    best: dict[tuple[str, str, int], Iteration] = {}
    for it in rows.iterator(chunk_size=2000):
        key = (it.task.problem.key, str(it.measurement["device"].get("name", "")), it.job.team_id)
        best.setdefault(key, it)
    with transaction.atomic():
        BoardEntry.objects.all().delete()
        BoardEntry.objects.bulk_create(
            [
                BoardEntry(
                    problem_key=key,
                    device=device,
                    team_id=team_id,
                    op=it.task.problem.op,
                    dtype=it.task.problem.dtype,
                    iteration=it,
                    speedup=it.fastest_speedup,
                )  # fmt: skip
                for (key, device, team_id), it in best.items()
            ],
            batch_size=1000,
        )
    return len(best)
