"""The leaderboard, kept as rows: each team's best verified kernel per problem and GPU.

Ranking straight from the iterations means a window over every kept row (100,000s) per page
view; this table holds one row per (problem, GPU, team) instead, updated as iterations are
recorded (services.board_offer) and rebuildable from them (services.board_rebuild).
"""

from __future__ import annotations

from django.db import models

from webapp.accounts.models import Team
from webapp.jobs.models import Iteration


class BoardEntry(models.Model):
    problem_key = models.CharField(max_length=200)
    op = models.CharField(max_length=40)
    dtype = models.CharField(max_length=10)
    device = models.CharField(max_length=200)  # the GPU's name, from the evaluation
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="board_entries")
    iteration = models.ForeignKey(Iteration, on_delete=models.CASCADE, related_name="+")
    speedup = models.FloatField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["problem_key", "device", "team"], name="board_entry_unique"
            )
        ]
        indexes = [models.Index(fields=["problem_key", "device"], name="board_group")]

    def __str__(self) -> str:
        return f"{self.problem_key} on {self.device}: {self.team_id} {self.speedup:.2f}x"
