"""What a new user without a GPU meets (issue 17), in Debian's chromium on daphne (the
production ASGI server, websockets included) over the test database: interpreter results,
empty and ended jobs, the shape form, the example picker, the token page, error pages.

With KF_SCREENSHOT_DIR set, each page is saved there (docs/screenshots/README.md lists them).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from test_up_in_a_browser import CHROMIUM, CHROMIUM_ARGS

import kernels
from kforge.tests.test_end_to_end import api_server  # noqa: F401  (fixture: daphne, test DB)
from webapp.api.models import ApiToken
from webapp.api.tests.conftest import FakeWorker
from webapp.dashboard.demo import seed_job
from webapp.dashboard.tests.cpu_run import seed_cpu_run
from webapp.jobs.models import Iteration, Job
from webapp.jobs.tests.support import shape_job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
PASSWORD = "pw-for-tests-1"  # conftest.make_user's


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls (and
    # the database flush after each test) are still plain synchronous code, so Django may run
    # them (its documented switch for this case).
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as pw:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, api_server, alice, team):  # noqa: F811
    """alice, logged in through the login form; every response over 400 is recorded."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport=LAPTOP, base_url=api_server)
    tab = context.new_page()
    tab.failed = []
    tab.on(
        "response", lambda r: tab.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None
    )
    tab.goto("/login/")
    tab.fill("#id_username", alice.username)
    tab.fill("#id_password", PASSWORD)
    tab.click("button[type=submit]")
    expect(tab.locator("h1")).to_have_text("Jobs")
    yield tab
    context.close()


def shot(page, name: str) -> None:
    """Saved where KF_SCREENSHOT_DIR says (docs/screenshots/ for the committed ones)."""
    folder = os.environ.get("KF_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def chart_ticks(page, axis: str) -> list[str]:
    return page.locator(f"#speedup-chart .{axis}tick text").all_text_contents()


def test_a_cpu_run_reads_as_interpreter_results_everywhere(page, alice, team):
    from playwright.sync_api import expect

    cpu = seed_cpu_run(user=alice, team=team)
    seed_job(user=alice, team=team, title="Norms on H100 (demo data)", steps=6,
             shapes=[("rmsnorm", "2048x4096", "fp16")])  # fmt: skip

    page.goto("/")
    row = page.locator("table.jobs tr", has_text="CPU run (interpreter)")
    expect(row.locator("td.num").last).to_have_text("interp.")
    expect(page.locator("table.jobs tr", has_text="Norms on H100").locator("td.num").last)\
        .to_have_text(re.compile(r"^\d+\.\d\d×$"))  # fmt: skip
    assert "0 minutes ago" not in page.locator("table.jobs").inner_text()
    shot(page, "new-user-jobs")

    page.goto(f"/jobs/{cpu.job.id}/")
    expect(page.locator("#iterations tbody tr")).to_have_count(5)
    expect(page.locator("#job-status")).to_have_text("Done")
    expect(page.locator("#live")).to_have_text("finished")  # no "live" on an ended job
    dot = page.evaluate("getComputedStyle(document.getElementById('live'), '::before').display")
    assert dot == "none"
    expect(page.locator("#hypothesis-label")).to_have_text("Last hypothesis:")
    expect(page.locator("label[for=gpu-meter]")).to_have_text("CPU time")
    expect(page.locator("#iterations tbody td.num", has_text="×")).to_have_count(0)
    expect(page.locator("#speedup-chart .ytitle")).to_contain_text("CPU interpreter")
    assert not [t for t in chart_ticks(page, "x") if "2000" in t]
    page.wait_for_timeout(300)
    shot(page, "new-user-cpu-job")
    page.set_viewport_size(PHONE)
    page.reload()  # the page picks its chart layout (legend or key) at load
    expect(page.locator("#iterations tbody tr")).to_have_count(5)
    page.wait_for_timeout(800)
    shot(page, "new-user-cpu-job-phone")
    page.set_viewport_size(LAPTOP)

    baseline = Iteration.objects.get(job=cpu.job, task__problem__op="matmul", index=0)
    page.goto(f"/jobs/{cpu.job.id}/iterations/{baseline.seq}/")
    expect(page.locator("table.diff.source tr").first).to_be_visible()
    expect(page.locator("table.diff tr.d-added")).to_have_count(0)
    expect(page.locator(".status-block .big")).to_have_text("interp.")
    expect(page.locator(".notice")).to_contain_text("Timed in Triton's CPU interpreter")
    assert not re.search(r"\d\.\d\d×", page.locator("main").inner_text())
    shot(page, "new-user-cpu-iteration")
    assert not page.failed, page.failed  # no 404s (the favicon included)


def test_tiny_interpreter_ratios_get_plain_axis_numbers(page, alice, team):
    from playwright.sync_api import expect

    job = shape_job(
        alice, team, [kernels.parse_problem("rmsnorm", "64x1024", "fp32")], title="Tiny ratios",
        queue="cpu",
    )  # fmt: skip
    worker = FakeWorker(job.tasks.get().id)
    for ratio in (0.00031, 0.00052, 0.00097):
        worker.iterate(verdict="kept", speedup=ratio, kind="interpreter", regime="interpreter")
    page.goto(f"/jobs/{job.id}/")
    expect(page.locator("#speedup-chart .scatterlayer .point")).to_have_count(3)
    ticks = chart_ticks(page, "y")
    assert ticks and all(re.fullmatch(r"0(\.\d+)?", t) for t in ticks), ticks  # not "500μ"


def test_a_job_with_no_attempt_yet_and_one_that_ended_without_any(page, alice, team):
    from playwright.sync_api import expect

    cpu = seed_cpu_run(user=alice, team=team)
    page.goto(f"/jobs/{cpu.waiting.id}/")
    expect(page.locator("#live")).to_have_text("live")
    chart = page.locator("#speedup-chart")
    expect(chart.locator(".annotation-text")).to_have_text(
        "No attempts yet: each one appears here as the worker reports it."
    )
    assert chart_ticks(page, "x") == [] and chart_ticks(page, "y") == []  # no Jan-Nov 2000, 0-4
    expect(page.locator("#no-iterations")).to_contain_text("Nothing yet")
    shot(page, "new-user-job-waiting")

    page.goto(f"/jobs/{cpu.ended_empty.id}/")
    expect(page.locator("#job-status")).to_have_text("Cancelled")
    expect(chart.locator(".annotation-text")).to_have_text(
        "No attempts: the job ended before the worker reported one."
    )
    expect(page.locator("#no-iterations")).to_have_text(
        "No iterations: the job ended before the worker reported one."
    )
    expect(page.locator("#live")).to_have_text("finished")
    shot(page, "new-user-job-ended")


def test_the_shape_form_explains_itself_and_offers_the_example_models(page, alice, team):
    from playwright.sync_api import expect

    page.goto("/jobs/new/")
    page.locator("details.ops-help summary").click()
    table = page.locator("details.ops-help table")
    expect(table).to_contain_text("matmul")
    expect(table).to_contain_text("MxNxK")
    expect(page.locator("details.ops-help")).to_contain_text("bfloat16 = bf16")
    page.fill("#id_title", "bad")
    page.fill(
        "#id_shapes_text", 'op,shape,dtype\nmatmul,"4096x4096x4096,bf16\nrmsnorm,8192x4096,int8'
    )
    page.click("button:has-text('Submit job')")
    expect(page.locator(".errors")).to_contain_text(
        'Row 2: a quote (") opens in this row and is not closed on its line.'
    )
    page.fill(
        "#id_shapes_text", "op,shape,dtype,layout\nrmsnorm,8192x4096,int8,\nsum,64x64,fp16,NN"
    )
    page.click("button:has-text('Submit job')")
    errors = page.locator(".errors").inner_text()
    assert "rmsnorm supports dtypes fp16, bf16, fp32, not 'int8'" in errors and "[" not in errors
    assert "sum takes no layout, not 'NN'" in errors
    page.locator("details.ops-help summary").click()
    shot(page, "new-user-shape-form")

    page.fill("#id_title", "torch names")
    page.fill("#id_shapes_text", "op,shape,dtype\nsoftmax,64x512,float32\nrmsnorm,64x512,bfloat16")
    page.click("button:has-text('Submit job')")
    expect(page.locator("#tasks")).to_contain_text("softmax/64x512/fp32")
    expect(page.locator("#tasks")).to_contain_text("rmsnorm/64x512/bf16")

    # The example picker examples/models/README.md promises: no file to upload.
    page.goto("/jobs/new/")
    page.check("input[name=kind][value=model]")
    options = page.locator("#id_example option").all_text_contents()
    assert {"llama block", "gpt block", "mlp"} <= set(options), options
    page.select_option("#id_example", "mlp")
    page.fill("#id_title", "Example: mlp")
    shot(page, "new-user-example-picker")
    page.click("button:has-text('Submit job')")
    expect(page.locator("#model-run")).to_contain_text("example “mlp”")
    assert Job.objects.get(title="Example: mlp").model_run.example == "mlp"


def test_reloading_the_token_page_creates_no_second_token(page):
    from playwright.sync_api import expect

    page.goto("/settings/tokens/")
    page.fill("#id_name", "laptop")
    page.click("button:has-text('Create token')")
    token = page.locator("input.token-once").input_value()
    assert token.startswith("kf_")
    expect(page.locator("main")).to_contain_text("--team alices-team")
    shot(page, "new-user-token-created")
    page.reload()
    expect(page.locator("input.token-once")).to_have_count(0)  # shown once
    expect(page.locator("main")).to_contain_text("laptop")
    assert ApiToken.objects.count() == 1


def test_error_pages_offer_a_way_back(page):
    from playwright.sync_api import expect

    response = page.goto(f"/jobs/{uuid.uuid4()}/")
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("Nothing here")
    shot(page, "new-user-not-found")
    page.click(".ways-back >> text=Jobs")
    expect(page.locator("h1")).to_have_text("Jobs")
    icon = page.goto("/favicon.ico")
    assert icon.status == 200 and icon.url.endswith("/static/favicon.svg")
