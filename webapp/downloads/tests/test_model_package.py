"""A model job's package ships its kernels only when the model with them beat its best baseline
end to end, and its README shows every baseline (eager, CUDA graphs, torch.compile) with its
compile time next to the ways with the kernels."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from webapp.api.selectors import job_winners
from webapp.dashboard.demo import seed_job
from webapp.downloads.builder import build_package
from webapp.jobs.models import Job
from webapp.modeljobs.models import ModelRun

pytestmark = pytest.mark.django_db

RECORDED = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
FUSIONS = [
    ("swiglu_gate", "8x64x32", "fp16"),
    ("qkv_rotary", "8x2x2x16x32", "fp16"),
    ("decode_attention", "1x2x4x24x16", "fp16"),
]


def _package(alice, team, end_to_end):
    job = seed_job(user=alice, team=team, title="A model", shapes=FUSIONS, seed=1,
                   reports=False, steps=2).job  # fmt: skip
    Job.objects.filter(id=job.id).update(kind=Job.Kind.MODEL)
    job.refresh_from_db()
    ModelRun.objects.create(job=job, queue="gpu.h100", budget_s=60, status="done",
                            end_to_end=end_to_end)  # fmt: skip
    problems = [t.problem for t in job.tasks.select_related("problem").order_by("id")]
    package = build_package(job=job, winners=job_winners(job=job), problems=problems)
    archive = zipfile.ZipFile(io.BytesIO(package.data))
    root = package.name.replace("_", "-")
    table = json.loads(archive.read(f"{root}/{package.name}/dispatch.json"))
    readme = archive.read(f"{root}/README.md").decode()
    return table, readme


def _recorded_end_to_end() -> dict:
    return json.loads((RECORDED / "model_llama_decode_h100_run1.json").read_text())["result"][
        "end_to_end"
    ]


def test_a_model_faster_than_its_best_baseline_ships_its_kernels(alice, team):
    e2e = _recorded_end_to_end()
    assert e2e["faster"]
    table, readme = _package(alice, team, e2e)
    assert {e["op"] for e in table["entries"]} == {op for op, *_ in FUSIONS}
    assert f"{e2e['speedup']:.3f}x faster than the best baseline" in readme
    for name in ("eager", "cuda_graphs", "compile", "compile_max_autotune", "compile_cuda_graphs"):
        variant = e2e["variants"][name]
        assert f"| {variant['label']} | PyTorch only | {variant['offline']['median_us']:.1f} |" in (
            readme
        )
        assert f"{variant['compile_s']:.1f}" in readme


def test_a_model_nothing_beats_ships_no_replacement(alice, team):
    e2e = _recorded_end_to_end() | {
        "faster": False,
        "speedup": 0.98,
        "speedup_ci": [0.96, 1.01],
        "message": "Nothing beats the best baseline.",
    }
    table, readme = _package(alice, team, e2e)
    assert table["entries"] == []  # the ops are registered, PyTorch serves every call
    assert set(table["ops"]) >= {"swiglu_gate", "qkv_rotary", "decode_attention"}
    assert "Nothing beats the best baseline" in readme and "replaces no" in readme
