"""Sign-up, teams and invitations: who ends up a member, and who cannot."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils import timezone

from webapp.accounts import services
from webapp.accounts.models import Invitation, Membership

pytestmark = pytest.mark.django_db


def test_it_makes_the_creator_the_owner_of_a_new_team(alice):
    team = services.team_create(user=alice, name="Kernels R Us")
    assert Membership.objects.get(team=team, user=alice).role == Membership.Role.OWNER
    again = services.team_create(user=alice, name="Kernels R Us")
    assert again.slug != team.slug


def test_it_lets_an_invited_person_join_once(alice, bob, make_user, team):
    invitation = services.invitation_create(team=team, by=alice)
    membership = services.invitation_accept(token=invitation.token, user=bob)
    assert membership.role == Membership.Role.MEMBER
    with pytest.raises(ValidationError, match="already been used"):
        services.invitation_accept(token=invitation.token, user=make_user("carol"))


def test_it_lets_only_owners_invite(alice, bob, team):
    services.invitation_accept(
        token=services.invitation_create(team=team, by=alice).token, user=bob
    )
    with pytest.raises(PermissionDenied):
        services.invitation_create(team=team, by=bob)


def test_it_refuses_an_expired_or_unknown_invitation(alice, bob, team):
    invitation = services.invitation_create(team=team, by=alice)
    Invitation.objects.filter(id=invitation.id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    with pytest.raises(ValidationError, match="expired"):
        services.invitation_accept(token=invitation.token, user=bob)
    with pytest.raises(ValidationError, match="not valid"):
        services.invitation_accept(token="nope", user=bob)
    assert not Membership.objects.filter(user=bob).exists()


def test_it_signs_a_person_up_and_logs_them_in(client):
    response = client.post(
        reverse("accounts:signup"),
        {
            "username": "dana",
            "password1": "a-long-passphrase-42",
            "password2": "a-long-passphrase-42",
        },
    )
    assert response.status_code == 302
    assert client.get(reverse("accounts:teams")).context["user"].username == "dana"


def test_it_walks_through_invite_and_accept_in_the_browser_flow(client, alice, bob, team):
    client.force_login(alice)
    client.post(reverse("accounts:invite", args=[team.slug]))
    token = Invitation.objects.get(team=team).token
    assert token in client.get(reverse("accounts:team", args=[team.slug])).content.decode()
    client.force_login(bob)
    assert client.get(reverse("accounts:team", args=[team.slug])).status_code == 404
    client.post(reverse("accounts:invitation", args=[token]))
    assert client.get(reverse("accounts:team", args=[team.slug])).status_code == 200
    # A member sees the team but not the owner's invitation links.
    assert client.post(reverse("accounts:invite", args=[team.slug])).status_code == 302
    assert Invitation.objects.filter(team=team).count() == 1
