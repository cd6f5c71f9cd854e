"""A bf16 download for the GPU: built here (Django), installed and tested on a GPU (no Django).

test_the_gpu_sample_package_builds writes .cache/kf_package_gpu/<package>.zip (git-ignored), which
a GPU machine's command carries and checks with webapp/downloads/gpu_check.py; where this
machine itself has a GPU, the gpu-marked test does both.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile

import pytest
import torch
from django.conf import settings

from webapp.dashboard.demo import seed_job
from webapp.downloads import gpu_check
from webapp.downloads.builder import build_package
from webapp.jobs.selectors import job_winners

pytestmark = pytest.mark.django_db

SAMPLE_DIR = settings.BASE_DIR / ".cache" / "kf_package_gpu"

# Workload-sized winners, bf16 where the op allows it (the interpreter cannot check bf16).
GPU_WINNERS = [
    ("rmsnorm", "4096x4096", "bf16"),
    ("layernorm", "4096x4096", "bf16"),
    ("softmax", "4096x8192", "bf16"),
    ("cross_entropy", "4096x32000", "bf16"),
    ("sum", "4096x4096", "bf16"),
    ("matmul", "4096x4096x4096", "bf16", "NT+bias"),
    ("attention", "2x16x1024x128", "bf16", "causal"),
]


@pytest.fixture
def sample(alice, team, settings, tmp_path):
    """The package of a seeded job (real kernel sources, demo timings) with GPU_WINNERS."""
    settings.MEDIA_ROOT = tmp_path / "media"
    title = "GPU check sample (demo timings)"
    job = seed_job(user=alice, team=team, title=title, shapes=GPU_WINNERS, seed=1,
                   reports=False, steps=4).job  # fmt: skip
    problems = [t.problem for t in job.tasks.select_related("problem").order_by("id")]
    return build_package(job=job, winners=job_winners(job_id=job.id), problems=problems)


def test_the_gpu_sample_package_builds(sample):
    package = sample
    archive = zipfile.ZipFile(io.BytesIO(package.data))
    root = package.filename.removesuffix(".zip")
    table = json.loads(archive.read(f"{root}/{package.name}/dispatch.json"))
    assert len(table["entries"]) == len(GPU_WINNERS)
    assert all(e["torch_dtype"] == "bfloat16" for e in table["entries"])
    assert gpu_check.package_name_from(archive) == package.name
    SAMPLE_DIR.mkdir(parents=True, exist_ok=True)
    for old in SAMPLE_DIR.glob("*.zip"):
        old.unlink()
    (SAMPLE_DIR / package.filename).write_bytes(package.data)


@pytest.mark.gpu
def test_the_package_passes_its_tests_on_a_gpu(sample, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if shutil.which("nvidia-smi") is None:
        pytest.skip("needs nvidia-smi for the record")
    package = sample
    path = tmp_path / package.filename
    path.write_bytes(package.data)
    out = tmp_path / "result.json"
    assert gpu_check.main([str(path), "--out", str(out)]) == 0, out.read_text()
    record = json.loads(out.read_text())
    assert record["bf16_tests_passed"] > 0 and record["counts"]["failed"] == 0
