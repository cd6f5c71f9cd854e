"""The demo account `up` ensures on every start (issue 28, item 4)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.embedded.demo import DEMO_USERNAME, demo_account_ensure

pytestmark = pytest.mark.django_db


def test_a_restart_keeps_the_demo_users_sessions():
    demo_account_ensure(password="demo-pw-1")
    browser = Client()
    assert browser.login(username=DEMO_USERNAME, password="demo-pw-1")
    assert browser.get("/").status_code == 200

    demo_account_ensure(password="demo-pw-1")  # the next `up`, same password

    assert browser.get("/").status_code == 200, "the open tab was logged out"


def test_a_new_demo_password_takes_effect():
    demo_account_ensure(password="demo-pw-1")
    demo_account_ensure(password="demo-pw-2")
    user = User.objects.get(username=DEMO_USERNAME)
    assert user.check_password("demo-pw-2") and not user.check_password("demo-pw-1")
