"""Who the token belongs to and which teams it may act for (with their quota usage)."""

from __future__ import annotations

from dataclasses import asdict

from django.http import HttpRequest
from ninja import Router

from webapp.api import selectors
from webapp.api.routes.common import ERRORS, principal
from webapp.api.schemas import MeOut, TeamOut
from webapp.jobs import quotas

router = Router(tags=["account"])


def _teams(request: HttpRequest) -> list[dict]:
    teams = selectors.teams_for_principal(principal=principal(request))
    out = []
    for team in teams:
        usage = quotas.team_usage(team_id=team.id)
        out.append(
            {
                "slug": team.slug,
                "name": team.name,
                "usage": {**asdict(usage), "gpu_minutes_available": usage.gpu_minutes_available},
            }
        )
    return out


@router.get("/me", response={200: MeOut, **ERRORS}, summary="The token's user, token and teams")
def me(request: HttpRequest) -> dict:
    who = principal(request)
    return {"username": who.user.get_username(), "token": who.token, "teams": _teams(request)}


@router.get("/teams", response={200: list[TeamOut], **ERRORS}, summary="Teams this token may use")
def teams(request: HttpRequest) -> list[dict]:
    return _teams(request)
