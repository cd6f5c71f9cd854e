"""Celery tasks of a model job: profile + plan it, then (after its tasks) verify end to end.

Interfaces only: take the job id, call services, run the harness (which sandboxes the model).
This process never imports the model's code and never initialises CUDA.
"""

from __future__ import annotations

import logging

from workers.celery import app

log = logging.getLogger(__name__)


@app.task(name="workers.profile_model_job", acks_late=True)
def profile_model_job(job_id: str) -> str:
    from agents import fit
    from agents.amdahl import make_plan
    from harness.model import profile_model
    from webapp.jobs import model_services as services

    source = services.model_profile_claim(job_id=job_id)
    if source is None:
        log.info("model job %s is not waiting to be profiled; skipping", job_id)
        return "skipped"
    try:
        profile = profile_model(source)
        if not profile.ok:
            services.model_fail(job_id=job_id, message=profile.message, profile=profile.to_dict())
            return "failed"
        # The compiled model's groups where it compiles, Linear time moved to fusions.
        # Each funded problem gets at least a full screen round and one verification.
        plan = make_plan(
            profile.plan_groups(),
            budget_s=services.model_budget(job_id=job_id),
            least=fit.for_plan(gpu=profile.device == "cuda"),
        )
        services.model_profile_record(job_id=job_id, profile=profile.to_dict(), plan=plan.to_dict())
    except Exception as exc:
        services.model_fail(job_id=job_id, message=f"Profiling failed on our side: {exc!r}")
        raise
    return "planned"


@app.task(name="workers.verify_model_job", acks_late=True)
def verify_model_job(job_id: str) -> str:
    from agents.amdahl import Plan, PlanItem, predicted_from_measured
    from harness.model import Winner, verify_model
    from webapp.jobs import model_services as services
    from webapp.jobs import selectors
    from webapp.jobs.models import Job

    run = selectors.model_run_for_job(job_id=job_id)
    if run is None or run.status != run.Status.VERIFYING:
        return "skipped"
    try:
        # Per problem, its kernel verified faster on a GPU (jobs.selectors.job_winners); a
        # download ships them only if this check finds the model faster than its best baseline.
        winners = {w.task.problem.key: w.iteration for w in selectors.job_winners(job_id=job_id)}
        job = Job.objects.get(id=job_id)
        with job.model_file.open("rb") as f:
            source = f.read().decode("utf-8", errors="replace")
        result = verify_model(source, [Winner(key, it.source) for key, it in winners.items()])
        items = [
            PlanItem(**{**i, "ceiling": i["ceiling"] or float("inf")}) for i in run.plan["items"]
        ]
        plan = Plan(items, run.plan["budget_s"], run.plan["not_optimizable_share"])
        measured = {key: it.speedup for key, it in winners.items()}
        data = result.to_dict() | {
            "winners": [{"key": key, "kernel_speedup": s} for key, s in measured.items()],
            "predicted": predicted_from_measured(plan, measured),
        }
        if result.message:
            data["message"] = result.message  # no winner, no match, or nothing beats the best
        services.model_verify_record(job_id=job_id, result=data)
    except Exception as exc:
        services.model_fail(job_id=job_id, message=f"End-to-end verification failed: {exc!r}")
        raise
    return "verified"
