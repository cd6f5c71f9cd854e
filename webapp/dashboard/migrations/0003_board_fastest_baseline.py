"""Issue 27: the leaderboard's headline is the speedup over the fastest baseline
(Iteration.fastest_speedup, jobs 0008), as the package's; rebuild its rows with it, as
services.board_rebuild does."""

from django.db import migrations
from django.db.models import F


def rebuild(apps, schema_editor):
    BoardEntry = apps.get_model("dashboard", "BoardEntry")
    Iteration = apps.get_model("jobs", "Iteration")
    rows = (
        Iteration.objects.filter(ranked=True, fastest_speedup__isnull=False)
        .select_related("task__problem", "job")
        .only("id", "fastest_speedup", "evaluation", "final_evaluation", "task__problem",
              "job__team_id")
        .order_by(F("fastest_speedup").desc(), "seq")
    )  # fmt: skip
    best = {}
    for it in rows.iterator(chunk_size=2000):
        measurement = it.final_evaluation or it.evaluation or {}
        device = str((measurement.get("device") or {}).get("name", ""))
        best.setdefault((it.task.problem.key, device, it.job.team_id), it)
    BoardEntry.objects.all().delete()
    BoardEntry.objects.bulk_create(
        [
            BoardEntry(
                problem_key=key,
                device=device,
                team_id=team_id,
                op=it.task.problem.op,
                dtype=it.task.problem.dtype,
                iteration=it,
                speedup=it.fastest_speedup,
            )
            for (key, device, team_id), it in best.items()
        ],
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0002_board_rebuild_ranked"),
        ("jobs", "0008_iteration_fastest_speedup"),
    ]

    operations = [migrations.RunPython(rebuild, migrations.RunPython.noop)]
