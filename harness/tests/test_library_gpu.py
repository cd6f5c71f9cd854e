"""The kernel library on a GPU machine: a real CUTLASS build, then a search's screen finds it
built (no compile). Run with `bash harness/tests/gpu_run.sh` (needs nvcc and nvidia-cutlass)."""

import json
import os
import time
from pathlib import Path

import pytest

from harness import library, library_archive
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


def test_a_packed_library_screens_on_another_machine_without_a_compile(tmp_path, monkeypatch):
    """KF_LIBRARY_ARCHIVE names an archive packed elsewhere (a CPU machine with this nvcc:
    the builds must load and pass here); without it, two builds of this machine's."""
    archive = os.environ.get("KF_LIBRARY_ARCHIVE")
    if not archive:
        monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "builder"))
        assert library.build(("matmul/bf16/NN",), workers=2, deadline_s=5.0).built == 2
        archive = str(tmp_path / "library.tar.xz")
        library_archive.pack(Path(archive))
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "worker"))
    unpacked = library_archive.unpack(Path(archive))
    print("unpacked:", json.dumps(unpacked.to_dict()))
    assert unpacked.builds_taken >= 2 and unpacked.files_written >= unpacked.builds_taken
    problem = parse_problem("matmul", "3000x3000x3000", "bf16", "NN")
    points = library.points_for(problem)
    assert len(points) == unpacked.builds_taken
    screener = Screener(problem, deadline_at=time.monotonic() + 300)
    try:
        screener.submit([ScreenPoint(p["family"], p["params"]) for p in points])
        result = screener.screen(deadline_at=time.monotonic() + 240, min_ready=len(points))
    finally:
        screener.close()
    print("screen:", json.dumps(result.to_dict())[:4000])
    assert len(result.ranked()) == len(points), result.to_dict()  # each one loaded and passed
    assert all(e.compile_s == 0 for e in result.entries), [e.compile_s for e in result.entries]
