"""Issue 18: model jobs join the jobs app; every job carries its budget; results carry the rules.

This migration adds the columns, 0004 fills them, 0005 drops what they replace.

- ModelRun moves from the former webapp.modeljobs app into this one. Its table keeps its name
  (modeljobs_modelrun): an existing database has it already, a fresh one gets it here.
- Job.gpu_minutes: the budget a job was submitted with.
- Iteration.interpreter / implausible / ranked: the domain rules, written with each result;
  Iteration.final_evaluation: the full-protocol re-evaluation of a task's best, which they read.
"""

import django.db.models.deletion
from django.db import migrations, models


def create_modelrun_table_if_missing(apps, schema_editor):
    ModelRun = apps.get_model("jobs", "ModelRun")
    if ModelRun._meta.db_table not in schema_editor.connection.introspection.table_names():
        schema_editor.create_model(ModelRun)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0002_task_enqueued_at"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ModelRun",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("queued", "Waiting to be profiled"),
                                    ("profiling", "Profiling"),
                                    ("optimizing", "Optimizing planned problems"),
                                    ("verifying", "Verifying end to end"),
                                    ("done", "Done"),
                                    ("failed", "Failed"),
                                ],
                                default="queued",
                                max_length=12,
                            ),
                        ),
                        ("queue", models.CharField(max_length=40)),
                        ("budget_s", models.FloatField()),
                        ("example", models.CharField(blank=True, max_length=60)),
                        ("profile", models.JSONField(blank=True, null=True)),
                        ("plan", models.JSONField(blank=True, null=True)),
                        ("end_to_end", models.JSONField(blank=True, null=True)),
                        ("message", models.TextField(blank=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "job",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE, related_name="model_run", to="jobs.job"
                            ),
                        ),
                    ],
                    options={"db_table": "modeljobs_modelrun"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(create_modelrun_table_if_missing, migrations.RunPython.noop),
        migrations.AddField(
            model_name="job",
            name="gpu_minutes",
            field=models.PositiveIntegerField(default=30),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="iteration",
            name="final_evaluation",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="iteration",
            name="interpreter",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="iteration",
            name="implausible",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="iteration",
            name="ranked",
            field=models.BooleanField(default=False),
        ),
    ]
