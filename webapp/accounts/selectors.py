"""Reads about teams and who belongs to them."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from webapp.accounts.models import Invitation, Membership, Team


def teams_for_user(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).order_by("name")


def team_members(*, team: Team) -> QuerySet[Membership]:
    return team.memberships.select_related("user").order_by("role", "user__username")


def invitations_open(*, team: Team) -> QuerySet[Invitation]:
    return team.invitations.filter(accepted_at__isnull=True).order_by("-created_at")
