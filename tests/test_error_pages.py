"""Error pages look like the site and offer a way back; every page names an icon (issue 17:
Django's bare "Not Found" text, and a 404 for /favicon.ico on every page)."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.staticfiles import finders
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory
from django.views.defaults import permission_denied, server_error

pytestmark = pytest.mark.django_db


def test_a_missing_page_says_so_and_links_back(client, alice, team):
    client.force_login(alice)
    response = client.get(f"/jobs/{uuid.uuid4()}/")
    page = response.content.decode()
    assert response.status_code == 404 and "Nothing here" in page
    assert "belongs to a team you are not in" in page
    assert '<a class="button primary" href="/">Jobs</a>' in page and "Log in</a>" not in page
    assert 'rel="icon"' in page and "Log out" in page  # the site's own frame


def test_a_missing_page_offers_a_log_in_to_someone_logged_out(client):
    page = client.get("/no/such/page/").content.decode()
    assert "Nothing here" in page and 'href="/login/">Log in</a>' in page


def test_an_expired_form_gets_a_page_that_says_what_to_do(alice, team):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post("/settings/tokens/", {"name": "x"})
    page = response.content.decode()
    assert response.status_code == 403 and "That form could not be sent" in page
    assert "reload the page" in page and 'href="/"' in page


def test_forbidden_and_server_error_pages_use_the_site_frame(alice):
    request = RequestFactory().get("/")
    request.user = alice
    forbidden = permission_denied(request, PermissionDenied("Only owners may invite."))
    assert forbidden.status_code == 403 and "Only owners may invite." in forbidden.content.decode()
    broken = server_error(request)
    assert broken.status_code == 500 and "Something broke on our side" in broken.content.decode()
    assert 'href="/"' in broken.content.decode()


def test_the_icon_exists_and_favicon_ico_points_at_it(client):
    assert finders.find("favicon.svg")
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response.url.endswith("/static/favicon.svg")
