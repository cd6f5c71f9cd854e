"""The dashboard pages with a realistic history: what they show, who may see it, query counts."""

from __future__ import annotations

import pytest
from django.urls import reverse

from webapp.api.tests.conftest import FakeWorker
from webapp.dashboard.demo import seed_job
from webapp.jobs.models import Iteration, Job
from webapp.jobs.tests.support import shape_job

pytestmark = pytest.mark.django_db


def kept_best(job: Job) -> Iteration:
    """The best kept kernel by the one headline: its speedup over the fastest baseline."""
    return Iteration.objects.filter(job=job, verdict="kept").order_by("-fastest_speedup").first()


def test_it_lists_jobs_with_best_speedup_and_gpu_and_filters_them(alice_client, runs):
    ours, theirs = runs
    page = alice_client.get("/").content.decode()
    assert "Norms on H100" in page and "Club norms" in page and "gpu.h100" in page
    assert f"{kept_best(ours).fastest_speedup:.2f}×" in page
    only_club = alice_client.get("/?team=kernel-club").content.decode()
    assert "Club norms" in only_club and "Norms on H100" not in only_club
    assert "No job matches" in alice_client.get("/?op=attention").content.decode()
    assert "Club norms" in alice_client.get("/?status=done&op=softmax").content.decode()


def test_the_jobs_list_pages_in_a_fixed_number_of_queries(
    alice,
    team,
    alice_client,
    settings,
    django_assert_max_num_queries,
    django_capture_on_commit_callbacks,
):
    import kernels

    settings.KF_TEAM_MAX_ACTIVE_JOBS = 30

    problem = [kernels.parse_problem("softmax", "64x64", "fp32")]
    with django_capture_on_commit_callbacks(execute=False):
        for n in range(30):
            shape_job(user=alice, team=team, title=f"job {n}", problems=problem, queue="cpu")
    with django_assert_max_num_queries(8):
        first = alice_client.get("/").content.decode()
    assert "Page 1 of 2" in first and "job 29" in first and "job 0<" not in first
    assert "job 0<" in alice_client.get("/?page=2").content.decode()


def test_the_job_page_shows_the_chart_budget_hypothesis_and_winners_download(
    alice_client, runs, django_assert_max_num_queries
):
    job, _ = runs
    with django_assert_max_num_queries(14):
        page = alice_client.get(f"/jobs/{job.id}/").content.decode()
    assert 'id="speedup-chart"' in page and "vendor/plotly.min.js" in page
    assert "Two warps per row group" in page  # the latest hypothesis
    assert 'id="gpu-meter"' in page and 'id="llm-meter"' in page
    assert reverse("dashboard:job_package", args=[job.id]) in page


def test_the_live_events_carry_what_the_chart_and_meters_need(alice_client, runs):
    job, _ = runs
    events = alice_client.get(f"/jobs/{job.id}/events/?after=0").json()["iterations"]
    assert len(events) == 20
    assert {"at", "gpu_s", "llm_cost_usd", "best_speedup", "verdict"} <= set(events[0])


def test_the_iteration_page_shows_diff_verdict_timings_metrics_roofline_and_log(
    alice_client, runs, django_assert_max_num_queries
):
    job, _ = runs
    it = Iteration.objects.get(job=job, seq=4)  # kept, parent is step 1
    with django_assert_max_num_queries(8):
        page = alice_client.get(f"/jobs/{job.id}/iterations/{it.seq}/").content.decode()
    assert it.hypothesis in page
    assert "vs parent" in page and 'class="d-changed"' in page
    for stage in ("smoke", "shape_sweep", "adversarial", "determinism"):
        assert stage in page
    assert "compile" in page and "torch" in page and "± " in page  # baselines with spread
    assert "Achieved occupancy" in page and "delta" in page
    assert 'id="roofline"' in page and "roofline-data" in page
    assert "Download .ncu-rep" in page


def test_a_failed_iteration_shows_its_failing_stage_and_compile_log(alice_client, runs):
    job, _ = runs
    incorrect = Iteration.objects.get(job=job, verdict="incorrect", task__problem__op="rmsnorm")
    page = alice_client.get(f"/jobs/{job.id}/iterations/{incorrect.seq}/").content.decode()
    assert "112 of 4369 elements off" in page and "Not timed" in page
    failed = Iteration.objects.get(job=job, verdict="compile_failed", task__problem__op="rmsnorm")
    page = alice_client.get(f"/jobs/{job.id}/iterations/{failed.seq}/").content.decode()
    assert "out of resource: shared memory" in page


def test_candidate_code_is_escaped_on_the_iteration_page(alice_client, alice, team, media):
    job = seed_job(
        user=alice, team=team, title="x", shapes=[("softmax", "64x64", "fp32")], steps=1
    ).job
    Iteration.objects.filter(job=job).update(source='s = "<img src=x onerror=alert(1)>"\n')
    page = alice_client.get(f"/jobs/{job.id}/iterations/1/").content.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_the_iteration_page_says_which_sandbox_layers_the_host_could_not_apply(
    alice_client, alice, team
):
    job = seed_job(
        user=alice, team=team, title="x", shapes=[("softmax", "64x64", "fp32")], steps=1
    ).job
    it = Iteration.objects.get(job=job, seq=1)
    page = alice_client.get(f"/jobs/{job.id}/iterations/1/").content.decode()
    assert "Sandbox layers" not in page
    it.evaluation["isolation"] = {
        "pid": "none (unshare failed)",
        "missing": ["pid: none (unshare failed)"],
    }
    it.save(update_fields=["evaluation"])
    page = alice_client.get(f"/jobs/{job.id}/iterations/1/").content.decode()
    assert "Sandbox layers this host could not apply: pid: none (unshare failed)" in page


def test_it_serves_the_ncu_report_only_from_the_media_folder(alice_client, runs, media):
    job, _ = runs
    response = alice_client.get(f"/jobs/{job.id}/iterations/2/ncu-rep/")
    assert response.status_code == 200
    assert (
        b"".join(response.streaming_content)[:4]
        == (media / f"ncu/{job.id}/2.ncu-rep").read_bytes()[:4]
    )
    assert 'filename="kf-' in response["Content-Disposition"]
    it = Iteration.objects.get(job=job, seq=2)
    it.profile["report_path"] = "../../../../etc/passwd"
    it.save(update_fields=["profile"])
    assert alice_client.get(f"/jobs/{job.id}/iterations/2/ncu-rep/").status_code == 404


def test_outsiders_get_404_for_every_page_of_a_job(client, bob, runs):
    job, _ = runs
    client.force_login(bob)
    for url in (
        f"/jobs/{job.id}/iterations/2/",
        f"/jobs/{job.id}/iterations/2/ncu-rep/",
        f"/jobs/{job.id}/package.zip",
        f"/jobs/{job.id}/iterations/4/package.zip",
        "/leaderboards/teams/kernel-club/",
    ):
        assert client.get(url).status_code == 404, url
    assert "Club norms" not in client.get("/leaderboards/").content.decode()
    assert (
        "Pick two iterations" in client.get(f"/compare/?a={job.id}/1&b={job.id}/2").content.decode()
    )


def test_the_leaderboard_ranks_teams_per_problem_and_gpu(
    alice_client, runs, django_assert_max_num_queries
):
    ours, theirs = runs
    with django_assert_max_num_queries(8):
        page = alice_client.get("/leaderboards/").content.decode()
    assert "rmsnorm/2048x4096/fp16" in page and "softmax/1024x8192/fp32" in page
    assert "NVIDIA H100 80GB HBM3" in page and "% of roof" in page
    for job in (ours, theirs):
        assert f"{kept_best(job).fastest_speedup:.2f}×" in page or job.title in page
    assert "compile" in page  # speedup vs each baseline
    assert "Compare #1 with #2" in page
    filtered = alice_client.get("/leaderboards/?op=softmax").content.decode()
    assert "softmax/1024x8192/fp32" in filtered and "rmsnorm/2048x4096/fp16" not in filtered


def test_interpreter_and_implausible_results_never_appear_on_a_leaderboard(
    alice_client, alice, team, django_capture_on_commit_callbacks
):
    import kernels

    problem = [kernels.parse_problem("sum", "64x64", "fp32")]
    with django_capture_on_commit_callbacks(execute=False):
        job = shape_job(user=alice, team=team, title="cpu run", problems=problem, queue="cpu")
    worker = FakeWorker(job.tasks.get().id)
    worker.iterate(verdict="kept", speedup=3.0, kind="interpreter", regime="interpreter",
                   device="cpu (triton interpreter)")  # fmt: skip
    worker.iterate(verdict="kept", speedup=50.0, implausible=True)
    page = alice_client.get("/leaderboards/").content.decode()
    assert "sum/64x64/fp32" not in page and "No verified GPU result yet" in page
    worker.iterate(verdict="kept", speedup=1.3)
    assert "sum/64x64/fp32" in alice_client.get("/leaderboards/").content.decode()


def test_the_team_page_lists_the_problems_it_wins(
    alice_client, runs, django_assert_max_num_queries
):
    ours, theirs = runs
    slug = theirs.team.slug
    with django_assert_max_num_queries(10):
        page = alice_client.get(f"/leaderboards/teams/{slug}/").content.decode()
    wins = [
        key
        for key in ("rmsnorm/2048x4096/fp16", "softmax/1024x8192/fp32")
        if kept_best_for(theirs, key) > kept_best_for(ours, key)
    ]
    assert f'<span class="big">{len(wins)}</span>' in page
    for key in wins:
        assert key in page


def kept_best_for(job: Job, key: str) -> float:
    return (
        Iteration.objects.filter(job=job, verdict="kept", task__problem__key=key)
        .order_by("-fastest_speedup")
        .values_list("fastest_speedup", flat=True)
        .first()
    )


def test_the_compare_page_diffs_two_teams_winners_with_metric_deltas(
    alice_client, runs, django_assert_max_num_queries
):
    ours, theirs = runs
    a, b = kept_best(ours), kept_best(theirs)
    with django_assert_max_num_queries(8):
        page = alice_client.get(f"/compare/?a={ours.id}/{a.seq}&b={theirs.id}/{b.seq}")
    page = page.content.decode()
    assert "Metric deltas (B vs A)" in page and "Kernel time (ns)" in page
    assert "Club norms" in page and "Norms on H100" in page and "d-" in page


def test_a_single_kept_kernel_downloads_as_its_own_package(alice_client, runs):
    import io
    import zipfile

    job, _ = runs
    it = kept_best(job)
    response = alice_client.get(f"/jobs/{job.id}/iterations/{it.seq}/package.zip")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(response.content)).namelist()
    assert sum(n.endswith(".py") and "/kernels/k_" in n for n in names) == 1
    reverted = Iteration.objects.filter(job=job, verdict="reverted").first()
    refused = alice_client.get(f"/jobs/{job.id}/iterations/{reverted.seq}/package.zip")
    assert refused.status_code == 302 and refused["Content-Type"] != "application/zip"
