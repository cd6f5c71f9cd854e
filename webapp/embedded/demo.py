"""The demo account `up` prints: a user with a team, ready to submit a job."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import User
from django.db import transaction

from webapp.accounts.models import Membership, Team

DEMO_USERNAME = "demo"
DEMO_TEAM = "Demo team"


@dataclass(frozen=True)
class DemoAccount:
    username: str
    password: str
    team: str
    team_slug: str  # what `kforge submit --team` and the API take


def demo_password(var_dir: Path) -> str:
    """KF_DEMO_PASSWORD, else one generated on the first `up` and kept in var/demo_password."""
    if os.environ.get("KF_DEMO_PASSWORD"):
        return os.environ["KF_DEMO_PASSWORD"]
    path = var_dir / "demo_password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(9))
        path.chmod(0o600)
    return path.read_text().strip()


@transaction.atomic
def demo_account_ensure(*, password: str) -> DemoAccount:
    user, _ = User.objects.get_or_create(username=DEMO_USERNAME)
    # Set the password only when it changed: set_password hashes with a new salt, and a session
    # is bound to the password hash, so re-hashing on every start logged every open tab out
    # (and the job page's websocket was refused).
    if not user.check_password(password):
        user.set_password(password)
        user.save()
    team, _ = Team.objects.get_or_create(slug="demo-team", defaults={"name": DEMO_TEAM})
    Membership.objects.get_or_create(team=team, user=user, defaults={"role": Membership.Role.OWNER})
    return DemoAccount(
        username=user.username, password=password, team=team.name, team_slug=team.slug
    )
