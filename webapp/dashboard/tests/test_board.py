"""The leaderboard rows: kept current as iterations are recorded, equal to a rebuild from them."""

from __future__ import annotations

import pytest

from webapp.api.tests.conftest import FakeWorker
from webapp.dashboard.models import BoardEntry
from webapp.dashboard.services import board_rebuild
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db


def entries() -> set[tuple]:
    return set(
        BoardEntry.objects.values_list(
            "problem_key", "device", "team__slug", "speedup", "iteration_id"
        )
    )


def test_each_team_keeps_its_best_per_problem_and_gpu_and_a_rebuild_agrees(runs):
    recorded = entries()
    assert len(recorded) == 4  # 2 problems x 2 teams, one GPU
    assert board_rebuild() == 4
    assert entries() == recorded


def test_it_ignores_slower_interpreter_and_implausible_results(
    alice, team, django_capture_on_commit_callbacks
):
    import kernels

    with django_capture_on_commit_callbacks(execute=False):
        job = shape_job(
            user=alice, team=team, title="t", queue="gpu.h100",
            problems=[kernels.parse_problem("sum", "64x64", "fp32")],
        )  # fmt: skip
    worker = FakeWorker(job.tasks.get().id)
    worker.iterate(verdict="kept", speedup=1.5)
    worker.iterate(verdict="kept", speedup=1.2)  # slower: the 1.5 stays
    worker.iterate(verdict="kept", speedup=4.0, kind="interpreter", regime="interpreter")
    worker.iterate(verdict="kept", speedup=80.0, implausible=True)
    worker.iterate(verdict="reverted", speedup=9.0)
    worker.iterate(verdict="kept", speedup=1.5, device="NVIDIA H200")  # another GPU: own row
    assert sorted((d, s) for _, d, _, s, _ in entries()) == [
        ("NVIDIA H100 80GB HBM3", 1.5),
        ("NVIDIA H200", 1.5),
    ]
    worker.iterate(verdict="kept", speedup=1.8)
    assert ("NVIDIA H100 80GB HBM3", 1.8) in {(d, s) for _, d, _, s, _ in entries()}
    before = entries()
    board_rebuild()
    assert entries() == before
