"""What the job page says about each task (webapp/jobs/status.py): its note in words, its
search per family (screened vs verified, each against what it was timed with) and one outcome
line by the one winner rule (issue 27, item 2)."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

import kernels
from webapp.jobs import services
from webapp.jobs.status import job_status_event, task_note
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db

# The search record of a real CPU run (matmul 256x256x256, 2026-11-27): the screen's ratios
# and the verified ones are different measurements; the page must never read them as one.
SEARCH = {
    "screened": 624,
    "fully_verified": 2,
    "tiers": {"screen": {"candidates": 624, "per_gpu_hour": 28416.0}},
    "families": {
        "matmul_persistent_tma": {"screened": 104, "passed": 104, "best_speedup": 4.192},
        "matmul_tiled": {"screened": 109, "passed": 109, "best_speedup": 0.024},
        "matmul_cutlass_sm90": {
            "screened": 8,
            "passed": 0,
            "best_speedup": None,
            "why_not": "8x timeout: compile did not finish in time (/srv/kf/var/cache/x.cu)",
        },
    },
    "outcome": "baseline",
    "outcome_reason": "the best verified candidate (#1 matmul_persistent_tma) reaches 0.180x "
    "torch, 0.180x torch (lower bound 0.010): not beyond noise: nothing beat the fastest "
    "baseline, PyTorch is kept",
}


def measured(speedups: dict[str, float], *, kind: str = "cuda", regime: str = "offline"):
    device = "NVIDIA H100 80GB HBM3" if kind == "cuda" else "cpu (triton interpreter)"
    return {
        "verdict": "passed",
        "timings": {"regime": regime, "speedups": speedups},
        "device": {"name": device, "kind": kind},
    }


def record(claim, index: int, verdict: str, family: str, evaluation: dict[str, Any], *,
           beats: bool = False) -> None:  # fmt: skip
    data = services.IterationData(
        index=index, verdict=verdict, family=family, source="def run(*a, out): pass\n",
        speedup=evaluation["timings"]["speedups"]["torch"], evaluation=evaluation,
        beats_baselines=beats,
    )  # fmt: skip
    assert services.iteration_record(task_id=claim.task_id, attempt=claim.attempt, data=data)


def run(alice, team, *, queue: str, steps, search=SEARCH, stop_reason="gpu_time"):
    job = shape_job(alice, team, [kernels.parse_problem("matmul", "256x256x256", "fp16", "NN")],
                    queue=queue)  # fmt: skip
    task = job.tasks.get()
    claim = services.task_claim(task_id=task.id, worker="w")
    for index, (verdict, family, evaluation, beats) in enumerate(steps):
        record(claim, index, verdict, family, evaluation, beats=beats)
    services.task_search_record(task_id=task.id, attempt=claim.attempt, search=search)
    services.task_finish(task_id=task.id, attempt=claim.attempt, stop_reason=stop_reason)
    return job, job_status_event(job_id=job.id)["tasks"][0]


def test_a_cpu_run_says_cpu_time_and_marks_every_speed_as_interpreter(alice, team, client):
    interp = {"kind": "interpreter", "regime": "interpreter"}
    job, task = run(alice, team, queue="cpu", steps=[
        ("kept", "matmul_persistent_tma", measured({"torch": 0.18}, **interp), False),
        ("reverted", "matmul_tiled", measured({"torch": 0.0004}, **interp), False),
    ])  # fmt: skip
    assert task["note"] == "CPU time budget spent"
    search = task["search"]
    assert search["interpreter"] is True and (search["screened"], search["verified"]) == (624, 2)
    rows = {f["family"]: f for f in search["families"]}
    assert rows["matmul_persistent_tma"]["best_screened"] == 4.192
    assert rows["matmul_persistent_tma"]["best_verified"] == 0.18
    assert rows["matmul_tiled"]["verified_baseline"] == "torch"
    assert search["outcome"].startswith("No winner (timed only in Triton's CPU interpreter")
    assert search["outcome"].endswith("PyTorch serves this problem")

    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "CPU time budget spent" in page and "gpu_time" not in page
    assert "/GPU-h" not in page and "not beyond noise" not in page
    assert "4.19" not in page and "0.18" not in page  # interpreter ratios are no speedups
    assert "3 families: 624 screened, 2 fully verified" in page
    # A family the screen dropped says why, without the worker's paths.
    assert rows["matmul_cutlass_sm90"]["why_not"].startswith("8x timeout: compile did not")
    assert "8x timeout: compile did not finish in time" in page and "/srv/kf" not in page


def test_a_gpu_run_names_the_baseline_of_each_number_and_the_winner(alice, team):
    _, task = run(alice, team, queue="gpu.h100", steps=[
        ("baseline", "matmul_tiled", measured({"torch": 0.9, "compile": 0.8}), False),
        ("kept", "matmul_persistent_tma", measured({"torch": 1.77, "compile": 1.14}), True),
        ("reverted", "matmul_tiled", measured({"torch": 1.2, "compile": 0.95}), False),
    ])  # fmt: skip
    assert task["note"] == "GPU time budget spent"
    rows = {f["family"]: f for f in task["search"]["families"]}
    # Each family's best verified speedup is over its fastest baseline, named.
    assert (rows["matmul_persistent_tma"]["best_verified"], rows["matmul_persistent_tma"]
            ["verified_baseline"]) == (1.14, "compile")  # fmt: skip
    assert (rows["matmul_tiled"]["best_verified"], rows["matmul_tiled"]["verified_baseline"]) == (
        0.95, "compile")  # fmt: skip
    assert task["search"]["outcome"] == (
        "Winner: matmul_persistent_tma #1, 1.14× over compile (the fastest baseline), verified "
        "on NVIDIA H100 80GB HBM3"
    )


def test_a_slower_best_is_called_slower(alice, team):
    _, task = run(alice, team, queue="gpu.h100", stop_reason="plateau", steps=[
        ("baseline", "matmul_tiled", measured({"torch": 0.18}), False),
    ])  # fmt: skip
    assert task["note"] == "stopped: no new best for several rounds"
    assert "0.18x vs torch on NVIDIA H100 80GB HBM3 (offline timing): slower than torch" in (
        task["search"]["outcome"])  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "error", "queue", "note"),
    [
        ("gpu_time", "", "gpu.h100", "GPU time budget spent"),
        ("gpu_time", "", "cpu", "CPU time budget spent"),
        ("cancelled", "", "cpu", "cancelled"),
        ("worker lost", "", "cpu", "worker lost"),
        ("failed", "Traceback...\n  File x\nValueError: bad", "cpu", "ValueError: bad"),
    ],
)
def test_a_tasks_note_is_words_not_a_code(reason, error, queue, note):
    assert task_note(stop_reason=reason, error=error, queue=queue) == note
