import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("jobs", "0001_initial"),
    ]

    operations = [
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
        ),
    ]
