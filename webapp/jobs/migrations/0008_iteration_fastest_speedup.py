"""Iteration.fastest_speedup: the speedup over the fastest baseline a result was timed against,
the one headline (issue 27: the leaderboard said 1.77x over eager where the package said 1.14x
over torch.compile). Rows recorded before get it from their stored measurement."""

import math

from django.db import migrations, models


def fastest(evaluation):
    speedups = ((evaluation or {}).get("timings") or {}).get("speedups") or {}
    timed = [
        float(s)
        for s in speedups.values()
        if isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
    ]
    return min(timed) if timed else None


def fill(apps, schema_editor):
    Iteration = apps.get_model("jobs", "Iteration")
    changed = []
    rows = Iteration.objects.only("id", "evaluation", "final_evaluation")
    for it in rows.iterator(chunk_size=1000):
        it.fastest_speedup = fastest(it.final_evaluation or it.evaluation)
        if it.fastest_speedup is not None:
            changed.append(it)
        if len(changed) >= 1000:
            Iteration.objects.bulk_update(changed, ["fastest_speedup"])
            changed = []
    Iteration.objects.bulk_update(changed, ["fastest_speedup"])


class Migration(migrations.Migration):
    dependencies = [("jobs", "0007_iteration_beats_baselines")]

    operations = [
        migrations.AddField(
            model_name="iteration",
            name="fastest_speedup",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
