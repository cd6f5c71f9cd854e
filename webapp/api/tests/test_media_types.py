"""A request body must say it is JSON (issue 28, item 5): the JSON endpoints parsed any body as
JSON, so text/plain or no Content-Type at all created jobs."""

from __future__ import annotations

import json

import pytest

from webapp.api.tests.conftest import SHAPES_YAML
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db

BODY = json.dumps({"team": "alices-team", "shapes": SHAPES_YAML, "format": "yaml"})


@pytest.mark.parametrize("content_type", ["text/plain", "", "application/x-www-form-urlencoded"])
def test_a_json_body_sent_as_another_type_is_refused_with_415(
    alice_api, content_type, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        response = alice_api.generic("POST", "/api/v1/jobs", BODY, content_type=content_type)
    assert response.status_code == 415, response.content
    error = response.json()["error"]
    assert error["code"] == "unsupported_media_type" and "application/json" in error["message"]
    assert not Job.objects.exists(), "no job from a body of the wrong type"


def test_json_with_a_charset_is_json(alice_api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = alice_api.generic(
            "POST", "/api/v1/jobs", BODY, content_type="application/json; charset=utf-8"
        )
    assert response.status_code == 201, response.content


def test_a_post_without_a_body_needs_no_content_type(alice_api, submit):
    job_id = submit(alice_api).json()["id"]
    response = alice_api.generic("POST", f"/api/v1/jobs/{job_id}/cancel", "", content_type="")
    assert response.status_code != 415, response.content
