"""benchmarks.spare_threads --walk names the nested import that starts a thread."""

from __future__ import annotations

import os
import sys

from benchmarks.spare_threads import walk


def test_the_walk_names_the_innermost_import_that_starts_a_thread(tmp_path):
    (tmp_path / "kf_quiet.py").write_text("import json\n")
    (tmp_path / "kf_noisy.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    )
    (tmp_path / "kf_top.py").write_text("import kf_quiet\nimport kf_noisy\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path)}

    found = walk("kf_top", env, before=())
    assert found["culprit"] == "kf_noisy", found
    assert found["threads_after"] == 2
    assert found["modules_before_culprit"] >= 1  # kf_quiet (and json's own) finished first

    (tmp_path / "kf_top.py").write_text("import kf_quiet\n")
    assert walk("kf_top", env, before=())["culprit"] is None
    assert sys.modules.get("kf_top") is None  # all in a child, none here
