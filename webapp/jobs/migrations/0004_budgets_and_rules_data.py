"""Issue 18, data: every job's budget (Job.gpu_minutes), every result's rule columns
(Iteration.interpreter / implausible / ranked), and the jobs left "awaiting profiler" ended.

Its own migration (its own transaction): PostgreSQL cannot alter a table with pending trigger
events, which these writes leave until commit (0005 drops ModelRun.budget_s afterwards).
"""

from django.conf import settings
from django.db import migrations
from django.utils import timezone

STORED_ONLY = (
    "This file was stored but never profiled: only a .py in the KernelBench convention (or a "
    ".zip of them) can be. Submit the model's source to optimize it."
)


def budgets_and_rules(apps, schema_editor):
    from webapp.jobs.migrations._stored_rules import beat_every_baseline
    from webapp.jobs.selectors import result_facts  # the rule itself, not a copy of it

    Job = apps.get_model("jobs", "Job")
    Iteration = apps.get_model("jobs", "Iteration")
    ModelRun = apps.get_model("jobs", "ModelRun")
    JobBudget = apps.get_model("api", "JobBudget")

    Job.objects.update(gpu_minutes=settings.KF_JOB_DEFAULT_GPU_MINUTES)
    for run in ModelRun.objects.all():
        minutes = max(1, round(run.budget_s / 60))
        Job.objects.filter(id=run.job_id).update(gpu_minutes=minutes)
    for budget in JobBudget.objects.all():
        Job.objects.filter(id=budget.job_id).update(gpu_minutes=budget.gpu_minutes)

    changed = []
    rows = Iteration.objects.only("id", "verdict", "speedup", "source", "evaluation")
    for it in rows.iterator(chunk_size=1000):
        facts = result_facts(
            verdict=it.verdict,
            speedup=it.speedup,
            source=it.source,
            evaluation=it.evaluation,
            beats_baselines=beat_every_baseline(it.evaluation),  # the call made then
        )
        if facts.interpreter or facts.implausible or facts.ranked:
            it.interpreter, it.implausible, it.ranked = (
                facts.interpreter,
                facts.implausible,
                facts.ranked,
            )
            changed.append(it)
        if len(changed) >= 1000:
            Iteration.objects.bulk_update(changed, ["interpreter", "implausible", "ranked"])
            changed = []
    Iteration.objects.bulk_update(changed, ["interpreter", "implausible", "ranked"])

    for job in Job.objects.filter(status="awaiting_profiler"):
        ModelRun.objects.update_or_create(
            job=job, defaults={"status": "failed", "queue": "", "budget_s": 0.0, "message": STORED_ONLY}
        )
        Job.objects.filter(id=job.id).update(status="failed", finished_at=timezone.now())


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0003_modelrun_budget_rules"),
        ("api", "0001_initial"),
    ]

    operations = [migrations.RunPython(budgets_and_rules, migrations.RunPython.noop)]
