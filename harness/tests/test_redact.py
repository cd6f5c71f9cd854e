"""What a user is shown of a candidate's run: its own lines, not our profiler log or paths."""

from __future__ import annotations

from pathlib import Path

from harness import redact

ROOT = Path(__file__).resolve().parents[2]


def test_it_drops_torch_profiler_log_lines_and_keeps_the_candidates_output():
    captured = (
        "USDT:2026-11-24 21:30:52 15418:15418 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        "my kernel says hi\n"
        "STAGE:2026-11-24 21:33:20 18179:18179 SyncActivityProfilerHandler.cpp:51] Completed"
        " Stage: Warm Up\n"
        "USDT:2026-11-24 21:30:52 15418:15418 SyncActivityProfilerHandler.cpp:59] profiler_stop"
    )
    assert redact.output(captured) == "my kernel says hi\n"


def test_it_makes_server_paths_relative():
    text = (
        'File "/tmp/kf-eval-hnimla7h/sandbox/kf_candidate.py", line 7\n'
        f'File "{ROOT}/.venv/lib/python3.11/site-packages/triton/compiler/compiler.py", line 9\n'
        f'File "{ROOT}/harness/runtime.py", line 32\n'
        "/tmp/kf-eval-x1/sandbox/kf_candidate.py:12:8: error"
    )
    assert redact.paths(text, "/tmp/kf-eval-hnimla7h/sandbox") == (
        'File "kf_candidate.py", line 7\n'
        'File "triton/compiler/compiler.py", line 9\n'
        'File "harness/runtime.py", line 32\n'
        "kf_candidate.py:12:8: error"
    )


def test_a_checkout_in_a_folder_named_like_scratch_keeps_its_relative_paths(monkeypatch):
    monkeypatch.setattr(redact, "_ROOT", "/tmp/kf-fresh/")
    text = (
        'File "/tmp/kf-fresh/.venv/lib/python3.11/site-packages/triton/compiler/compiler.py"\n'
        'File "/tmp/kf-fresh/harness/runtime.py"\n/tmp/kf-eval-x1/sandbox/kf_candidate.py:1'
    )
    assert redact.paths(text) == (
        'File "triton/compiler/compiler.py"\nFile "harness/runtime.py"\nkf_candidate.py:1'
    )
