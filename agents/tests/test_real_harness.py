"""The whole graph on the CPU against the real harness (Triton's interpreter), both providers,
and a resume after the worker process dies. Interpreter timings decide keep/revert here but
are never compared with GPU numbers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents import Budget, LLMSettings, OptimizeConfig, Provider, optimize
from agents.reporting import AttemptVerdict
from agents.tests import llm_script as script
from agents.tests.fake_llm_server import FakeLLMServer, Reply
from agents.tests.fakes import ListReporter
from kernels import get_op, parse_problem

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = parse_problem("rmsnorm", "32x256", "fp32")
_ROWWISE = next(f for f in get_op("rmsnorm").families() if f.name == "rmsnorm_rowwise")
POINT = {
    **_ROWWISE.default(PROBLEM),
    **{"MODE": "one_pass", "BLOCK_N": 1024, "ROWS": 4, "NUM_WARPS": 2, "EVICT_FIRST": False},
}
TIMED = (AttemptVerdict.BASELINE, AttemptVerdict.KEPT, AttemptVerdict.REVERTED)

pytestmark = pytest.mark.slow


def assert_judged_by_the_rule(events, min_gain=0.01):
    """Every keep/revert follows the judge's rule, recomputed from the reported evaluations."""
    best = None
    for e in events:
        if e.verdict in TIMED:
            timings = e.evaluation["timings"]
            assert e.evaluation["verdict"] == "passed" and e.speedup == timings["speedups"]["torch"]
            if best is None:
                assert e.verdict in (AttemptVerdict.BASELINE, AttemptVerdict.KEPT)
            else:
                threshold = max(timings["noise"], best[1], min_gain)
                kept = e.speedup > best[0] * (1 + threshold)
                assert (e.verdict is AttemptVerdict.KEPT) == kept, e.reason
            if e.verdict is not AttemptVerdict.REVERTED:
                best = (e.speedup, timings["noise"])
        assert e.best_speedup == (best[0] if best else None)


def test_it_runs_the_offline_graph_on_the_interpreter():
    reporter = ListReporter()
    config = OptimizeConfig(budget=Budget(wall_s=300, max_attempts=3), plateau=None, batch_size=2)
    result = optimize(PROBLEM, config, reporter)

    assert [e.index for e in reporter.events] == [0, 1, 2]
    assert reporter.events[0].verdict is AttemptVerdict.BASELINE
    assert all(e.verdict in TIMED for e in reporter.events), [e.reason for e in reporter.events]
    assert all(e.evaluation["timings"]["regime"] == "interpreter" for e in reporter.events)
    assert_judged_by_the_rule(reporter.events)
    assert (
        reporter.profiles[0] == 0
    )  # the baseline was profiled (no counters on a CPU: advice only)
    assert result.best is not None and result.gpu_s > 0 and result.candidates_per_gpu_hour > 0
    # The best was re-evaluated with the full protocol, and the finished event carries that run.
    assert result.verified is True and "torch" in result.final_speedups
    assert result.best.evaluation["verdict"] == "passed"
    assert reporter.finished_with[0].evaluation == result.best.evaluation


def test_it_runs_the_llm_graph_against_the_fake_server():
    replies = [
        Reply(script.plan_rewrite("one program per row")),
        Reply(script.BROKEN),
        Reply(script.RMSNORM_GOOD),
        Reply(delay_s=3.0),
        Reply(script.plan_rewrite("avoid the sync")),
        Reply(script.CHEAT),
    ]
    with FakeLLMServer(replies) as server:
        llm = LLMSettings(
            model="openai/fake",
            api_base=server.api_base,
            api_key="test-key",
            timeout_s=1.0,
            retries=1,
            backoff_s=0.01,
            reply_retries=1,
        )
        config = OptimizeConfig(
            final_verify=False,
            budget=Budget(wall_s=240, max_attempts=3),
            plateau=None,
            planner=Provider.LLM,
            coder=Provider.LLM,
            llm=llm,
        )
        reporter = ListReporter()
        result = optimize(PROBLEM, config, reporter)

    baseline, rewrite, cheat = reporter.events
    assert baseline.verdict is AttemptVerdict.BASELINE
    assert rewrite.verdict in (AttemptVerdict.KEPT, AttemptVerdict.REVERTED), rewrite.reason
    assert "def _rmsnorm(" in rewrite.source and rewrite.parent == 0
    assert cheat.verdict is AttemptVerdict.CHEAT, cheat.reason
    assert_judged_by_the_rule(reporter.events)
    assert "syntax error" in server.requests[2]["messages"][-1]["content"]
    assert result.llm_tokens == 5 * 200


CHILD = """
import sys
from pathlib import Path
import harness
from agents import Budget, OptimizeConfig, optimize
from agents.evaluator import HarnessEvaluator
from agents.tests.fakes import ListReporter
from kernels import parse_problem

class DiesOnThirdEvaluation(HarnessEvaluator):
    calls = 0
    def evaluate(self, candidate, problem, *, timeout_s):
        DiesOnThirdEvaluation.calls += 1
        if DiesOnThirdEvaluation.calls == 3:
            import os
            os._exit(3)
        return super().evaluate(candidate, problem, timeout_s=timeout_s)

url, thread, log = sys.argv[1], sys.argv[2], Path(sys.argv[3])
config = OptimizeConfig(final_verify=False, budget=Budget(wall_s=240, max_attempts=4), plateau=None, batch_size=2, profile=False)
config = config.with_(evaluator=DiesOnThirdEvaluation(config))
optimize(parse_problem("rmsnorm", "32x256", "fp32"), config, ListReporter(log),
         thread_id=thread, checkpointer_url=url)
"""


def test_it_resumes_a_real_run_after_the_worker_dies(postgres_url, thread_id, tmp_path):
    log = tmp_path / "events.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, postgres_url, thread_id, str(log)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 3, child.stderr[-3000:]
    before = [json.loads(line)["index"] for line in log.read_text().splitlines()]
    assert before == [0, 1]

    reporter = ListReporter()
    config = OptimizeConfig(
        final_verify=False,
        budget=Budget(wall_s=240, max_attempts=4),
        plateau=None,
        batch_size=2,
        profile=False,
    )
    result = optimize(PROBLEM, config, reporter, thread_id=thread_id, checkpointer_url=postgres_url)
    assert result.resumed and reporter.indexes == [2, 3]
    assert [r["index"] for r in result.history] == [0, 1, 2, 3]
    assert result.stop_reason == "max_attempts"
