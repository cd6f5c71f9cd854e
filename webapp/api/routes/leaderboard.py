"""Leaderboards over the token's teams: per problem and GPU, best verified speedups first."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from django.http import HttpRequest
from ninja import Query, Router

from webapp.api import selectors
from webapp.api.routes.common import ERRORS, principal
from webapp.api.schemas import LeaderboardOut, Text

router = Router(tags=["leaderboards"])


@router.get("/leaderboard", response={200: LeaderboardOut, **ERRORS}, summary="Leaderboards")
def leaderboard(
    request: HttpRequest,
    op: Annotated[Text | None, Query(max_length=40)] = None,
    dtype: Annotated[Text | None, Query(max_length=10)] = None,
    device: Annotated[Text | None, Query(max_length=200, description="GPU name")] = None,
    team: Annotated[Text | None, Query(max_length=90, description="A team's slug")] = None,
    per_group: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict:
    """Kept, timed iterations grouped by problem key and GPU; one entry per job (its best).

    Results timed in the Triton interpreter (CPU) and results flagged implausible are never
    ranked.
    """
    jobs = selectors.jobs_for_principal(principal=principal(request))
    if team:
        jobs = jobs.filter(team__slug=team)
    groups = selectors.leaderboard(
        jobs=jobs, op=op, dtype=dtype, device=device, per_group=per_group
    )
    return {"groups": [asdict(g) for g in groups]}
