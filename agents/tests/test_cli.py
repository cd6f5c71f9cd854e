"""`python -m agents optimize`: JSON lines on stdout, errors on stderr, resumable by thread id."""

import json
import subprocess
import sys
from pathlib import Path

from agents.cli import build_parser, config_from_args, main
from agents.config import Provider

ROOT = Path(__file__).resolve().parents[2]


def test_it_parses_a_budget_and_providers_into_one_config():
    args = build_parser().parse_args(
        [
            "optimize",
            "--op",
            "matmul",
            "--shape",
            "64x64x64",
            "--budget",
            "90s",
            "--gpu-budget",
            "1m",
            "--planner",
            "llm",
            "--model",
            "openai/gpt-x",
            "--api-key-env",
            "MY_KEY",
            "--plateau",
            "0",
            "--precompile",
            "on",
            "--precompile-workers",
            "3",
            "--no-sanitize",
            "--screen-batch",
            "64",
            "--finalists",
            "3",
            "--quick-verify",
        ]
    )
    config = config_from_args(args, {"MY_KEY": "secret"})
    assert config.budget.wall_s == 90 and config.budget.gpu_s == 60
    assert config.planner is Provider.LLM and config.coder is Provider.OFFLINE
    assert config.llm.model == "openai/gpt-x" and config.llm.api_key == "secret"
    assert config.plateau is None
    assert config.precompile is True and config.precompile_workers == 3
    assert config.sanitize_final is False and config.full_protocol is False
    assert config.screen_batch == 64 and config.finalists == 3
    default = config_from_args(
        build_parser().parse_args(["optimize", "--op", "x", "--shape", "1"]), {}
    )
    assert default.precompile is None and default.sanitize_final is True  # auto: with a GPU
    assert default.full_protocol is True  # tier two is the full protocol unless asked


def test_it_rejects_a_bad_problem_with_a_message(capsys):
    assert main(["optimize", "--op", "matmul", "--shape", "64x64", "--no-progress"]) == 2
    assert "takes a shape MxNxK" in capsys.readouterr().err


def test_it_fails_clearly_when_the_llm_key_is_missing(capsys, tmp_path):
    code = main(
        [
            "optimize",
            "--op",
            "rmsnorm",
            "--shape",
            "8x256",
            "--dtype",
            "fp32",
            "--planner",
            "llm",
            "--model",
            "anthropic/claude-sonnet-4-5",
            "--checkpoint",
            "",
            "--no-progress",
        ],
        environ={},
    )
    out = capsys.readouterr()
    assert code == 1 and "ANTHROPIC_API_KEY" in out.err
    assert json.loads(out.out.splitlines()[-1])["event"] == "failed"


def test_it_runs_a_whole_optimization_and_resumes_by_thread_id(tmp_path):
    db = tmp_path / "ckpt.sqlite3"
    command = [
        sys.executable,
        "-m",
        "agents",
        "optimize",
        "--op",
        "rmsnorm",
        "--shape",
        "8x256",
        "--dtype",
        "fp32",
        "--budget",
        "3m",
        "--max-attempts",
        "1",
        "--screen-batch",
        "4",
        "--no-profile",
        "--checkpoint",
        f"sqlite:///{db}",
        "--thread-id",
        "cli-1",
        "--out-dir",
        str(tmp_path / "out"),
    ]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    events = [line["event"] for line in lines]
    assert events == ["started", "search", "iteration", "search", "finished", "summary"]
    iteration = lines[2]
    assert iteration["verdict"] == "kept" and iteration["index"] == 0
    assert iteration["tier"] == "verify" and iteration["screen_speedup"] is not None
    summary = lines[-1]
    assert summary["stop_reason"] == "max_attempts" and summary["candidates_per_gpu_hour"] > 0
    assert summary["candidates_per_wall_hour"] > 0 and summary["screened"] >= 1
    assert summary["verified"] is True and summary["fully_verified"] == 1
    assert summary["outcome"] in ("verified", "baseline") and summary["outcome_reason"]
    assert set(summary["compile"]) >= {"workers", "compile_s_saved", "used"}
    assert (tmp_path / "out" / "best.py").read_text() == iteration["source"]
    assert "screened" in first.stderr and "fully verified 1" in first.stderr  # the summary
    assert "screen by family (passed/screened, best vs baseline): rmsnorm_" in first.stderr
    assert summary["families"] and all(f["screened"] for f in summary["families"].values())

    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    events = [json.loads(line)["event"] for line in again.stdout.splitlines()]
    assert events == ["finished", "summary"]  # nothing re-run, nothing re-reported
    assert json.loads(again.stdout.splitlines()[-1])["resumed"] is True
