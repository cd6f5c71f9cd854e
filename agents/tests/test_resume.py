"""A worker dies mid-evaluation (os._exit in a child process); the next run resumes from the
last finished step, in sqlite and in PostgreSQL, without re-reporting any index."""

import json
import subprocess
import sys
from pathlib import Path

from agents import Budget, OptimizeConfig, optimize
from agents.tests.fakes import FakeEvaluator, ListReporter, block_m_score, rising
from kernels import parse_problem

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = parse_problem("matmul", "256x256x256", "fp16", "NN")
CRASH_AT_CALL = 6

CHILD = f"""
import sys
from pathlib import Path
from agents import Budget, OptimizeConfig, optimize
from agents.tests.fakes import FakeEvaluator, ListReporter, block_m_score, rising
from kernels import parse_problem

url, thread, log = sys.argv[1], sys.argv[2], Path(sys.argv[3])
config = OptimizeConfig(budget=Budget(wall_s=120, max_attempts=12), plateau=None, min_gain=-1.0,
                        screen_batch=8, profile=False,
                        evaluator=FakeEvaluator(block_m_score, screen_score=rising(),
                                                crash_at_call={CRASH_AT_CALL}))
optimize(parse_problem("matmul", "256x256x256", "fp16", "NN"), config, ListReporter(log),
         thread_id=thread, checkpointer_url=url)
"""


def config(evaluator):
    # The screen's numbers rise with every point (rising) and min_gain is -1: every round's
    # finalists go on to tier two, so a run makes 12 verifications and the crash lands mid-run.
    return OptimizeConfig(
        budget=Budget(wall_s=120, max_attempts=12),
        plateau=None,
        min_gain=-1.0,
        screen_batch=8,
        profile=False,
        evaluator=evaluator,
    )


def test_it_resumes_after_the_worker_dies(checkpoint_url, thread_id, tmp_path):
    log = tmp_path / "events.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, checkpoint_url, thread_id, str(log)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 3, child.stderr[-2000:]
    before = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["index"] for e in before] == list(range(CRASH_AT_CALL - 1))

    evaluator, reporter = FakeEvaluator(block_m_score, screen_score=rising()), ListReporter()
    result = optimize(
        PROBLEM, config(evaluator), reporter, thread_id=thread_id, checkpointer_url=checkpoint_url
    )

    assert result.resumed and reporter.started_calls == 0
    assert reporter.indexes == list(range(CRASH_AT_CALL - 1, 12))  # no index reported twice
    assert [r["index"] for r in result.history] == list(range(12))
    # It goes on from the checkpoint: nothing judged before the crash is judged again. (The
    # screen's timings differ run to run, so the rest need not match a run without a crash.)
    judged_before = {e["candidate_id"] for e in before}
    assert judged_before.isdisjoint(e.candidate_id for e in reporter.events)

    # A redelivered task whose thread already finished returns the result without new work.
    again_eval, again = FakeEvaluator(block_m_score, screen_score=rising()), ListReporter()
    repeat = optimize(
        PROBLEM, config(again_eval), again, thread_id=thread_id, checkpointer_url=checkpoint_url
    )
    assert again_eval.calls == [] and again.events == []
    assert repeat.best.index == result.best.index and repeat.stop_reason == result.stop_reason


def test_it_refuses_to_resume_a_thread_with_another_problem(checkpoint_url, thread_id):
    optimize(
        PROBLEM,
        config(FakeEvaluator(block_m_score, screen_score=rising())),
        ListReporter(),
        thread_id=thread_id,
        checkpointer_url=checkpoint_url,
    )
    other = parse_problem("matmul", "128x128x128", "fp16", "NN")
    reporter = ListReporter()
    try:
        optimize(
            other,
            config(FakeEvaluator(block_m_score, screen_score=rising())),
            reporter,
            thread_id=thread_id,
            checkpointer_url=checkpoint_url,
        )
    except ValueError as exc:
        assert "different problem" in str(exc)
    else:
        raise AssertionError("resumed a thread that holds another problem")
    assert reporter.errors and "different problem" in reporter.errors[0]


def test_it_rejects_an_ambiguous_sqlite_url():
    import pytest

    from agents.checkpoint import open_checkpointer

    with pytest.raises(ValueError, match="sqlite:///"), open_checkpointer("sqlite://relative.db"):
        pass
