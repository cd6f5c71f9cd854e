"""`up`'s supervisor restarts what crashes and stops a worker without killing its task (issue 28,
item 3). Plain child processes, no Django: on main one child's exit stopped everything."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from webapp.embedded import supervisor as sup
from webapp.embedded.supervisor import GaveUp, Supervisor

CRASH_AT_ONCE = [sys.executable, "-c", "raise SystemExit(3)"]


def sleeper(tmp_path: Path, name: str) -> list[str]:
    """A child that notes each start in a file, then sleeps."""
    code = f"open({str(tmp_path / name)!r}, 'a').write('x'); import time; time.sleep(60)"
    return [sys.executable, "-c", code]


@pytest.fixture
def fast_backoff(monkeypatch):
    monkeypatch.setattr(sup, "BACKOFF_FIRST_S", 0.1)


def test_a_child_that_exits_is_started_again_and_the_others_keep_running(tmp_path, fast_backoff):
    lines: list[str] = []
    supervisor = Supervisor(log=lines.append)
    web = supervisor.start("web", sleeper(tmp_path, "web"), env=dict(os.environ))
    worker = supervisor.start("worker", sleeper(tmp_path, "worker"), env=dict(os.environ))
    worker_pid = worker.process.pid
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "web").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(web.process.pid, signal.SIGKILL)  # the web server crashes
        supervisor.watch(every_s=0.05, until=lambda: (tmp_path / "web").read_text() == "xx"
                         or time.monotonic() > deadline)  # fmt: skip
        assert (tmp_path / "web").read_text() == "xx", lines
        assert web.running and worker.running and worker.process.pid == worker_pid
        assert any(line.startswith("web exited with code -9; restarting") for line in lines)
    finally:
        supervisor.stop_all(timeout_s=5)


def test_the_pause_before_a_restart_doubles_and_a_child_that_keeps_crashing_is_given_up(
    fast_backoff,
):
    lines: list[str] = []
    supervisor = Supervisor(log=lines.append, max_quick_crashes=3)
    supervisor.start("web", CRASH_AT_ONCE, env=dict(os.environ))
    with pytest.raises(GaveUp, match="web exited with code 3 4 times in a row"):
        supervisor.watch(every_s=0.02)
    pauses = [line.rsplit(" ", 1)[1] for line in lines if "restarting it in" in line]
    assert pauses == ["0.1s", "0.2s", "0.4s"], lines
    assert sum("restarted web" in line for line in lines) == 3
    supervisor.stop_all(timeout_s=5)


def test_a_worker_is_stopped_by_its_main_process_only(tmp_path):
    """SIGTERM to the main process only (Celery's warm shutdown); its group is killed only
    after the timeout, so a pool child is never signalled before its task is handed back."""
    code = (
        "import os, signal, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "def stop(*_):\n"
        f"    open({str(tmp_path / 'child-alive')!r}, 'w').write(str(child.poll() is None))\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').write('')\n"
        "time.sleep(60)\n"
    )
    supervisor = Supervisor(log=lambda line: None)
    supervisor.start("worker", [sys.executable, "-c", code], env=dict(os.environ),
                     stop_main_only=True)  # fmt: skip
    deadline = time.monotonic() + 20
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    supervisor.stop_all(timeout_s=10)
    assert (tmp_path / "child-alive").read_text() == "True", "the group got the SIGTERM too"
