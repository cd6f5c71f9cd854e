"""The dashboard's world: alice in two teams, each with a finished run recorded as a worker does."""

from __future__ import annotations

import pytest

from webapp.dashboard.demo import seed_job

SHAPES = [("rmsnorm", "2048x4096", "fp16"), ("softmax", "1024x8192", "fp32")]


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def club(alice):
    from webapp.accounts.services import team_create

    return team_create(user=alice, name="Kernel Club")


@pytest.fixture
def runs(alice, team, club, media, django_capture_on_commit_callbacks):
    """Two finished jobs on the same problems (one per team); nothing is enqueued."""
    with django_capture_on_commit_callbacks(execute=False):
        ours = seed_job(
            user=alice, team=team, title="Norms on H100 (demo data)", shapes=SHAPES, seed=1
        )
        theirs = seed_job(user=alice, team=club, title="Club norms", shapes=SHAPES, seed=2)
    return ours.job, theirs.job


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client
