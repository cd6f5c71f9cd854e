"""Issue 18: a job's budget is Job.gpu_minutes now (jobs 0004 copied it there); what stays here
is which token submitted the job."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_initial"),
        ("jobs", "0004_budgets_and_rules_data"),
    ]

    operations = [
        migrations.RemoveField(model_name="jobbudget", name="gpu_minutes"),
        migrations.RenameModel(old_name="JobBudget", new_name="JobSubmission"),
        migrations.AlterField(
            model_name="jobsubmission",
            name="job",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.CASCADE,
                primary_key=True,
                related_name="api_submission",
                serialize=False,
                to="jobs.job",
            ),
        ),
    ]
