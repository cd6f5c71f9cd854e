"""`manage.py demo_results` (what the README offers a user without a GPU who wants to see a
winner and its package) runs as often as one likes and never leaves half its work behind
(issue 27, item 5)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from webapp.accounts.models import Team
from webapp.jobs.models import Job
from webapp.jobs.selectors import job_has_winner

pytestmark = pytest.mark.django_db


def demo_results(user, team, capsys) -> list[str]:
    call_command("demo_results", "--username", user.username, "--team", team.slug)
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["jobs"]


def test_a_second_run_finds_the_demo_jobs_and_makes_nothing(alice, team, capsys):
    first = demo_results(alice, team, capsys)
    assert demo_results(alice, team, capsys) == first
    assert Job.objects.count() == 2 and Team.objects.filter(slug="vector-crew").count() == 1
    assert job_has_winner(job_id=first[0]), "a package to download"


def test_at_the_quota_it_says_so_and_leaves_nothing_behind(alice, team, settings, capsys):
    settings.KF_TEAM_MAX_ACTIVE_JOBS = 0
    with pytest.raises(CommandError, match="Nothing was recorded"):
        call_command("demo_results", "--username", alice.username, "--team", team.slug)
    assert Job.objects.count() == 0
    assert not Team.objects.filter(slug="vector-crew").exists()


def test_an_unknown_user_or_team_is_an_error_not_a_traceback(alice, team):
    with pytest.raises(CommandError, match="No user 'nobody'"):
        call_command("demo_results", "--username", "nobody", "--team", team.slug)
