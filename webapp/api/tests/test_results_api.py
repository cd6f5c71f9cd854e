"""Winners, the download zip and leaderboards: verified GPU results only are ranked."""

import io
import json
import zipfile

import pytest

from webapp.api.tests.conftest import FakeWorker
from webapp.jobs import selectors
from webapp.jobs.models import Job, Task

pytestmark = pytest.mark.django_db


def job_with_tasks(submit, api, **body):
    response = submit(api, **body)
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    tasks = list(Task.objects.filter(job_id=job_id).order_by("id"))
    return Job.objects.get(id=job_id), [FakeWorker(t.id) for t in tasks]


def test_it_picks_the_fastest_kept_kernel_per_problem_as_the_winner(alice_api, submit):
    job, (rms, mm) = job_with_tasks(submit, alice_api)
    rms.iterate(verdict="baseline")
    rms.iterate(verdict="kept", speedup=1.2, source="# rms v1\n")
    rms.iterate(verdict="kept", speedup=1.9, source="# rms v2\n")
    rms.iterate(verdict="reverted", speedup=3.0, source="# rms slower in truth\n")
    rms.iterate(verdict="kept", speedup=9.0, implausible=True, source="# too good\n")
    mm.iterate(verdict="incorrect")
    body = alice_api.get(f"/api/v1/jobs/{job.id}/winners").json()
    assert [(w["problem"], w["speedup"]) for w in body["winners"]] == [("rmsnorm/8x64/fp32", 1.9)]
    assert body["problems_without_winner"] == ["matmul/64x48x32/fp16/NN"]
    assert body["winners"][0]["device"]["name"] == "NVIDIA H100 80GB HBM3"


def test_it_downloads_the_winners_as_a_zip_with_a_provenance_manifest(alice_api, submit):
    job, (rms, mm) = job_with_tasks(submit, alice_api, title="Nightly run")
    rms.iterate(verdict="kept", speedup=1.4, source="# rms winner\ndef run(x, w, out):\n    pass\n")
    mm.iterate(
        verdict="kept",
        speedup=1.1,
        kind="interpreter",
        regime="interpreter",
        device="cpu (triton interpreter)",
    )
    response = alice_api.get(f"/api/v1/jobs/{job.id}/download")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert f"kernelforge-{job.id}.zip" in response["Content-Disposition"]
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    names = set(archive.namelist())
    # The download is an installable package (webapp/downloads/builder.py), manifest at its root.
    package = "kf-nightly-run/kf_nightly_run"
    assert {
        "kf-nightly-run/pyproject.toml",
        "kf-nightly-run/manifest.json",
        f"{package}/kernels/k_rmsnorm_8x64_fp32.py",
    } <= names
    # The interpreter's "1.1x" is no winner: PyTorch serves matmul.
    assert f"{package}/kernels/k_matmul_64x48x32_fp16_nn.py" not in names
    assert "# rms winner" in archive.read(f"{package}/kernels/k_rmsnorm_8x64_fp32.py").decode()
    manifest = json.loads(archive.read("kf-nightly-run/manifest.json"))
    assert manifest["job"]["id"] == str(job.id)
    assert manifest["problems_without_winner"] == ["matmul/64x48x32/fp16/NN"]
    (rms_entry,) = manifest["winners"]
    assert rms_entry["speedup"] == 1.4 and rms_entry["ranked"] is True
    assert rms_entry["best_baseline"] == {"name": "torch", "speedup": 1.4}
    assert rms_entry["evaluation"]["timings"]["regime"] == "offline"
    assert rms_entry["device"]["kind"] == "cuda" and len(rms_entry["sha256"]) == 64


def test_it_says_no_winners_rather_than_sending_an_empty_zip(alice_api, submit):
    job, (rms, _) = job_with_tasks(submit, alice_api)
    rms.iterate(verdict="baseline")
    response = alice_api.get(f"/api/v1/jobs/{job.id}/download")
    assert response.status_code == 404 and response.json()["error"]["code"] == "no_winners"


def test_the_leaderboard_ranks_each_teams_best_per_problem_and_gpu(alice, team, make_token, submit):
    from webapp.accounts.services import team_create
    from webapp.api.tests.conftest import client_for

    club = team_create(user=alice, name="Kernel Club")
    alice_api = client_for(make_token(alice))
    job1, (rms1, mm1) = job_with_tasks(submit, alice_api, title="first")
    job2, (rms2, _) = job_with_tasks(submit, alice_api, title="second", team=club.slug)
    rms1.iterate(verdict="kept", speedup=1.3)
    rms1.iterate(verdict="kept", speedup=1.6)
    rms2.iterate(verdict="kept", speedup=2.1)
    rms2.iterate(verdict="kept", speedup=1.8, device="NVIDIA H200")
    mm1.iterate(verdict="kept", speedup=1.2)
    board = alice_api.get("/api/v1/leaderboard").json()["groups"]
    summary = [
        (g["problem_key"], g["device"], [(e["job_title"], e["speedup"]) for e in g["entries"]])
        for g in board
    ]
    assert summary == [
        ("matmul/64x48x32/fp16/NN", "NVIDIA H100 80GB HBM3", [("first", 1.2)]),
        ("rmsnorm/8x64/fp32", "NVIDIA H100 80GB HBM3", [("second", 2.1), ("first", 1.6)]),
        ("rmsnorm/8x64/fp32", "NVIDIA H200", [("second", 1.8)]),
    ]
    assert [e["rank"] for e in board[1]["entries"]] == [1, 2]
    filtered = alice_api.get("/api/v1/leaderboard?op=rmsnorm&device=NVIDIA H200").json()["groups"]
    assert [(g["problem_key"], g["device"]) for g in filtered] == [
        ("rmsnorm/8x64/fp32", "NVIDIA H200")
    ]
    assert alice_api.get("/api/v1/leaderboard?dtype=bf16").json()["groups"] == []


@pytest.mark.parametrize(
    "evaluation",
    [
        {"kind": "interpreter", "regime": "interpreter"},
        {"kind": "interpreter", "regime": "offline"},
        {"kind": "cuda", "regime": "interpreter"},
        {"implausible": True},
    ],
)
def test_the_leaderboard_never_ranks_interpreter_or_implausible_results(
    alice_api, submit, evaluation
):
    job, (rms, _) = job_with_tasks(submit, alice_api)
    rms.iterate(verdict="kept", speedup=5.0, **evaluation)
    assert alice_api.get("/api/v1/leaderboard").json()["groups"] == []
    assert selectors.ranked_iterations(jobs=Job.objects.all()).count() == 0
    assert alice_api.get(f"/api/v1/jobs/{job.id}/winners").json()["winners"] == []


def test_the_leaderboard_skips_kept_rows_without_an_evaluation(alice_api, submit):
    job, (rms, _) = job_with_tasks(submit, alice_api)
    rms.iterate(verdict="kept", speedup=None)
    assert alice_api.get("/api/v1/leaderboard").json()["groups"] == []
