"""Offer each newly recorded kept iteration to the leaderboard.

A receiver rather than a call in webapp.jobs.services, so that jobs/ does not depend on the
dashboard; the row is saved first (the board reads it), in the same transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from webapp.jobs.models import Iteration

log = logging.getLogger(__name__)


@receiver(post_save, sender=Iteration, dispatch_uid="dashboard.board_offer")
def offer_to_board(
    sender: type, instance: Iteration, created: bool, update_fields: Any = None, **kwargs: Any
) -> None:
    """A new ranked iteration is offered; one whose rank changed (its final verification) is
    offered or withdrawn."""
    rank_changed = update_fields is not None and "ranked" in update_fields
    if not (created or rank_changed):
        return
    from webapp.dashboard.services import board_offer, board_withdraw

    # The board is derived data (board_rebuild restores it): it must never cost the worker
    # its iteration. These run in a savepoint, so a failure there rolls back alone.
    try:
        if instance.ranked:
            board_offer(iteration=instance)
        elif rank_changed:
            board_withdraw(iteration=instance)
    except Exception:
        log.exception("leaderboard update failed for iteration %s", instance.pk)
