"""The kernel library on a GPU machine: a real CUTLASS build, then a search's screen finds it
built (no compile). Run with `bash harness/tests/gpu_run.sh` (needs nvcc and nvidia-cutlass)."""

import json
import time

import pytest

from harness import library
from harness.screen import Screener, ScreenPoint
from kernels import parse_problem

pytestmark = pytest.mark.gpu


def test_two_builds_then_the_screen_takes_them_without_a_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "cache"))
    # The machine's own manifest (in KF_CACHE_DIR), where the screen looks for built points.
    report = library.build(("matmul/bf16/NN",), workers=2, deadline_s=1.0)
    print("library build:", json.dumps(report.to_dict()))  # kept by gpu_run.sh's log
    assert report.built == 2 and report.failed == 0, report.failures
    assert report.disk_bytes > 0
    problem = parse_problem("matmul", "192x4096x7168", "bf16", "NN")
    points = library.points_for(problem)
    assert len(points) == 2
    screener = Screener(problem, deadline_at=time.monotonic() + 300)
    try:
        screener.submit([ScreenPoint(p["family"], p["params"]) for p in points])
        result = screener.screen(deadline_at=time.monotonic() + 240, min_ready=2)
    finally:
        screener.close()
    assert len(result.ranked()) == 2, result.to_dict()
    # Built by the library: ready at once, no compile child for them.
    assert all(e.compile_s == 0 for e in result.entries), [e.compile_s for e in result.entries]
