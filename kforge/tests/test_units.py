"""The CLI's pieces that need no server: budgets, the SSE reader, arguments, its import fence."""

import ast
from pathlib import Path

import pytest

from kforge.budget import parse_minutes
from kforge.cli import ExitCode, main
from kforge.sse import parse_events

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("30m", 30), ("2h", 120), ("1h30m", 90), ("90s", 2), ("45", 45), ("0.5", 1), (" 10 m", 10)],
)
def test_it_reads_budgets_as_whole_minutes_rounded_up(text, minutes):
    assert parse_minutes(text) == minutes


@pytest.mark.parametrize("text", ["", "soon", "30x", "-5m", "0", "m30"])
def test_it_rejects_a_budget_it_cannot_read(text):
    with pytest.raises(ValueError):
        parse_minutes(text)


def test_it_splits_an_event_stream_into_events_and_skips_keepalives():
    lines = [b"event: status\n", b'data: {"status": "running"}\n', b"\n", b": keep-alive\n", b"\n",
             b"id: 7\n", b"event: iteration\n", b'data: {"seq": 7}\n', b"\n"]  # fmt: skip
    events = list(parse_events(lines))
    assert [(e.event, e.id, e.data) for e in events] == [
        ("status", None, {"status": "running"}),
        ("iteration", "7", {"seq": 7}),
    ]


def test_it_needs_a_token(monkeypatch, capsys):
    monkeypatch.delenv("KFORGE_TOKEN", raising=False)
    assert main(["status", "some-job"]) == ExitCode.USAGE
    assert "KFORGE_TOKEN" in capsys.readouterr().err


def test_it_reports_an_unreachable_server_with_its_own_exit_code(capsys):
    code = main(["--url", "http://127.0.0.1:9", "--token", "kf_x", "--timeout", "2", "status", "j"])
    assert code == ExitCode.UNREACHABLE and "cannot reach" in capsys.readouterr().err


def test_it_refuses_a_bad_budget_as_a_usage_error():
    with pytest.raises(SystemExit) as exit_:
        main(["--token", "t", "submit", "x.yaml", "--team", "ml", "--budget", "soon"])
    assert exit_.value.code == 2


def test_it_imports_nothing_from_the_server_packages():
    forbidden = {
        "webapp",
        "workers",
        "agents",
        "harness",
        "kernels",
        "django",
        "celery",
        "channels",
    }
    for path in ROOT.glob("*.py"):
        tree = ast.parse(path.read_text())
        roots = {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        }
        roots |= {
            n.module.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
        }
        assert not roots & forbidden, f"{path.name} imports {roots & forbidden}"


def test_the_project_installs_the_kforge_command():
    import tomllib

    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["kforge"] == "kforge.cli:main"


# --- What a new user hit (issue 17) -----------------------------------------------------------


def test_help_describes_the_tool_and_lists_every_exit_code(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "ExitCode" not in out and "submit jobs to KernelForge" in out
    for code in ExitCode:
        assert f"\n  {code.value}  " in out
    assert "slugs for --team" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["-q", "status", "j"],
        ["status", "j", "-q"],
        ["status", "j", "--quiet", "--url", "http://x"],
        ["--url", "http://y", "-q", "status", "j", "--url", "http://x"],
    ],
)
def test_common_options_work_before_or_after_the_command(argv):
    from kforge.cli import _parser

    args = _parser().parse_args(argv)
    assert args.quiet is True and args.timeout == 60.0
    if "http://x" in argv:
        assert args.url == "http://x"
    assert _parser().parse_args(["status", "j"]).quiet is False


def test_options_after_the_command_reach_the_client(capsys):
    code = main(["status", "j", "-q", "--url", "http://127.0.0.1:9", "--token", "kf_x",
                 "--timeout", "2"])  # fmt: skip
    assert code == ExitCode.UNREACHABLE and "cannot reach" in capsys.readouterr().err


def _shown(stream) -> str:
    return stream.getvalue().replace("\r", "\n")


def test_the_bar_starts_at_0_of_n_problems_and_counts_them():
    import io

    from kforge.progress import Progress

    stream = io.StringIO()
    progress = Progress(title="t", problems=2, stream=stream)
    progress.on_status({"status": "running", "tasks": [{"status": "done"}, {"status": "running"}]})
    progress.close()
    shown = _shown(stream)
    assert "problem [" not in shown and "0problem" not in shown
    assert "0/2 problems" in shown and "1/2 problems" in shown


def test_a_job_with_a_budget_moves_the_bar_as_the_budget_is_spent_and_marks_interpreter_bests():
    import io

    from kforge.progress import Progress

    stream = io.StringIO()
    progress = Progress(title="t", problems=1, budget_minutes=30, stream=stream)
    progress.on_status({"status": "running", "tasks": [{"status": "running"}]})
    progress.on_iteration({"task": 7, "verdict": "baseline", "speedup": 0.06, "gpu_s": 45.0,
                           "interpreter": True})  # fmt: skip
    progress.on_iteration({"task": 7, "verdict": "kept", "speedup": 0.75, "gpu_s": 45.0,
                           "interpreter": True})  # fmt: skip
    progress.close()
    last = _shown(stream).strip().splitlines()[-1]
    assert "1.5/30 min" in last and "0/1 done" in last and "2 iter" in last, last
    assert "best interp." in last and "0.75" not in last
    assert progress.interpreter_tasks == {7}


# --- What a new user hit, round 2 (issue 27) --------------------------------------------------


@pytest.mark.parametrize("command", [[], ["submit"], ["status"], ["cancel"], ["download"]])
def test_every_command_has_a_help_page(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: kforge" in out and "--url" in out and "http://127.0.0.1:8000" in out


def test_status_says_why_a_task_waits_and_why_a_job_failed(capsys):
    from kforge.cli import _print_job

    task = {
        "id": 1,
        "problem": "rmsnorm/8x64/fp32",
        "queue": "cpu",
        "status": "queued",
        "iterations": 0,
        "best_speedup": None,
        "queue_position": 2,
        "wait_estimate_s": 1190,
    }
    failure = {"stage": "profile (forward)", "message": "RuntimeError: bad", "traceback": "a\nb"}
    _print_job({"id": "j", "title": "t", "team": "ml", "status": "queued", "tasks": [task]})
    _print_job({"id": "j", "title": "t", "team": "ml", "status": "failed", "tasks": [],
                "failure": failure})  # fmt: skip
    err = capsys.readouterr().err
    assert "2 tasks ahead on cpu, starts within about 20 min" in err
    assert "failed (profile (forward)): RuntimeError: bad\n    a\n    b" in err


def test_the_bar_ends_full_and_its_clock_runs_between_events():
    """Issue 27: `--wait`'s bar ended at "6 %" (the job stopped before its budget was spent)
    and its clock stood still between events."""
    import io
    import time

    from kforge.progress import Progress

    stream = io.StringIO()
    progress = Progress(title="t", problems=1, budget_minutes=30, stream=stream)
    progress.on_iteration({"task": 1, "verdict": "kept", "speedup": 1.2, "gpu_s": 108.0})
    time.sleep(2.3)  # no event: the clock still moves
    assert "[00:02" in _shown(stream)
    progress.finish("done")
    progress.close()
    last = _shown(stream).strip().splitlines()[-1]
    assert "100%" in last and "done, 1.8 of 30 min used, best 1.20x, 1 iter" in last, last


def test_the_bars_best_is_the_headline_over_the_fastest_baseline():
    import io

    from kforge.progress import Progress

    progress = Progress(title="t", problems=1, stream=io.StringIO(), quiet=True)
    progress.on_iteration({"verdict": "kept", "speedup": 1.77, "fastest_speedup": 1.14})
    assert progress.best_text == "1.14x"
