"""Offer each newly recorded kept iteration to the leaderboard.

A receiver rather than a call in webapp.jobs.services, so that jobs/ does not depend on the
dashboard; the row is saved first (the board reads it), in the same transaction.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from webapp.jobs.models import Iteration


@receiver(post_save, sender=Iteration, dispatch_uid="dashboard.board_offer")
def offer_to_board(sender: type, instance: Iteration, created: bool, **kwargs: Any) -> None:
    if created and instance.verdict == Iteration.Verdict.KEPT:
        from webapp.dashboard.services import board_offer

        board_offer(iteration=instance)
