"""Issue 18: the leaderboard ranks only verified wins on a GPU (Iteration.ranked, jobs 0003);
rebuild its rows from them, as services.board_rebuild does."""

from django.db import migrations


def rebuild(apps, schema_editor):
    BoardEntry = apps.get_model("dashboard", "BoardEntry")
    Iteration = apps.get_model("jobs", "Iteration")
    rows = (
        Iteration.objects.filter(ranked=True)
        .select_related("task__problem", "job")
        .only("id", "speedup", "evaluation", "task__problem", "job__team_id")
        .order_by("-speedup", "seq")
    )
    best = {}
    for it in rows.iterator(chunk_size=2000):
        device = str(((it.evaluation or {}).get("device") or {}).get("name", ""))
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
                speedup=it.speedup,
            )
            for (key, device, team_id), it in best.items()
        ],
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0001_initial"),
        ("jobs", "0004_budgets_and_rules_data"),
    ]

    operations = [migrations.RunPython(rebuild, migrations.RunPython.noop)]
