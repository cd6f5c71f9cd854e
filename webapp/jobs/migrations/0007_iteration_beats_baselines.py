"""Iteration.beats_baselines: the harness's call (harness/judge/wins.py) on the result's measurement,
passed by the worker, so the web app ranks by it instead of recomputing it. Rows recorded before
get the call the web app made for them then (the same rule, frozen in _stored_rules.py), so no
row's rank changes.
"""

from django.db import migrations, models


def fill(apps, schema_editor):
    from webapp.jobs.migrations._stored_rules import beat_every_baseline

    Iteration = apps.get_model("jobs", "Iteration")
    changed = []
    rows = Iteration.objects.only("id", "evaluation", "final_evaluation")
    for it in rows.iterator(chunk_size=1000):
        if beat_every_baseline(it.final_evaluation or it.evaluation):
            it.beats_baselines = True
            changed.append(it)
        if len(changed) >= 1000:
            Iteration.objects.bulk_update(changed, ["beats_baselines"])
            changed = []
    Iteration.objects.bulk_update(changed, ["beats_baselines"])


class Migration(migrations.Migration):
    dependencies = [("jobs", "0006_task_search")]

    operations = [
        migrations.AddField(
            model_name="iteration",
            name="beats_baselines",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
