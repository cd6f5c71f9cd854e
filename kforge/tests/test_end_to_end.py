"""The kforge command against a live server: daphne (the production ASGI server) started here,
on the test database, with a real Celery worker or the worker's services driven by the test.

Every kforge call is a separate process that speaks only HTTP to the server.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from webapp.api import services as api_services
from webapp.api.tests.conftest import FakeWorker
from webapp.jobs.models import Job
from workers.tests.support import wait_until, web_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SHAPES = "- {op: rmsnorm, shape: 8x64, dtype: fp32}\n- {op: matmul, shape: 64x48x32, dtype: fp16}\n"


@pytest.fixture(scope="module")
def api_server(django_db_setup, django_db_blocker, tmp_path_factory):
    with web_server(tmp_path_factory.mktemp("daphne") / "daphne.log") as (port, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def token(alice, team):
    return api_services.token_create(user=alice, name="e2e")[1]


def kforge_argv() -> list[str]:
    script = Path(sys.executable).with_name("kforge")  # installed by `pip install -e .`
    return [str(script)] if script.exists() else [sys.executable, "-m", "kforge"]


def cli_env(url: str, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
    env.update(KFORGE_URL=url, KFORGE_TOKEN=token, PYTHONPATH=str(ROOT))
    return env


def kforge(
    url: str, token: str, *args: str, cwd: Path, timeout: float = 90
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*kforge_argv(), *args],
        cwd=cwd,
        env=cli_env(url, token),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def kforge_background(url: str, token: str, *args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*kforge_argv(), *args],
        cwd=cwd,
        env=cli_env(url, token),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_it_submits_and_waits_for_a_real_worker_then_reports_done(
    api_server, start_worker, token, team, tmp_path
):
    start_worker(env={"KF_STANDIN_ITERATIONS": "3", "KF_STANDIN_PAUSE_S": "0.05"})
    (tmp_path / "shapes.yaml").write_text(SHAPES)
    result = kforge(
        api_server,
        token,
        "submit",
        "shapes.yaml",
        "--team",
        team.slug,
        "--budget",
        "30m",
        "--wait",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job = Job.objects.get(id=result.stdout.strip())
    assert job.status == Job.Status.DONE and job.title == "shapes.yaml"
    assert job.gpu_minutes == 30
    assert "6 iter" in result.stderr, "the progress line counts every iteration streamed"
    assert f"job {job.id} (shapes.yaml, team {team.slug}): done" in result.stderr

    status = kforge(api_server, token, "status", str(job.id), "--json", cwd=tmp_path)
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "done"
    # The stand-in agent keeps nothing, so there is nothing to download, and kforge says so.
    download = kforge(api_server, token, "download", str(job.id), "-o", "out.zip", cwd=tmp_path)
    assert download.returncode == 4 and "no_winners" in download.stderr
    assert not (tmp_path / "out.zip").exists()


def test_it_waits_while_the_worker_keeps_kernels_then_downloads_them(
    api_server, token, team, tmp_path
):
    (tmp_path / "shapes.yaml").write_text(SHAPES)
    waiting = kforge_background(
        api_server, token, "submit", "shapes.yaml", "--team", team.slug, "--wait", cwd=tmp_path
    )
    wait_until(
        lambda: Job.objects.filter(team=team).exists(), timeout_s=30, what="the job to be created"
    )
    job = Job.objects.get(team=team)
    for n, task in enumerate(job.tasks.order_by("id")):
        worker = FakeWorker(task.id)
        worker.iterate(verdict="baseline")
        time.sleep(0.3)  # let the stream carry it live, not only as a backlog
        worker.iterate(
            verdict="kept",
            speedup=1.5 + n,
            source=f"# winner {n}\ndef run(*inputs, out):\n    pass\n",
        )
        worker.finish()
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out.strip() == str(job.id) and "best 2.50x" in err

    result = kforge(api_server, token, "download", str(job.id), "-o", "out.zip", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    archive = zipfile.ZipFile(io.BytesIO((tmp_path / "out.zip").read_bytes()))
    # The download is a pip-installable package (webapp/downloads/builder.py).
    manifest = json.loads(archive.read("kf-shapesyaml/manifest.json"))
    assert sorted(w["speedup"] for w in manifest["winners"]) == [1.5, 2.5]
    kernel = "kf-shapesyaml/kf_shapesyaml/kernels/k_rmsnorm_8x64_fp32.py"
    assert "# winner 0" in archive.read(kernel).decode()


def test_it_exits_non_zero_when_the_job_fails(api_server, token, team, tmp_path):
    (tmp_path / "shapes.csv").write_text("op,shape,dtype\nrmsnorm,8x64,fp32\n")
    submitted = kforge(api_server, token, "submit", "shapes.csv", "--team", team.slug, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    waiting = kforge_background(api_server, token, "status", job_id, "--wait", cwd=tmp_path)
    time.sleep(0.5)
    worker = FakeWorker(Job.objects.get(id=job_id).tasks.get().id)
    worker.iterate(verdict="crash")
    worker.fail("CUDA error: an illegal memory access was encountered")
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 1, err
    assert "failed" in err and "illegal memory access" in err


def test_it_cancels_a_job_and_reports_it_with_its_own_exit_code(api_server, token, team, tmp_path):
    (tmp_path / "shapes.yaml").write_text(SHAPES)
    job_id = kforge(
        api_server, token, "submit", "shapes.yaml", "--team", team.slug, cwd=tmp_path
    ).stdout.strip()
    assert kforge(api_server, token, "cancel", job_id, cwd=tmp_path).returncode == 0
    status = kforge(api_server, token, "status", job_id, cwd=tmp_path)
    assert status.returncode == 3 and "cancelled" in status.stderr


def test_it_shows_the_servers_error_code_for_bad_input_and_bad_tokens(
    api_server, token, team, tmp_path
):
    (tmp_path / "shapes.csv").write_text("op,shape,dtype\nconv9d,1x1,fp16\n")
    bad = kforge(api_server, token, "submit", "shapes.csv", "--team", team.slug, cwd=tmp_path)
    assert bad.returncode == 4 and "invalid_shape_set" in bad.stderr and "conv9d" in bad.stderr
    refused = kforge(api_server, "kf_not_a_token", "status", "x", cwd=tmp_path)
    assert refused.returncode == 4 and "not_authenticated" in refused.stderr


# A model job's failure as the worker stores it (harness.model's message: a sentence, then the
# traceback's tail with the worker's paths).
PROFILE_FAILURE = """The model's forward pass raised an error:
  File "/srv/kernelforge/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _call_impl
    return forward_call(*args, **kwargs)
  File "/tmp/kf-model-16631-112392-rvu_lry3/model.py", line 4, in forward
    return x @ torch.ones(3, 5)
RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x4 and 3x5)"""


def test_status_says_why_a_model_job_failed(api_server, token, alice, team, tmp_path):
    """Issue 27: a failed model job read `status: failed` with nothing else, --json too."""
    from kernels.model_source import check_model_source
    from webapp.jobs import model_services
    from webapp.jobs.tests.support import model_jobs
    from webapp.jobs.tests.test_model_job_status import MODEL

    (job,) = model_jobs(alice, team, [check_model_source(MODEL.read_text(), "two_norms.py")])
    assert model_services.model_fail(
        job_id=job.id, message=PROFILE_FAILURE, profile={"ok": False, "failure": "forward"}
    )
    shown = kforge(api_server, token, "status", str(job.id), cwd=tmp_path)
    assert shown.returncode == 1
    assert "failed (profile (forward)): The model's forward pass raised an error: RuntimeError: " \
        "mat1 and mat2 shapes cannot be multiplied" in shown.stderr  # fmt: skip
    assert 'File "model.py", line 4, in forward' in shown.stderr
    assert "/tmp/" not in shown.stderr and "/srv/" not in shown.stderr
    as_json = json.loads(
        kforge(api_server, token, "status", str(job.id), "--json", cwd=tmp_path).stdout
    )
    assert as_json["failure"]["stage"] == "profile (forward)"
    assert as_json["failure"]["traceback"].endswith("(4x4 and 3x5)")
    assert 'File "torch/nn/modules/module.py"' in as_json["failure"]["traceback"]
