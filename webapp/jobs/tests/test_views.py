"""The job form and pages over HTTP: good input makes a whole job, bad input makes nothing."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from webapp.jobs import services
from webapp.jobs.models import Job, Problem, Task
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client, alice, team):
    client.force_login(alice)
    return client


def submit(client, team, **fields):
    data = {"team": team.id, "title": "My job", "kind": "shapes", "queue": "cpu", **fields}
    return client.post(reverse("jobs:new"), data)


def test_it_saves_a_pasted_shape_set_as_problems_and_tasks(
    member, team, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = submit(
            member, team, shapes_text="op,shape,dtype\nmatmul,128x128x64,fp16\nrmsnorm,64x512,bf16"
        )
    job = Job.objects.get()
    assert response.status_code == 302 and response.url == reverse("jobs:detail", args=[job.id])
    assert job.problems.count() == 2 and job.tasks.filter(queue="cpu").count() == 2
    assert len(callbacks) == 2, "one enqueue per task, after commit"


def test_it_accepts_an_uploaded_yaml_file(member, team, django_capture_on_commit_callbacks):
    upload = SimpleUploadedFile("shapes.yaml", b"- {op: rmsnorm, shape: 8x64, dtype: fp32}\n")
    with django_capture_on_commit_callbacks(execute=False):
        response = submit(member, team, shapes_file=upload)
    assert response.status_code == 302
    assert Problem.objects.get().key == "rmsnorm/8x64/fp32"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"shapes_text": ""}, "The shape set is empty"),
        ({"shapes_text": '[{"op": "matmul"'}, "not valid JSON"),
        ({"shapes_text": "op,shape,dtype\nconv9d,1x1,fp16"}, "unknown op &#x27;conv9d&#x27;"),
        ({"shapes_text": "op,shape,dtype\nrmsnorm,8x8,int4"}, "not &#x27;int4&#x27;"),
        ({"shapes_text": "op,shape,dtype\nrmsnorm,-8x8,fp16"}, "sizes must be positive"),
        ({"shapes_text": "op,shape,dtype\nrmsnorm,99999999999x99999999999,fp16"}, "too large"),
        ({"shapes_file": SimpleUploadedFile("s.csv", b"\xff\xfe\x00bad")}, "not UTF-8 text"),
        ({"shapes_file": SimpleUploadedFile("s.json", b"   ")}, "The shape set is empty"),
        ({"kind": "model"}, "Choose a model file"),
        ({"kind": "model", "model_file": SimpleUploadedFile("x.exe", b"MZ")}, "cannot be profiled"),
        ({"kind": "model", "model_file": SimpleUploadedFile("x.pt", b"\x80w")}, "KernelBench"),
        (
            {"queue": "gpu.nope", "shapes_text": "op,shape,dtype\nrmsnorm,8x8,fp16"},
            "Select a valid choice",
        ),
    ],
)
def test_it_shows_a_clear_message_for_bad_input_and_creates_nothing(member, team, fields, message):
    response = submit(member, team, **fields)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert Job.objects.count() == 0 and Problem.objects.count() == 0 and Task.objects.count() == 0


def test_it_refuses_an_upload_over_the_configured_limit(member, team, settings):
    settings.KF_MAX_SHAPE_FILE_BYTES = 100
    big = SimpleUploadedFile("s.csv", b"op,shape,dtype\n" + b"rmsnorm,8x8,fp16\n" * 20)
    response = submit(member, team, shapes_file=big)
    assert response.status_code == 400 and "the limit is 100" in response.content.decode()
    settings.KF_MAX_MODEL_FILE_BYTES = 10
    response = submit(member, team, kind="model", model_file=SimpleUploadedFile("m.py", b"x" * 11))
    assert response.status_code == 400 and "the limit is 10" in response.content.decode()
    assert Job.objects.count() == 0


def test_it_offers_only_the_users_teams(member, team, bob):
    from webapp.accounts.services import team_create

    other = team_create(user=bob, name="Bob's")
    response = submit(member, other, shapes_text="op,shape,dtype\nrmsnorm,8x8,fp16")
    assert response.status_code == 400 and Job.objects.count() == 0


def test_it_shows_a_job_only_to_members_of_its_team(client, alice, bob, team, problems):
    job = shape_job(user=alice, team=team, title="secret", problems=problems, queue="cpu")
    for url in (reverse("jobs:detail", args=[job.id]), reverse("jobs:events", args=[job.id])):
        assert client.get(url).status_code == 302, "anonymous people are sent to log in"
        client.force_login(bob)
        assert client.get(url).status_code == 404
        client.force_login(alice)
        assert client.get(url).status_code == 200
        client.logout()
    client.force_login(bob)
    assert "secret" not in client.get(reverse("jobs:list")).content.decode()
    assert client.post(reverse("jobs:cancel", args=[job.id])).status_code == 404
    assert not Job.objects.get(id=job.id).cancel_requested


def test_it_serves_events_after_a_given_seq(member, alice, team, problems):
    job = shape_job(user=alice, team=team, title="t", problems=problems[:1], queue="x")
    task = job.tasks.get()
    services.task_claim(task_id=task.id, worker="w")
    for index in range(3):
        services.iteration_record(
            task_id=task.id, attempt=1, data=services.IterationData(index=index, verdict="reverted")
        )
    body = member.get(reverse("jobs:events", args=[job.id]), {"after": 1}).json()
    assert [it["seq"] for it in body["iterations"]] == [2, 3]
    assert body["status"]["status"] == "running" and body["status"]["last_seq"] == 3


def test_it_sends_people_without_a_team_to_create_one(client, bob):
    client.force_login(bob)
    response = client.get(reverse("jobs:new"))
    assert response.status_code == 302 and response.url == reverse("accounts:teams")


def test_it_lets_a_member_cancel_a_job_from_its_page(member, alice, team, problems):
    job = shape_job(user=alice, team=team, title="t", problems=problems, queue="x")
    response = member.post(reverse("jobs:cancel", args=[job.id]), follow=True)
    assert "Cancelling" in response.content.decode()
    job.refresh_from_db()
    assert job.status == Job.Status.CANCELLED and job.cancel_requested
    assert set(job.tasks.values_list("status", flat=True)) == {Task.Status.CANCELLED}


def test_it_applies_the_team_quota_to_the_web_form_too(member, team, settings):
    settings.KF_TEAM_MAX_ACTIVE_JOBS = 1
    first = submit(member, team, shapes_text="op,shape,dtype\nrmsnorm,64x512,fp16")
    assert first.status_code == 302
    second = submit(member, team, shapes_text="op,shape,dtype\nrmsnorm,64x512,fp16")
    assert second.status_code == 400
    assert "queued or running jobs; the limit is 1" in second.content.decode()
    assert Job.objects.count() == 1, "the refused job leaves nothing behind"


def test_it_marks_interpreter_timings_in_the_event_stream(member, alice, team, problems):
    job = shape_job(user=alice, team=team, title="t", problems=problems[:1], queue="test.nobody")
    task = job.tasks.get()
    claim = services.task_claim(task_id=task.id, worker="w")
    for index, regime in enumerate(["interpreter", "offline"]):
        services.iteration_record(
            task_id=task.id,
            attempt=claim.attempt,
            data=services.IterationData(
                index=index,
                verdict="baseline" if index == 0 else "kept",
                speedup=0.01,
                evaluation={"timings": {"regime": regime}},
            ),
        )
    events = member.get(reverse("jobs:events", args=[job.id]), {"after": 0}).json()["iterations"]
    assert [e["interpreter"] for e in events] == [True, False]


def test_the_form_lists_the_ops_shapes_dtypes_and_example_models(member):
    """Issue 17: the help named no op or dtype spelling, and the example picker
    examples/models/README.md promises was not on the page."""
    page = member.get(reverse("jobs:new")).content.decode()
    for op in ("matmul", "rmsnorm", "softmax", "attention"):
        assert f"<td><code>{op}</code></td>" in page
    assert "<code>MxNxK</code>" in page and "float32 = fp32" in page and "bfloat16" in page
    assert '<select name="example"' in page
    for example in ("llama_block", "gpt_block", "mlp"):
        assert f'<option value="{example}">' in page


def test_a_shape_set_written_with_torch_dtype_names_is_accepted(
    member, team, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        response = submit(member, team, shapes_text="op,shape,dtype\nsoftmax,64x512,float32")
    assert response.status_code == 302 and Problem.objects.get().key == "softmax/64x512/fp32"
