"""Issue 18: ModelRun.budget_s is gone (the job's gpu_minutes is the budget, copied by 0004),
and no job waits for a profiler any more (0004 ended those)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0004_budgets_and_rules_data"),
    ]

    operations = [
        migrations.RemoveField(model_name="modelrun", name="budget_s"),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("done", "Done"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=20,
            ),
        ),
    ]
