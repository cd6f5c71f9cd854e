"""A job as a new user without a GPU gets it: run on the `cpu` queue, timed in Triton's
interpreter, recorded through the worker's services.

The numbers (µs, ratios, noise, seconds) are those of a real `manage.py up` run of the same
shapes on a 2-core CPU machine (2026-11-24); sources are real renders of the families.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kernels
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.tests.support import shape_job

MATMUL = ("matmul", "256x256x256", "fp16", "NN")
RMSNORM = ("rmsnorm", "64x1024", "fp32", "")
WORDS = "no profile and no roofline numbers: explore the family's space where the surrogate is least sure."

# (verdict, family, changed params, candidate µs, torch µs, noise, reason)
STEPS: dict[tuple[str, ...], list[tuple]] = {
    MATMUL: [
        ("baseline", "matmul_tiled", {}, 167853.0, 10591.1, 0.023,
         "starting point: 0.0631x vs torch (CPU interpreter)"),
        ("reverted", "matmul_tiled", {"BLOCK_M": 32, "GROUP": 1}, 320216.7, 10735.8, 0.015,
         "0.0335x vs best 0.0631x: -46.9%, not above noise 2.3% (CPU interpreter)"),
        ("kept", "matmul_persistent_tma", {}, 27301.4, 10591.0, 0.067,
         "0.388x beats best 0.0631x by +514.8% (> noise 6.7%) (CPU interpreter)"),
    ],
    RMSNORM: [
        ("baseline", "rmsnorm_rowwise", {}, 12984975.0, 34524.6, 1.027,
         "starting point: 0.00266x vs torch (CPU interpreter)"),
        ("kept", "rmsnorm_rowwise", {"ROWS": 4}, 480697.8, 34524.6, 0.960,
         "0.0718x beats best 0.00266x by +2601.3% (> noise 1027.4%) (CPU interpreter)"),
    ],
}  # fmt: skip


@dataclass(frozen=True)
class CpuRun:
    job: Job
    ended_empty: Job  # cancelled before the worker reported anything
    waiting: Job  # queued: nothing reported yet


def interpreter_evaluation(candidate_us: float, torch_us: float, noise: float) -> dict[str, Any]:
    """An Evaluation.to_dict() of the CPU interpreter (webapp may not import harness/)."""

    def stats(us: float) -> dict[str, float]:
        return {"median_us": us, "iqr_us": us * noise / 2, "min_us": us * 0.97, "samples": 5}

    ratio = torch_us / candidate_us
    return {
        "verdict": "passed",
        "compile": {"ok": True, "log": "", "seconds": 0.004},
        "stages": [
            {"name": n, "passed": True, "worst_error": 0.1, "cases": c, "detail": ""}
            for n, c in (("smoke", 1), ("shape_sweep", 2), ("adversarial", 2), ("determinism", 1))
        ],
        "findings": [],
        "timings": {
            "regime": "interpreter",
            "protocol": "kf-timing-v1",
            "candidate": stats(candidate_us),
            "baselines": {"torch": stats(torch_us)},
            "speedups": {"torch": ratio},
            "speedup_ci": {"torch": [ratio * 0.98, ratio * 1.02]},
            "noise": noise,
        },
        "tflops": 0.0002,
        "gbps": 0.0023,
        "device": {
            "name": "cpu (triton interpreter)",
            "kind": "interpreter",
            "torch": "2.13.0+cpu",
            "triton": "3.6.0",
        },  # fmt: skip
        "stdout_tail": "",
    }


def seed_cpu_run(*, user: Any, team: Any) -> CpuRun:
    shapes = [MATMUL, RMSNORM]
    job = shape_job(
        user,
        team,
        [kernels.parse_problem(*s) for s in shapes],
        title="CPU run (interpreter)",
        queue="cpu",
    )
    for task, shape in zip(job.tasks.order_by("id"), shapes, strict=True):
        claim = services.task_claim(task_id=task.id, worker="cpu@up")
        assert claim is not None
        problem = kernels.parse_problem(*shape)
        families = {f.name: f for f in kernels.get_op(problem.op).families()}
        best = None
        for index, (verdict, name, change, us, torch_us, noise, reason) in enumerate(STEPS[shape]):
            family = families[name]
            defaults = family.default(problem)
            params = {**defaults, **change}
            ratio = torch_us / us
            if verdict in ("baseline", "kept"):
                best = ratio
            why = (
                f"baseline: {name} at its default point"
                if index == 0
                else f"{WORDS} {name}: "
                + ", ".join(f"{k} {defaults[k]}->{v}" for k, v in change.items())
                if change
                else f"{WORDS} {name} at its default point (not tried yet)"
            )
            services.iteration_record(
                task_id=claim.task_id,
                attempt=claim.attempt,
                data=services.IterationData(
                    index=index,
                    verdict=verdict,
                    parent=None if index == 0 else 0,
                    hypothesis=why,
                    source=family.render(problem, params),
                    candidate_id=f"{name}-{index}",
                    reason=reason,
                    family=name,
                    params=params,
                    evaluation=interpreter_evaluation(us, torch_us, noise),
                    speedup=ratio,
                    best_speedup=best,
                    elapsed_s=7.0 * (index + 1),
                    gpu_s=7.0,
                ),
            )
        assert services.task_finish(
            task_id=claim.task_id, attempt=claim.attempt, stop_reason="plateau"
        )
    one = [kernels.parse_problem(*MATMUL)]
    ended = shape_job(user, team, one, title="Cancelled before a result", queue="cpu")
    services.job_cancel(job=ended, user=user)
    waiting = shape_job(user, team, one, title="Waiting for a worker", queue="cpu")
    return CpuRun(
        job=Job.objects.get(id=job.id),
        ended_empty=Job.objects.get(id=ended.id),
        waiting=waiting,
    )
