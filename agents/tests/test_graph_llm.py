"""The graph with the LLM provider, talking HTTP to a scripted fake server (fake evaluator)."""

from agents import Budget, LLMSettings, OptimizeConfig, Provider, optimize
from agents.reporting import AttemptVerdict
from agents.tests import llm_script as script
from agents.tests.fake_llm_server import FakeLLMServer, Reply
from agents.tests.fakes import FakeEvaluator, ListReporter, constants
from harness.results import Verdict
from kernels import get_op, parse_problem

PROBLEM = parse_problem("rmsnorm", "32x256", "fp32")
_ROWWISE = next(f for f in get_op("rmsnorm").families() if f.name == "rmsnorm_rowwise")
# The family's default fills the knobs these tests do not care about (the family grows knobs).
POINT = {
    **_ROWWISE.default(PROBLEM),
    **{"MODE": "one_pass", "BLOCK_N": 1024, "ROWS": 2, "NUM_WARPS": 1, "EVICT_FIRST": False},
}
BAD_POINT = {**POINT, "BLOCK_N": 1000}


def score(source: str):
    if "torch.cuda.synchronize =" in source:
        return Verdict.CHEAT
    if "def _rmsnorm(" in source:
        return 2.0
    return 1.0 + 0.05 * constants(source).get("ROWS", 1)


def llm_config(server, evaluator, **kw):
    settings = LLMSettings(
        model="openai/fake",
        api_base=server.api_base,
        api_key="test-key",
        timeout_s=1.0,
        retries=1,
        backoff_s=0.01,
        reply_retries=2,
    )
    kw.setdefault("budget", Budget(wall_s=120, max_attempts=3))
    kw.setdefault("plateau", 2)
    return OptimizeConfig(
        planner=Provider.LLM,
        coder=Provider.LLM,
        llm=settings,
        screen_batch=8,
        evaluator=evaluator,
        **kw,
    )


def test_it_plans_rewrites_retries_bad_code_and_records_the_cheat():
    replies = [
        Reply(script.plan_params("rmsnorm_rowwise", [BAD_POINT, POINT])),
        Reply("I would try a rewrite."),  # not JSON: sent back with the error
        Reply(script.plan_rewrite("one program per row, the row in registers")),
        Reply(script.BROKEN),  # syntax error: sent back
        Reply(script.ESCAPE),  # forbidden import: sent back
        Reply(script.RMSNORM_GOOD),
        Reply(delay_s=3.0),  # a timeout, retried
        Reply(script.plan_rewrite("cache the reduction")),
        Reply(script.CHEAT),
    ]
    with FakeLLMServer(replies) as server:
        reporter, evaluator = ListReporter(), FakeEvaluator(score)
        result = optimize(PROBLEM, llm_config(server, evaluator), reporter)

    verdicts = [e.verdict for e in reporter.events]
    assert verdicts == [AttemptVerdict.KEPT, AttemptVerdict.KEPT, AttemptVerdict.CHEAT]
    # The LLM's point was rendered by the harness, screened, then fully verified (tier two).
    first = reporter.events[0]
    assert first.params == POINT and first.tier == "verify" and first.screen_speedup
    assert first.hypothesis.startswith("more rows per program")
    # The code it wrote is untrusted: checked with the quick protocol, then (it would be the
    # best) verified with the full one, and only then kept.
    rewrite = reporter.events[1]
    assert rewrite.family is None and rewrite.parent == 0 and "def _rmsnorm(" in rewrite.source
    assert rewrite.tier == "check" and rewrite.screen_speedup is None
    assert evaluator.calls.count(rewrite.candidate_id) == 2
    assert rewrite.candidate_id in evaluator.verified
    assert reporter.events[2].candidate_id not in evaluator.verified, "a cheat stops at its check"
    assert result.best.index == 1 and result.best.speedup == 2.0
    assert result.search.check.candidates == 2 and result.search.verify.candidates == 2
    assert result.stop_reason == "max_attempts"

    sent = server.requests
    assert len(sent) == 9
    assert (
        "invalid JSON" in sent[2]["messages"][-1]["content"]
        or "JSON" in sent[2]["messages"][-1]["content"]
    )
    assert "syntax error" in sent[4]["messages"][-1]["content"]
    assert "import of 'threading'" in sent[5]["messages"][-1]["content"]
    assert "def run(x, weight, *, out)" in sent[8]["messages"][-1]["content"]  # the best source
    assert result.llm_tokens == 8 * 200  # the timed-out request returned no usage
    assert sum(e.llm_tokens for e in reporter.events) == result.llm_tokens


def test_it_falls_back_to_the_offline_planner_when_the_llm_keeps_failing():
    with FakeLLMServer([Reply(status=429), Reply(status=429)]) as server:
        config = llm_config(server, FakeEvaluator(score), budget=Budget(wall_s=60, max_attempts=3))
        config = config.with_(coder=Provider.OFFLINE)
        reporter = ListReporter()
        result = optimize(PROBLEM, config, reporter)
    assert reporter.events and reporter.events[0].family == "rmsnorm_rowwise"
    assert result.search.screen.candidates >= 8, "the offline plan's batch was screened"
    assert any("rate_limit" in note and "offline plan instead" in note for note in result.notes)


def test_it_records_a_coder_that_never_produces_valid_code():
    replies = [
        Reply(script.plan_params("rmsnorm_rowwise", [POINT])),
        Reply(script.plan_rewrite("fuse")),
        Reply(script.BROKEN),
        Reply(script.BROKEN),
        Reply(script.BROKEN),
    ]
    with FakeLLMServer(replies) as server:
        reporter = ListReporter()
        evaluator = FakeEvaluator(score)
        result = optimize(
            PROBLEM,
            llm_config(server, evaluator, budget=Budget(wall_s=60, max_attempts=2)),
            reporter,
        )
    failed = reporter.events[1]
    assert failed.verdict is AttemptVerdict.INFRA_ERROR and "malformed" in failed.reason
    assert len(evaluator.calls) == 1  # only the screen finalist reached the harness
    assert result.stop_reason == "max_attempts"


def test_it_stops_at_the_llm_token_cap():
    replies = [
        Reply(
            script.plan_params("rmsnorm_rowwise", [POINT]),
            prompt_tokens=3000,
            completion_tokens=100,
        )
    ]
    with FakeLLMServer(replies * 3) as server:
        config = llm_config(server, FakeEvaluator(score), budget=Budget(wall_s=60, llm_tokens=3000))
        result = optimize(PROBLEM, config.with_(coder=Provider.OFFLINE), ListReporter())
    assert result.stop_reason == "llm_tokens" and result.llm_tokens == 3100
    assert len(server.requests) == 1
    assert server.requests[0]["max_tokens"] < 3000  # the reply may not overrun the cap either


def test_it_does_not_call_the_llm_when_the_prompt_alone_would_pass_the_cap():
    with FakeLLMServer([]) as server:
        config = llm_config(server, FakeEvaluator(score), budget=Budget(wall_s=60, llm_tokens=50))
        result = optimize(PROBLEM, config.with_(coder=Provider.OFFLINE), ListReporter())
    assert result.stop_reason == "llm_tokens" and server.requests == []
