"""Issue 17, item 1, as a user sees it in Debian's chromium: a finished job whose kept kernels are
all slower than PyTorch or timed in the interpreter offers no "Download winners"; the job page
says why, and a bookmarked download link lands there with the same words. A job with a verified
GPU win offers the package, and its README names device, regime and baseline.

The real web server (as `up` starts it) on the test database. With KF_SCREENSHOT_DIR set, it
saves the pages (docs/screenshots/job-no-winner-*.png were made so).
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
from test_up_in_a_browser import CHROMIUM, CHROMIUM_ARGS
from test_upload_limits import server  # noqa: F401  (fixture: the web server on the test db)

import kernels
from webapp.api.tests.conftest import FakeWorker
from webapp.jobs.models import Task
from webapp.jobs.tests.support import shape_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]

NO_WINNER = "No kernel of this job was verified faster than PyTorch on a GPU"


def finished_job(alice, team, title, outcomes):
    """A job whose tasks each kept one kernel with the given (speedup, evaluation kwargs)."""
    problems = [kernels.parse_problem("softmax", "16x512", "fp32"),
                kernels.parse_problem("matmul", "64x48x32", "fp16", "NN")]  # fmt: skip
    job = shape_job(alice, team, problems, title=title)
    tasks = Task.objects.filter(job=job).order_by("id")
    for task, (speedup, how) in zip(tasks, outcomes, strict=True):
        worker = FakeWorker(task.id)
        worker.iterate(verdict="kept", speedup=speedup, **how)
        worker.finish()
    return job


def shot(page, name: str) -> None:
    target = os.environ.get("KF_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=True)


def test_the_job_page_says_why_there_is_nothing_to_download(server, alice, team, tmp_path):  # noqa: F811
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    from playwright.sync_api import expect, sync_playwright

    interpreter = {"kind": "interpreter", "regime": "interpreter", "device": "cpu (interpreter)"}
    losing = finished_job(alice, team, "Slower than PyTorch", [(0.10, {}), (1.8, interpreter)])
    winning = finished_job(alice, team, "One real win", [(1.4, {}), (0.15, {})])
    host, port, _ = server
    base = f"http://{host}:{port}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1366, "height": 900}, accept_downloads=True)
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "pw-for-tests-1")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")

        page.goto(f"{base}/jobs/{losing.id}/")
        expect(page.locator("#no-winner")).to_contain_text(NO_WINNER)
        expect(page.get_by_text("Download winners")).to_have_count(0)
        expect(page.locator("#iteration-count")).to_have_text("2")  # the websocket's backfill
        page.wait_for_timeout(800)  # let plotly draw
        shot(page, "job-no-winner-laptop")

        page.goto(f"{base}/jobs/{losing.id}/package.zip")  # an old link, or a bookmark
        expect(page.locator(".messages")).to_contain_text(NO_WINNER)
        assert page.url.rstrip("/").endswith(str(losing.id))

        page.goto(f"{base}/jobs/{winning.id}/")
        with page.expect_download() as download:
            page.get_by_text("Download winners").click()
        data = Path(download.value.path()).read_bytes()
        browser.close()
    archive = zipfile.ZipFile(io.BytesIO(data))
    readme = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("README.md"))
    kernels_in = [n for n in archive.namelist() if "/kernels/k_" in n]
    assert [Path(n).name for n in kernels_in] == ["k_softmax_16x512_fp32.py"]
    row = next(line for line in readme.splitlines() if "softmax/16x512/fp32 | 1.40x" in line)
    assert "NVIDIA H100 80GB HBM3" in row and "offline" in row and "torch" in row
    assert "matmul/64x48x32/fp16/NN: best kept kernel 0.15x vs torch" in readme
