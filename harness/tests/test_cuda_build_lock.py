"""A CUDA extension build killed mid-way leaves torch's `lock` file behind; the next build of
that source must not wait on it forever (CPU only: the lock, not the build)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from torch.utils.file_baton import FileBaton

from harness.cuda_ext import build_lock


def test_a_stale_torch_lock_is_cleared_once_we_hold_the_build_lock(tmp_path):
    stale = tmp_path / "lock"
    stale.write_text("")  # what a build killed at its wall limit leaves
    assert not FileBaton(str(stale)).try_acquire(), "torch would wait on it"
    with build_lock(str(tmp_path)):
        baton = FileBaton(str(stale))
        assert baton.try_acquire(), "torch's load_inline now builds instead of waiting"
        baton.release()


HOLD = """
import os, sys, time
from harness.cuda_ext import build_lock
with build_lock(sys.argv[1]):
    open(os.path.join(sys.argv[1], "lock"), "w").close()  # a live build's own lock
    print("held", flush=True)
    time.sleep(60)
"""
ENTER = "import sys\nfrom harness.cuda_ext import build_lock\nwith build_lock(sys.argv[1]): pass"


def test_a_live_builders_lock_is_left_alone_and_its_end_lets_the_next_in(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = [sys.executable, "-c"]
    builder = subprocess.Popen([*run, HOLD, str(tmp_path)], stdout=subprocess.PIPE, env=env)
    try:
        assert builder.stdout is not None and builder.stdout.readline().strip() == b"held"
        waiter = subprocess.Popen([*run, ENTER, str(tmp_path)], env=env)
        time.sleep(1.0)
        assert waiter.poll() is None, "a second builder waits for the live one"
        assert (tmp_path / "lock").exists(), "the live build's lock was not taken from it"
        builder.kill()  # killed mid-build: the kernel drops our lock, its `lock` file stays
        builder.wait(10)
        assert waiter.wait(30) == 0
        assert not (tmp_path / "lock").exists(), "the stale file went"
    finally:
        builder.kill()
