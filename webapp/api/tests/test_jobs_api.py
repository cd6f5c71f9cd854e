"""Every job endpoint against the real database: create, list, read, cancel, tasks, iterations."""

import pytest

from webapp.api.models import JobSubmission
from webapp.api.tests.conftest import FakeWorker
from webapp.jobs.models import Job, Task

pytestmark = pytest.mark.django_db


def test_it_creates_a_job_from_a_yaml_shape_set_with_the_web_forms_rules(alice_api, submit):
    response = submit(alice_api, title="nightly", gpu_minutes=20)
    assert response.status_code == 201, response.content
    body = response.json()
    job = Job.objects.get(id=body["id"])
    assert (
        body["status"] == "queued" and body["team"] == "alices-team" and body["title"] == "nightly"
    )
    assert [p["key"] for p in body["problems"]] == ["rmsnorm/8x64/fp32", "matmul/64x48x32/fp16/NN"]
    assert [t["status"] for t in body["tasks"]] == ["queued", "queued"]
    assert job.tasks.filter(queue="cpu").count() == 2
    assert job.gpu_minutes == 20
    assert JobSubmission.objects.get(job=job).token is not None, "which token submitted it"
    assert body["web_url"].endswith(f"/jobs/{job.id}/")


def test_it_enqueues_each_task_after_commit(alice_api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_api.post(
            "/api/v1/jobs",
            {"team": "alices-team", "shapes": "op,shape,dtype\nrmsnorm,8x64,fp32"},
            content_type="application/json",
        )
    assert response.status_code == 201 and len(callbacks) == 1


def test_it_creates_a_job_from_a_problem_list(alice_api, submit):
    response = submit(
        alice_api,
        shapes=None,
        format="auto",
        problems=[{"op": "rmsnorm", "shape": [8, 64], "dtype": "fp16"}],
    )
    assert response.status_code == 201, response.content
    assert response.json()["problems"][0]["key"] == "rmsnorm/8x64/fp16"


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        (
            {"shapes": "op,shape,dtype\nconv9d,1x1,fp16", "format": "csv"},
            "invalid_shape_set",
            "shapes",
        ),
        ({"shapes": "- {op: rmsnorm, shape: 8x8, dtype: int4}"}, "invalid_shape_set", "shapes"),
        ({"shapes": '[{"op": "matmul"', "format": "json"}, "invalid_shape_set", "shapes"),
        ({"shapes": ""}, "invalid_shape_set", "shapes"),
        ({"queue": "gpu.nope"}, "unknown_queue", "queue"),
        ({"team": "no-such-team"}, "unknown_team", None),
        ({"gpu_minutes": 0}, "validation_error", None),
        ({"gpu_minutes": 3}, "validation_error", "gpu_minutes"),  # 2 problems need 4
        ({"title": "x" * 121}, "validation_error", None),
        (
            {"problems": [{"op": "rmsnorm", "shape": "8x8", "dtype": "fp32"}]},
            "validation_error",
            None,
        ),
        ({"format": "toml"}, "validation_error", None),
    ],
)
def test_it_rejects_bad_input_with_a_stable_code_and_creates_nothing(
    alice_api, submit, body, code, field
):
    response = submit(alice_api, **body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    if field:
        assert {d["field"] for d in error["details"]} == {field}
    assert not Job.objects.exists()


def test_without_a_budget_a_large_shape_set_gets_enough_for_every_problem(alice_api, submit):
    problems = [{"op": "rmsnorm", "shape": [8, 64 * (i + 1)], "dtype": "fp32"} for i in range(20)]
    response = submit(alice_api, shapes=None, format="auto", problems=problems)
    assert response.status_code == 201, response.content
    assert Job.objects.get(id=response.json()["id"]).gpu_minutes == 40  # 2 minutes each


def test_a_budget_too_small_for_its_problems_says_how_much_they_need(alice_api, submit):
    response = submit(alice_api, gpu_minutes=3)
    message = response.json()["error"]["message"]
    assert "2 problems need at least 4 CPU minutes" in message and "90 s" in message


def test_it_answers_malformed_json_with_a_json_error(alice_api):
    response = alice_api.post("/api/v1/jobs", "{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_request"


def test_it_refuses_a_body_over_the_limit_before_parsing_it(alice_api, settings):
    settings.KF_API_MAX_BODY_BYTES = 1000
    big = '{"team": "alices-team", "shapes": "' + "x" * 2000 + '"}'
    response = alice_api.post("/api/v1/jobs", big, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert response.json()["error"]["details"][0]["limit_bytes"] == 1000


def test_it_refuses_a_shape_file_over_the_forms_limit(alice_api, submit, settings):
    settings.KF_MAX_SHAPE_FILE_BYTES = 100
    response = submit(
        alice_api, shapes="op,shape,dtype\n" + "rmsnorm,8x64,fp32\n" * 20, format="csv"
    )
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_shape_set"


def test_it_refuses_a_weights_file_that_nothing_could_profile(alice_api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("net.pt", b"\x80\x02weights")
    response = alice_api.post(
        "/api/v1/jobs/model", {"team": "alices-team", "title": "net", "model_file": upload}
    )
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_model_file" and "KernelBench" in error["message"]
    assert not Job.objects.exists()


def test_it_rejects_a_model_file_with_a_wrong_suffix(alice_api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("net.exe", b"MZ")
    response = alice_api.post("/api/v1/jobs/model", {"team": "alices-team", "model_file": upload})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_model_file"


def test_it_lists_jobs_newest_first_with_filters_and_paging(alice_api, submit):
    first = submit(alice_api, title="one").json()["id"]
    second = submit(alice_api, title="two").json()["id"]
    Job.objects.filter(id=first).update(status=Job.Status.DONE)
    page = alice_api.get("/api/v1/jobs?limit=1").json()
    assert page["count"] == 2 and [j["id"] for j in page["items"]] == [second]
    assert [j["id"] for j in alice_api.get("/api/v1/jobs?offset=1").json()["items"]] == [first]
    assert [j["id"] for j in alice_api.get("/api/v1/jobs?status=done").json()["items"]] == [first]
    assert alice_api.get("/api/v1/jobs?team=other").json()["count"] == 0


def test_it_reads_a_job_its_tasks_and_iterations(alice_api, submit):
    job_id = submit(alice_api).json()["id"]
    task = Task.objects.filter(job_id=job_id).order_by("id").first()
    worker = FakeWorker(task.id)
    worker.iterate(verdict="baseline")
    worker.iterate(
        verdict="kept", speedup=1.7, source="def run(*inputs, out):\n    out.copy_(inputs[0])\n"
    )

    job = alice_api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["status"] == "running" and job["last_seq"] == 2
    tasks = alice_api.get(f"/api/v1/jobs/{job_id}/tasks").json()
    assert (
        tasks[0]["status"] == "running"
        and tasks[0]["iterations"] == 2
        and tasks[0]["best_speedup"] == 1.7
    )
    one = alice_api.get(f"/api/v1/jobs/{job_id}/tasks/{task.id}").json()
    assert one["id"] == task.id and one["problem"] == "rmsnorm/8x64/fp32"

    page = alice_api.get(f"/api/v1/jobs/{job_id}/iterations?limit=1").json()
    assert [i["seq"] for i in page["items"]] == [1] and page["next_after"] == 1
    rest = alice_api.get(f"/api/v1/jobs/{job_id}/iterations?after=1").json()
    assert [(i["seq"], i["verdict"]) for i in rest["items"]] == [(2, "kept")]
    assert "source" not in rest["items"][0], "summaries leave the source out"

    full = alice_api.get(f"/api/v1/jobs/{job_id}/iterations/2").json()
    assert "out.copy_" in full["source"] and full["evaluation"]["device"]["kind"] == "cuda"
    assert (
        alice_api.get(f"/api/v1/jobs/{job_id}/iterations/3").json()["error"]["code"] == "not_found"
    )
    assert alice_api.get(f"/api/v1/jobs/{job_id}/tasks/999999").status_code == 404


def test_it_cancels_a_job_and_then_refuses_to_cancel_it_again(alice_api, submit):
    job_id = submit(alice_api).json()["id"]
    response = alice_api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled" and response.json()["cancel_requested"]
    assert {t["status"] for t in response.json()["tasks"]} == {"cancelled"}
    again = alice_api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "job_not_cancellable"


def test_it_asks_a_running_job_to_stop_and_says_so(alice_api, submit):
    job_id = submit(alice_api).json()["id"]
    FakeWorker(Task.objects.filter(job_id=job_id).first().id)
    response = alice_api.post(f"/api/v1/jobs/{job_id}/cancel")
    body = response.json()
    assert response.status_code == 202 and body["status"] == "running" and body["cancel_requested"]
    assert sorted(t["status"] for t in body["tasks"]) == ["cancelled", "running"]


def test_it_answers_an_unknown_job_with_404_json(alice_api):
    response = alice_api.get("/api/v1/jobs/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    bad = alice_api.get("/api/v1/jobs/not-a-uuid")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"


def test_it_serves_the_openapi_schema_and_docs(client):
    schema = client.get("/api/openapi.json").json()
    assert schema["info"]["version"] == "1"
    assert "/api/v1/jobs/{job_id}/events" in schema["paths"]
    assert schema["components"]["securitySchemes"]["TokenAuth"]["scheme"] == "bearer"
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()


# --- issue 27, item 8 -------------------------------------------------------------------------


def test_the_same_idempotency_key_twice_makes_one_job(
    alice_api, django_capture_on_commit_callbacks
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from webapp.jobs.tests.test_model_job_status import MODEL

    body = {"team": "alices-team", "shapes": "- {op: rmsnorm, shape: 8x64, dtype: fp32}"}
    with django_capture_on_commit_callbacks(execute=False):
        first, again, other = (
            alice_api.post(
                "/api/v1/jobs",
                body,
                content_type="application/json",
                headers={"Idempotency-Key": key},
            )  # fmt: skip
            for key in ("retry-1", "retry-1", "retry-2")
        )
        plain = alice_api.post("/api/v1/jobs", body, content_type="application/json")
        models = [
            alice_api.post(
                "/api/v1/jobs/model",
                {
                    "team": "alices-team",
                    "model_file": SimpleUploadedFile("two_norms.py", MODEL.read_bytes()),
                },
                headers={"Idempotency-Key": "model-1"},
            )  # fmt: skip
            for _ in range(2)
        ]
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"] != other.json()["id"]
    assert plain.status_code == 201 and Job.objects.filter(kind="shapes").count() == 3
    assert models[0].json()["submitted_jobs"] == models[1].json()["submitted_jobs"]
    assert Job.objects.filter(kind="model").count() == 1


def test_an_unknown_api_path_answers_in_the_error_envelope(alice_api):
    for path in ("/api/v1/nope", "/api/v1/jobs/x/y/z/", "/api/nothing"):
        response = alice_api.get(path)
        assert response.status_code == 404 and response["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "not_found"
        assert "/api/docs" in response.json()["error"]["message"]


def test_at_the_quota_a_bad_request_still_gets_its_own_error(alice_api, alice, team, client,
                                                             settings):  # fmt: skip
    from django.urls import reverse

    settings.KF_TEAM_MAX_ACTIVE_JOBS = 0
    body = {"team": "alices-team", "shapes": "op,shape,dtype\nconv9d,1x1,fp16", "gpu_minutes": 1}
    refused = alice_api.post("/api/v1/jobs", body, content_type="application/json")
    assert refused.json()["error"]["code"] == "invalid_shape_set"
    client.force_login(alice)
    form = {"team": team.id, "title": "t", "kind": "shapes", "queue": "cpu", "budget": "1",
            "shapes_text": "op,shape,dtype\nrmsnorm,8x64,fp32"}  # fmt: skip
    page = client.post(reverse("jobs:new"), form).content.decode()
    assert "needs at least 2 CPU minutes" in page and "active jobs" not in page
