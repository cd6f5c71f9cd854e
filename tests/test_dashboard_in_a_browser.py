"""The dashboard end to end in Debian's chromium, on `manage.py up` (the fixture of
test_up_in_a_browser.py): submit -> live updates (also at 20 events per second) -> iteration
diff -> leaderboard -> compare -> download, and the downloaded package installs in a fresh venv
and its tests pass. With KF_SCREENSHOT_DIR set, it saves each page at laptop and phone width
(that is how docs/screenshots/ is made).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_up_in_a_browser import CHROMIUM, CHROMIUM_ARGS, ROOT, up  # noqa: F401  (fixture)

from webapp.dashboard.tests.venv_support import install_and_test

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
STREAM = 200  # events, at 20 per second


def up_env(process: subprocess.Popen) -> dict[str, str]:
    """The environment `up` runs with (its database, Redis and media folder)."""
    raw = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def manage(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def read_json_line(process: subprocess.Popen, key: str) -> dict:
    for line in process.stdout:
        if line.startswith("{") and key in line:
            return json.loads(line)
    raise AssertionError(f"no {key} from {process.args}")


class Shots:
    def __init__(self, browser, base: str, state: dict, tmp: Path) -> None:
        self.dir = (
            Path(os.environ["KF_SCREENSHOT_DIR"]) if os.environ.get("KF_SCREENSHOT_DIR") else None
        )
        self.browser, self.base, self.state, self.tmp = browser, base, state, tmp

    def take(self, page, name: str, path: str) -> None:
        """Laptop shot of the current page, and the same URL on a phone."""
        page.screenshot(path=str(self.tmp / f"{name}-laptop.png"), full_page=True)
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / f"{name}-laptop.png").write_bytes(
            (self.tmp / f"{name}-laptop.png").read_bytes()
        )
        phone = self.browser.new_page(viewport=PHONE, storage_state=self.state, is_mobile=True)
        phone.goto(self.base + path)
        phone.wait_for_load_state("networkidle")
        phone.wait_for_timeout(800)  # let plotly lay out at this width
        phone.screenshot(path=str(self.dir / f"{name}-phone.png"), full_page=True)
        phone.close()


def test_it_goes_from_submit_to_a_pip_installed_download(up, tmp_path):  # noqa: F811
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    from playwright.sync_api import expect, sync_playwright

    base, env = up["url"], up_env(up["process"])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=LAPTOP, accept_downloads=True)
        page = context.new_page()
        page.goto(f"{base}/login/")
        page.fill("#id_username", up["user"])
        page.fill("#id_password", up["password"])
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Jobs")
        state = context.storage_state()
        shots = Shots(browser, base, state, tmp_path)

        # Submit: the stand-in worker's events arrive live, on the table and on the chart.
        page.goto(f"{base}/jobs/new/")
        page.fill("#id_title", "Browser: rmsnorm")
        page.fill("#id_shapes_text", "op,shape,dtype\nrmsnorm,2048x4096,fp16")
        page.click("button:has-text('Submit job')")
        expect(page.locator("#live")).to_have_text("live", timeout=20_000)
        expect(page.locator("#iterations tbody tr").nth(2)).to_be_attached(timeout=30_000)
        expect(page.locator("#speedup-chart .scatterlayer .point").first).to_be_attached()
        expect(page.locator("#current-hypothesis")).to_contain_text("[stand-in]")

        # Cancel: the worker notices at its next step, records the stop, the page says so.
        page.click("button:has-text('Cancel job')")
        expect(page.locator(".messages")).to_contain_text("Cancelling")
        expect(page.locator("#job-status")).to_have_text("Cancelled", timeout=30_000)
        expect(page.locator('#tasks [data-role="note"]')).to_have_text("cancelled")
        # The cancel reloaded the page, whose rows come from the websocket's backfill: counted
        # once it has drawn them (counted at once, a loaded machine read 0).
        expect(page.locator("#iterations tbody tr").first).to_be_attached(timeout=20_000)
        page.wait_for_timeout(500)
        kept_rows = page.locator("#iterations tbody tr").count()
        assert 0 < kept_rows < 12, "the run stopped early and its iterations stay"

        # Live at 20 events per second: every event drawn once, in order, and promptly.
        streamer = manage(env, "demo_results", "--username", up["user"], "--team", "demo-team",
                          "--stream", str(STREAM), "--rate", "20", "--wait", "4")  # fmt: skip
        stream_job = read_json_line(streamer, "stream_job")["stream_job"]
        page.goto(f"{base}/jobs/{stream_job}/")
        page.evaluate(
            "window.kfLong = []; new PerformanceObserver(l => l.getEntries().forEach("
            "e => window.kfLong.push(e.duration))).observe({entryTypes: ['longtask']})"
        )
        expect(page.locator("#live")).to_have_text("live", timeout=15_000)
        expect(page.locator("#iterations tbody tr").nth(STREAM // 2)).to_be_attached(timeout=30_000)
        shots.take(page, "job-live", f"/jobs/{stream_job}/")
        done = read_json_line(streamer, "stream_done")
        expect(page.locator("#iterations tbody tr").nth(STREAM - 1)).to_be_attached(timeout=10_000)
        lag_s = time.time() - done["at"]
        seqs = page.locator("#iterations tbody tr").evaluate_all(
            "rs => rs.map(r => +r.dataset.seq)"
        )
        assert seqs == list(range(1, STREAM + 1)), "every event once, in order"
        points = page.evaluate(
            "document.getElementById('speedup-chart').data.slice(0, 5)"
            ".reduce((n, t) => n + t.x.length, 0)"
        )
        assert points == STREAM
        long_tasks = page.evaluate("window.kfLong")
        assert lag_s < 5.0, f"the page fell {lag_s:.1f}s behind the stream"
        assert max(long_tasks, default=0) < 500, long_tasks
        streamer.wait(timeout=30)

        # Realistic finished runs (two teams), recorded through the worker's services.
        seeder = manage(env, "demo_results", "--username", up["user"], "--team", "demo-team")
        ours, theirs = read_json_line(seeder, "jobs")["jobs"]
        assert seeder.wait(timeout=120) == 0

        page.goto(f"{base}/")
        expect(page.locator("table.jobs")).to_contain_text("Norms on H100")
        shots.take(page, "jobs", "/")

        page.goto(f"{base}/jobs/{ours}/")
        expect(page.locator("#job-status")).to_have_text("Done")
        expect(page.locator("#iterations tbody tr").nth(19)).to_be_attached(timeout=15_000)
        # Each task's search: its outcome line, and what it saw of each family (issue 27).
        search = page.locator('#tasks [data-role="search"]').first
        expect(search.locator('[data-role="outcome"]')).to_contain_text("Winner: rmsnorm_")
        search.locator("details.families summary").click()
        expect(search).to_contain_text("fully verified")
        expect(search.locator("table.families")).to_contain_text("rmsnorm_")
        page.wait_for_timeout(500)
        shots.take(page, "job-done", f"/jobs/{ours}/")

        # Iteration diff: keyboard to the link of step #4 (kept), then the page itself.
        page.locator('#iterations a[href$="/iterations/4/"]').focus()
        page.keyboard.press("Enter")
        expect(page.locator("h1")).to_contain_text("Iteration #4")
        expect(page.locator("table.diff tr.d-changed").first).to_be_visible()
        expect(page.locator(".stages li")).to_have_count(4)
        expect(page.locator("table.metrics")).to_contain_text("Achieved occupancy")
        expect(page.locator("#roofline .scatterlayer .point")).to_have_count(2)
        shots.take(page, "iteration", f"/jobs/{ours}/iterations/4/")
        with page.expect_download() as report:
            page.click("text=Download .ncu-rep")
        assert report.value.suggested_filename.endswith(".ncu-rep")
        assert Path(report.value.path()).stat().st_size > 1000

        page.goto(f"{base}/leaderboards/")
        expect(page.locator(".board")).to_have_count(2)
        expect(page.locator(".board").first).to_contain_text("Vector Crew")
        shots.take(page, "leaderboard", "/leaderboards/")
        page.click("text=Compare #1 with #2 >> nth=0")
        expect(page.locator("h2", has_text="Metric deltas")).to_be_visible()
        shots.take(page, "compare", page.url.removeprefix(base))
        page.goto(f"{base}/leaderboards/teams/vector-crew/")
        expect(page.locator("h1")).to_have_text("Vector Crew")
        shots.take(page, "team", "/leaderboards/teams/vector-crew/")

        # Download the job's winners and install them as a user would.
        page.goto(f"{base}/jobs/{ours}/")
        with page.expect_download() as download:
            page.click("text=Download winners (pip package)")
        zip_path = tmp_path / download.value.suggested_filename
        download.value.save_as(zip_path)
        browser.close()

    run = install_and_test(zip_path, "kf_norms_on_h100_demo_data", tmp_path)
    assert run.returncode == 0, run.output
    assert " passed" in run.output and "failed" not in run.output, run.output
