"""The Amdahl plan's words and numbers use one unit (issue 17: "0.885 of the time" beside "11 %")."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels.model_source import check_model_source
from webapp.jobs.tests.support import model_jobs

pytestmark = pytest.mark.django_db


def test_the_plan_gives_shares_in_percent_everywhere(alice, team, client, settings, tmp_path,
                                                      django_capture_on_commit_callbacks):  # fmt: skip
    settings.MEDIA_ROOT = tmp_path
    source = check_model_source(Path(__file__).with_name("two_norms.py").read_text(), "m.py")
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = model_jobs(alice, team, [source], queue="cpu", gpu_minutes=1)
    run = job.model_run
    run.plan = {
        "not_optimizable_share": 0.885,
        "items": [{"rank": 1, "key": "rmsnorm/32x64/fp32", "share": 0.115, "calls": 2,
                   "predicted": {"1.5x": 1.04, "2x": 1.06, "3x": 1.08}, "budget_s": 60,
                   "expected_gain": 0.0234}],
    }  # fmt: skip
    run.save(update_fields=["plan"])
    client.force_login(alice)
    page = client.get(f"/jobs/{job.id}/").content.decode()
    assert "88 % of the time is in ops KernelForge cannot optimize yet" in page, page
    assert "0.885" not in page and "12 %" in page
    assert "2.3 %" in page and "0.0234" not in page  # the saving the plan expects
