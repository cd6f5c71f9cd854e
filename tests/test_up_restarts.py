"""`manage.py up` when a part of it dies, when it is stopped, and when it starts again (issue 28,
items 3 and 4), as a person runs it: SQLite and a private Redis in a temporary var/.

1. The web server is killed while a job runs: `up` starts it again, the workers go on and the
   job finishes. On main `up` stopped everything, the worker SIGTERMed mid-task.
2. Ctrl-C while a task runs: the worker hands the task back (QUEUED, its iterations kept)
   instead of dying mid-task; `up` exits 0.
3. `up` again on the same var/: a session from before still works (main re-hashed the demo
   password on every start, which logged every open tab out), and the handed-back task is sent
   again (the private Redis forgot it) and finishes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from workers.tests.support import free_port, wait_until

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
CREDENTIALS = """
import json
from django.contrib.auth.models import User
from django.test import Client
from webapp.api import services
user = User.objects.get(username="demo")
browser = Client()
browser.force_login(user)
token = services.token_create(user=user, name="restarts")[1]
print("KF-CRED " + json.dumps({"token": token, "session": browser.cookies["sessionid"].value}))
"""


class Up:
    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.var = tmp_path / "var"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("KF_", "DJANGO"))}
        self.env.pop("DATABASE_URL", None)
        self.env.update(
            DJANGO_SETTINGS_MODULE="webapp.settings",
            KF_VAR_DIR=str(self.var),
            REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",  # nothing there: `up` starts Redis
            KF_CHANNELS_PREFIX="kf-up-restarts",
            KF_AGENT="standin",
            KF_STANDIN_ITERATIONS="60",  # 15 s a task: room to stop one mid-run
            KF_STANDIN_PAUSE_S="0.25",
            PYTHONUNBUFFERED="1",
        )
        self.log_path = tmp_path / "up.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        offset = len(self.log())
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "up", "--port", str(self.port)],
            cwd=ROOT, env=self.env, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        wait_until(
            lambda: "KernelForge is up" in self.log()[offset:] or self.process.poll() is not None,
            timeout_s=120,
            what="up",
        )
        assert self.process.poll() is None, self.log()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def credentials(self) -> dict[str, str]:
        out = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", CREDENTIALS],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120, check=True,
        ).stdout  # fmt: skip
        return json.loads(out.split("KF-CRED ", 1)[1])

    def api(self, token: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.url}/api/v1{path}",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST" if body is not None else "GET",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def answers(self, token: str, job: str) -> dict | None:
        try:
            return self.api(token, f"/jobs/{job}")
        except (urllib.error.URLError, OSError):
            return None

    def tasks(self, job: str) -> list[tuple]:
        with sqlite3.connect(f"file:{self.var}/kernelforge.sqlite3?mode=ro", uri=True) as db:
            return db.execute(
                "SELECT status, stop_reason FROM jobs_task WHERE job_id = ?",
                (job.replace("-", ""),),
            ).fetchall()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)


def submit(up: Up, token: str, shape: str) -> str:
    body = {"team": "demo-team", "shapes": f"op,shape,dtype\nrmsnorm,{shape},fp32\n",
            "format": "csv", "queue": "cpu", "gpu_minutes": 2}  # fmt: skip
    return up.api(token, "/jobs", body)["id"]


def iterations(up: Up, token: str, job: str) -> int:
    return len(up.api(token, f"/jobs/{job}/iterations?limit=1000")["items"])


def test_up_restarts_a_dead_web_server_hands_tasks_back_on_stop_and_keeps_sessions(tmp_path):
    up = Up(tmp_path)
    try:
        up.start()
        creds = up.credentials()
        token = creds["token"]

        # 1. The web server dies mid-job.
        job = submit(up, token, "8x64")
        wait_until(lambda: iterations(up, token, job) >= 2, timeout_s=60, what="the job to run")
        web_pid = int(re.findall(r"started web \(pid (\d+)\)", up.log())[-1])
        os.kill(web_pid, signal.SIGKILL)
        wait_until(lambda: "restarted web" in up.log() or up.process.poll() is not None,
                   timeout_s=60, what="the web server to be restarted")  # fmt: skip
        assert up.process.poll() is None, f"`up` stopped when its web server died:\n{up.log()}"
        wait_until(lambda: (up.answers(token, job) or {}).get("status") == "done",
                   timeout_s=90, what="the job to finish")  # fmt: skip
        assert "restarted worker" not in up.log(), "the workers went on"
        assert up.tasks(job) == [("done", "stand-in finished 60 steps")]

        # 2. Ctrl-C while a task runs.
        second = submit(up, token, "8x128")
        wait_until(lambda: iterations(up, token, second) >= 3, timeout_s=60, what="a second run")
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(timeout=120) == 0, up.log()
        ((status, reason),) = up.tasks(second)
        assert (status, reason) == ("queued", "requeued: its worker stopped"), up.log()

        # 3. `up` again: sessions hold, the handed-back task finishes.
        up.start()
        page = urllib.request.Request(
            f"{up.url}/", headers={"Cookie": f"sessionid={creds['session']}"}
        )
        with urllib.request.urlopen(page, timeout=30) as response:
            assert response.url.rstrip("/") == up.url, "the session from before was logged out"
        wait_until(lambda: (up.answers(token, second) or {}).get("status") == "done",
                   timeout_s=120, what="the handed-back task to finish")  # fmt: skip
        assert iterations(up, token, second) == 60, "resumed, no step twice or missing"
    finally:
        up.kill()
