"""Writes about teams: create one, invite people, accept an invitation."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from webapp.accounts.models import Invitation, Membership, Team

INVITATION_LIFETIME = timedelta(days=7)


@transaction.atomic
def team_create(*, user: AbstractBaseUser, name: str) -> Team:
    name = name.strip()
    if not name:
        raise ValidationError("A team needs a name.")
    base = slugify(name)[:80] or "team"
    slug, n = base, 1
    while Team.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    team = Team.objects.create(name=name, slug=slug)
    Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    return team


def invitation_create(*, team: Team, by: AbstractBaseUser) -> Invitation:
    if not Membership.objects.filter(team=team, user=by, role=Membership.Role.OWNER).exists():
        raise PermissionDenied("Only a team owner can invite people.")
    return Invitation.objects.create(
        team=team,
        token=secrets.token_urlsafe(32),
        created_by=by,
        expires_at=timezone.now() + INVITATION_LIFETIME,
    )


@transaction.atomic
def invitation_accept(*, token: str, user: AbstractBaseUser) -> Membership:
    """Join the invitation's team as a member; each invitation works once (compare-and-set)."""
    invitation = Invitation.objects.filter(token=token).select_related("team").first()
    if invitation is None:
        raise ValidationError("This invitation link is not valid.")
    existing = Membership.objects.filter(team=invitation.team, user=user).first()
    if existing is not None:
        return existing
    if invitation.expires_at < timezone.now():
        raise ValidationError("This invitation has expired; ask the team owner for a new one.")
    claimed = Invitation.objects.filter(id=invitation.id, accepted_at__isnull=True).update(
        accepted_at=timezone.now(), accepted_by=user
    )
    if claimed != 1:
        raise ValidationError("This invitation has already been used.")
    return Membership.objects.create(team=invitation.team, user=user, role=Membership.Role.MEMBER)
