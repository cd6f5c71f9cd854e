"""Tokens: stored hashed, shown once, revocable, scoped to the user's teams."""

import hashlib

import pytest
from django.urls import reverse

from webapp.api import services
from webapp.api.models import ApiToken
from webapp.api.tests.conftest import client_for

pytestmark = pytest.mark.django_db


def test_it_stores_only_a_hash_and_a_lookup_prefix(alice, team):
    token, raw = services.token_create(user=alice, name="ci")
    row = ApiToken.objects.get(id=token.id)
    assert raw.startswith(row.prefix + "_") and raw not in str(row.__dict__)
    assert row.digest == hashlib.sha256(raw.encode()).hexdigest()


def test_it_accepts_a_token_and_records_when_it_was_last_used(alice, team):
    token, raw = services.token_create(user=alice, name="ci")
    response = client_for(raw).get("/api/v1/me")
    assert response.status_code == 200, response.content
    assert response.json()["username"] == "alice"
    assert [t["slug"] for t in response.json()["teams"]] == ["alices-team"]
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer nonsense", "Basic YWxpY2U6cHc=", "Bearer kf_0123456789_" + "x" * 43],
)
def test_it_refuses_missing_or_unknown_tokens_with_a_stable_code(client, header):
    headers = {"Authorization": header} if header else {}
    response = client.get("/api/v1/jobs", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_it_refuses_a_token_that_differs_from_a_real_one_after_the_prefix(alice, team):
    _, raw = services.token_create(user=alice, name="ci")
    forged = raw[:-4] + ("AAAA" if not raw.endswith("AAAA") else "BBBB")
    assert client_for(forged).get("/api/v1/me").status_code == 401


def test_it_refuses_a_revoked_token_at_once(alice, team):
    token, raw = services.token_create(user=alice, name="ci")
    api = client_for(raw)
    assert api.get("/api/v1/me").status_code == 200
    assert services.token_revoke(user=alice, token_id=token.id)
    response = api.get("/api/v1/me")
    assert response.status_code == 401 and response.json()["error"]["code"] == "token_revoked"
    assert not services.token_revoke(user=alice, token_id=token.id), "revoking twice is a no-op"


def test_it_lets_nobody_revoke_another_users_token(alice, bob, team):
    token, raw = services.token_create(user=alice, name="ci")
    assert not services.token_revoke(user=bob, token_id=token.id)
    assert client_for(raw).get("/api/v1/me").status_code == 200


def test_it_refuses_a_token_of_a_disabled_account(alice, team):
    _, raw = services.token_create(user=alice, name="ci")
    alice.is_active = False
    alice.save()
    assert client_for(raw).get("/api/v1/me").json()["error"]["code"] == "not_authenticated"


def test_it_cannot_scope_a_token_to_a_team_the_user_is_not_in(alice, bob_team):
    with pytest.raises(ValueError):
        services.token_create(user=alice, name="x", teams=[bob_team])


# --- the settings page


def test_the_settings_page_shows_a_new_token_once_and_lists_it_by_prefix(client, alice, team):
    client.force_login(alice)
    response = client.post(reverse("api_tokens"), {"name": "laptop"}, follow=True)
    assert response.redirect_chain == [(reverse("api_tokens"), 302)]  # post/redirect/get
    raw = response.context["created"]
    page = response.content.decode()
    assert raw in page and f"--team {team.slug}" in page
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get()
    assert token.name == "laptop" and token.all_teams
    again = client.get(reverse("api_tokens")).content.decode()
    assert raw not in again and token.prefix in again
    assert client_for(raw).get("/api/v1/me").status_code == 200


def test_reloading_the_page_after_creating_a_token_creates_no_second_one(client, alice, team):
    """Issue 17: the create POST answered with the page, so a reload posted it again."""
    client.force_login(alice)
    response = client.post(reverse("api_tokens"), {"name": "laptop"})
    assert response.status_code == 302 and response.url == reverse("api_tokens")
    for _ in range(2):  # what a reload of the page the browser landed on does
        assert client.get(response.url).status_code == 200
    assert ApiToken.objects.count() == 1


def test_a_token_last_used_moments_ago_says_so_in_words(client, alice, team):
    _, raw = services.token_create(user=alice, name="ci")
    assert client_for(raw).get("/api/v1/me").status_code == 200
    client.force_login(alice)
    page = client.get(reverse("api_tokens")).content.decode()
    assert "0 minutes ago" not in page
    assert "seconds ago" in page or "a second ago" in page or ">now<" in page


def test_the_settings_page_scopes_a_token_to_ticked_teams(client, alice, team):
    from webapp.accounts.services import team_create

    other = team_create(user=alice, name="Side project")
    client.force_login(alice)
    response = client.post(reverse("api_tokens"), {"name": "ci", "teams": [other.id]}, follow=True)
    me = client_for(response.context["created"]).get("/api/v1/me").json()
    assert [t["slug"] for t in me["teams"]] == ["side-project"]


def test_the_settings_page_revokes_a_token(client, alice, team):
    token, raw = services.token_create(user=alice, name="ci")
    client.force_login(alice)
    response = client.post(reverse("api_token_revoke", args=[token.id]))
    assert response.status_code == 302
    assert client_for(raw).get("/api/v1/me").json()["error"]["code"] == "token_revoked"
    assert "revoked" in client.get(reverse("api_tokens")).content.decode()


def test_the_settings_page_needs_a_login(client):
    response = client.get(reverse("api_tokens"))
    assert response.status_code == 302 and "/login/" in response.url
