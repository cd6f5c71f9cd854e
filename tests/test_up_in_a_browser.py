"""End to end, as a person would: `manage.py up` on SQLite with its own Redis, Debian's chromium.

Starts the embedded product exactly as the README says (with a temporary var/ and ports),
logs in with the demo account it prints, submits a shape-set job, watches iterations arrive
live, drops the connection and reloads mid-run (nothing missing or duplicated), and finally
presses Ctrl-C and checks that no process of `up` is left.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from workers.tests.support import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
STEPS = 12

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def session_members(sid: int) -> set[tuple[int, int, str]]:
    """(pid, start time, name) of every process in session `sid`; the start time tells a
    surviving process from a new one that reused its pid."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        # fields: [0] state, [3] session id, [19] start time. A zombie has already exited; it
        # only waits for its (re)parent to collect its exit status.
        if int(fields[3]) == sid and fields[0] != "Z":
            found.add((int(stat.parent.name), int(fields[19]), name))
    return found


@pytest.fixture
def up(tmp_path):
    web, redis_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "KF_DEMO_PASSWORD")}
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings",
        KF_VAR_DIR=str(tmp_path / "var"),
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",  # nothing listens there: `up` starts Redis
        KF_CHANNELS_PREFIX="kf-e2e",
        KF_STANDIN_ITERATIONS=str(STEPS),
        KF_STANDIN_PAUSE_S="0.5",
        PYTHONUNBUFFERED="1",
    )
    log_path = tmp_path / "up.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--port", str(web)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip

    def output() -> str:
        return log_path.read_text(errors="replace")

    try:
        wait_until(
            lambda: "KernelForge is up" in output() or process.poll() is not None,
            timeout_s=90,
            what="up",
        )
        assert process.poll() is None, output()
        urllib.request.urlopen(f"http://127.0.0.1:{web}/login/", timeout=10).read()
        match = re.search(r"demo login: username (\S+)\s+password (\S+)", output())
        assert match, output()
        yield {
            "url": f"http://localhost:{web}",
            "user": match[1],
            "password": match[2],
            "process": process,
            "output": output,
        }
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def test_it_runs_a_shape_set_job_live_and_stops_cleanly_on_ctrl_c(up, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    from playwright.sync_api import expect, sync_playwright

    base = up["url"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1240, "height": 900})
        page.goto(f"{base}/login/")
        page.fill("#id_username", up["user"])
        page.fill("#id_password", up["password"])
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Jobs")

        # Bad input: a clear message on the form, and no job.
        page.goto(f"{base}/jobs/new/")
        page.fill("#id_title", "bad")
        page.fill("#id_shapes_text", "op,shape,dtype\nconv9d,64x64,fp16")
        page.click("button:has-text('Submit job')")
        expect(page.locator(".errors")).to_contain_text("unknown op 'conv9d'")

        page.fill("#id_title", "Demo: matmul + rmsnorm")
        page.fill(
            "#id_shapes_text", "op,shape,dtype\nmatmul,4096x4096x4096,bf16\nrmsnorm,8192x4096,fp16"
        )
        page.click("button:has-text('Submit job')")
        expect(page.locator("#live")).to_have_text("live", timeout=20_000)

        rows = page.locator("#iterations tbody tr")
        expect(rows.nth(1)).to_be_attached(timeout=30_000)
        seen_first = rows.count()
        expect(rows.nth(seen_first)).to_be_attached(timeout=15_000)  # more arrive without a reload
        expect(page.locator("#job-status")).to_have_text("Running")

        # Drop the connection mid-run: the page reconnects with its last seq and catches up.
        page.evaluate("window.kfDropConnection()")
        expect(page.locator("#live")).to_have_text("live", timeout=15_000)
        # Reload mid-run: the page rebuilds everything from the database.
        page.reload()
        expect(page.locator("#live")).to_have_text("live", timeout=15_000)
        expect(rows.nth(STEPS + 2)).to_be_attached(timeout=30_000)
        shot = tmp_path / "job-live.png"
        page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("KF_SCREENSHOT_DIR"):
            shutil.copy(shot, Path(os.environ["KF_SCREENSHOT_DIR"]) / "job-live.png")

        expect(page.locator("#job-status")).to_have_text("Done", timeout=60_000)
        seqs = [
            int(s)
            for s in page.locator("#iterations tbody tr").evaluate_all(
                "rs => rs.map(r => r.dataset.seq)"
            )
        ]
        assert seqs == list(range(1, 2 * STEPS + 1)), "every event once, in order"
        expect(page.locator('#tasks [data-role="status"]')).to_have_text(["Done", "Done"])
        browser.close()
    # `up` also said how to run the command line, with the demo team's slug (issue 17).
    assert "kforge submit shapes.csv --team demo-team" in up["output"](), up["output"]()

    # Ctrl-C: the terminal sends SIGINT to `up`; everything it started must stop.
    process = up["process"]
    started = session_members(process.pid)
    assert len(started) >= 5, started  # up, redis, the worker and its pool child, daphne
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0, up["output"]()
    assert "all stopped" in up["output"]()
    # A SIGKILLed process can take a moment to go on a loaded machine.
    deadline = time.monotonic() + 15
    while (strays := started & session_members(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not strays, "stray processes left behind: " + "; ".join(
        Path(f"/proc/{pid}/cmdline").read_text(errors="replace").replace("\0", " ")
        for pid, _, _ in strays
    )
