"""A model job's kernels ship only when the model with them beat its best baseline end to end
(else there is no package, and the job page says why), and its README shows every baseline
(eager, CUDA graphs, torch.compile) with its compile time next to the ways with the kernels."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.urls import reverse

from webapp.api import services as api_services
from webapp.api.tests.conftest import client_for
from webapp.dashboard.demo import seed_job
from webapp.downloads.builder import build_package
from webapp.jobs.models import Job, ModelRun
from webapp.jobs.selectors import job_winners, no_winner_message, package_winners

pytestmark = pytest.mark.django_db

RECORDED = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
FUSIONS = [
    ("swiglu_gate", "8x64x32", "fp16"),
    ("qkv_rotary", "8x2x2x16x32", "fp16"),
    ("decode_attention", "1x2x4x24x16", "fp16"),
]


def _model_job(alice, team, end_to_end) -> Job:
    job = seed_job(user=alice, team=team, title="A model", shapes=FUSIONS, seed=1,
                   reports=False).job  # fmt: skip
    Job.objects.filter(id=job.id).update(kind=Job.Kind.MODEL)
    job.refresh_from_db()
    ModelRun.objects.create(job=job, queue="gpu.h100", status="done", end_to_end=end_to_end)
    return job


def _package(job):
    problems = [t.problem for t in job.tasks.select_related("problem").order_by("id")]
    package = build_package(job=job, winners=package_winners(job_id=job.id), problems=problems)
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
    table, readme = _package(_model_job(alice, team, e2e))
    assert {e["op"] for e in table["entries"]} == {op for op, *_ in FUSIONS}
    assert f"{e2e['speedup']:.3f}x faster than the best baseline" in readme
    assert "Measured inside the model's own process, with its own code" in readme
    for name in ("eager", "cuda_graphs", "compile", "compile_max_autotune", "compile_cuda_graphs"):
        variant = e2e["variants"][name]
        assert f"| {variant['label']} | PyTorch only | {variant['offline']['median_us']:.1f} |" in (
            readme
        )
        assert f"{variant['compile_s']:.1f}" in readme


@pytest.mark.parametrize("end_to_end", ["unbeaten", "not checked yet"])
def test_a_model_nothing_beats_ships_nothing_and_its_page_says_why(alice, team, client, end_to_end):
    e2e = _recorded_end_to_end() | {
        "faster": False,
        "speedup": 0.98,
        "speedup_ci": [0.96, 1.01],
        "message": "Nothing beats the best baseline.",
    }
    job = _model_job(alice, team, e2e if end_to_end == "unbeaten" else None)
    assert job_winners(job_id=job.id), "its kernels are verified wins on their own shapes"
    assert package_winners(job_id=job.id) == []
    with pytest.raises(ValueError):
        _package(job)
    why = no_winner_message(job_id=job.id)
    assert ("Nothing beats the best baseline" in why) == (end_to_end == "unbeaten")
    assert "nothing to download" in why

    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "Download winners" not in page and 'id="no-winner"' in page
    response = client.get(reverse("dashboard:job_package", args=[job.id]))
    assert response.status_code == 302, "no zip: back to the job page, which says why"
    seq = job_winners(job_id=job.id)[0].iteration.seq
    iteration_page = client.get(reverse("dashboard:iteration", args=[job.id, seq]))
    assert "Download package" not in iteration_page.content.decode()
    response = client.get(reverse("dashboard:problem_package", args=[job.id, seq]))
    assert response.status_code == 302
    api = client_for(api_services.token_create(user=alice, name="t")[1])
    error = api.get(f"/api/v1/jobs/{job.id}/download").json()["error"]
    assert error["code"] == "no_winners" and error["message"] == why


def test_a_kernel_the_model_ran_slower_with_ships_neither_in_the_package_nor_alone(
    alice, team, client
):
    """The model beat its best baseline, but its check left one kernel out (the model was
    slower with it than without): the package holds the others, that problem's own download
    is refused, and the page shows each kernel's effect."""
    e2e = _recorded_end_to_end()
    job = _model_job(alice, team, e2e)
    job_winners_keys = [w.task.problem.key for w in job_winners(job_id=job.id)]
    left = job_winners_keys[0]
    ablation = [
        {"key": k, "with_us": 100.0, "without_us": 96.0 if k == left else 104.0,
         "effect": 0.96 if k == left else 1.04,
         "effect_ci": [0.95, 0.97] if k == left else [1.03, 1.05], "kept": k != left}
        for k in job_winners_keys
    ]  # fmt: skip
    winners = [{"key": k, "kernel_speedup": 1.2} for k in job_winners_keys]
    ModelRun.objects.filter(job=job).update(
        end_to_end=e2e | {"ablation": ablation, "left_out": [left], "winners": winners}
    )
    shipped = [w.task.problem.key for w in package_winners(job_id=job.id)]
    assert shipped == job_winners_keys[1:]
    table, _readme = _package(job)
    assert len(table["entries"]) == len(shipped)

    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "Download winners" in page and 'id="kernel-effects"' in page
    assert "the model is slower with it" in page
    assert f"<code>{left}</code> (1.20x, left out: the model was slower with it)" in page
    assert f"<code>{job_winners_keys[1]}</code> (1.20x)" in page
    seq = next(w for w in job_winners(job_id=job.id) if w.task.problem.key == left).iteration.seq
    assert (
        "Download package"
        not in client.get(reverse("dashboard:iteration", args=[job.id, seq])).content.decode()
    )
    response = client.get(reverse("dashboard:problem_package", args=[job.id, seq]))
    assert response.status_code == 302


def _qwen2_end_to_end(package_ci: list[float]) -> dict:
    """Qwen2's recorded check (H200): three kernels and the GQA rewrite (SDPA grouping the
    k/v heads the model repeated), with the kernels-alone run a check now adds."""
    recorded = json.loads((RECORDED / "model_qwen2_block_h200_v6_rewrites.json").read_text())
    e2e = recorded["result"]["end_to_end"]
    assert [w["where"] for w in e2e["rewrites"]] == [["self_attn"]] and e2e["faster"]
    package = {"way": e2e["best_ours"], "ok": True, "us": 1330.4, "baseline_us": 1401.6,
               "speedup": 1401.6 / 1330.4, "speedup_ci": package_ci, "hits": {}}  # fmt: skip
    return e2e | {"package": package, "package_faster": package_ci[0] > 1.0}


def test_a_change_to_the_users_code_is_shown_beside_what_the_package_alone_gives(
    alice, team, client
):
    e2e = _qwen2_end_to_end([1.050, 1.057])
    job = _model_job(alice, team, e2e)
    assert package_winners(job_id=job.id), "the kernels alone beat the best baseline"
    _table, readme = _package(job)
    assert f"{e2e['speedup']:.3f}x faster than the best baseline** with the change" in readme
    assert "The package alone (the kernels, no change to your code): 1.054x" in readme
    assert "## Change in your code" in readme
    assert "- `self_attn`: the copies of k and v repeated 7x for SDPA" in readme
    assert "its effect on the model 1.008x" in readme

    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert 'id="rewrites"' in page and "<code>self_attn</code>" in page
    assert "with the change to your code below" in page
    assert "The package alone</strong>" in page and "1.054x" in page
    assert "a change to your code (below)" in page, "its row among the kernels' effects"
    assert "Download winners" in page


def test_a_model_faster_only_with_the_change_to_its_code_ships_no_kernel(alice, team, client):
    e2e = _qwen2_end_to_end([0.995, 1.012])  # the kernels alone: within noise of the baseline
    job = _model_job(alice, team, e2e)
    assert job_winners(job_id=job.id) and package_winners(job_id=job.id) == []
    with pytest.raises(ValueError):
        _package(job)

    client.force_login(alice)
    page = client.get(reverse("jobs:detail", args=[job.id])).content.decode()
    assert "not verified faster than the best baseline, so there is no package to" in page
    assert 'id="rewrites"' in page and "Download winners" not in page
