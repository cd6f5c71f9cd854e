"""The whole graph with a fake evaluator (fast): history, keep/revert, caps, determinism."""

import pytest

from agents import Budget, OptimizeConfig, optimize
from agents.reporting import AttemptVerdict
from agents.tests.fakes import FakeEvaluator, ListReporter, block_m_score, constants
from harness.results import CompileResult, Verdict
from kernels import parse_problem

PROBLEM = parse_problem("matmul", "256x256x256", "fp16", "NN")


def config(evaluator, **kw):
    kw.setdefault("budget", Budget(wall_s=120, max_attempts=16))
    kw.setdefault("plateau", None)
    return OptimizeConfig(final_verify=False, evaluator=evaluator, **kw)


def test_it_records_every_attempt_and_keeps_only_verified_wins():
    evaluator, reporter = FakeEvaluator(block_m_score), ListReporter()
    result = optimize(PROBLEM, config(evaluator), reporter)

    events = reporter.events
    assert [e.index for e in events] == list(range(16)) == [r["index"] for r in result.history]
    assert events[0].verdict is AttemptVerdict.BASELINE and events[0].parent is None
    best = events[0].speedup
    for event in events[1:]:
        params = constants(event.source)
        if "SPLIT_K" in params:
            assert event.verdict is AttemptVerdict.INCORRECT
        elif params.get("BLOCK_M") == 16:  # CUTLASS points name their tile TILE_M
            assert event.verdict is AttemptVerdict.COMPILE_FAILED
        elif event.speedup > best * 1.01:
            assert event.verdict is AttemptVerdict.KEPT, event.reason
            best = event.speedup
        else:
            assert event.verdict is AttemptVerdict.REVERTED, event.reason
        assert event.best_speedup == best
        assert event.reason
    assert result.best is not None and result.best.speedup == best
    assert constants(result.best.source)["BLOCK_M"] == 256  # the search found the fast region
    kept = [e.index for e in events if e.verdict in (AttemptVerdict.KEPT, AttemptVerdict.BASELINE)]
    assert set(reporter.profiles) <= set(kept) and 0 in reporter.profiles
    assert result.stop_reason == "max_attempts"
    assert reporter.finished_with == (result.best, "max_attempts")
    assert reporter.started_calls == 1


def test_it_never_evaluates_the_same_source_twice():
    evaluator = FakeEvaluator(block_m_score)
    optimize(PROBLEM, config(evaluator, budget=Budget(wall_s=120, max_attempts=30)), ListReporter())
    assert len(evaluator.calls) == len(set(evaluator.calls))


def test_it_compiles_the_rest_of_a_batch_ahead():
    evaluator = FakeEvaluator(block_m_score)
    optimize(PROBLEM, config(evaluator, batch_size=4), ListReporter())
    assert evaluator.prefetched, "later candidates of a batch were handed over for compiling"
    assert set(evaluator.prefetched) <= set(evaluator.calls) | set(evaluator.prefetched)


def test_it_stops_after_a_plateau_of_reverts():
    evaluator, reporter = FakeEvaluator(lambda source: 1.0), ListReporter()
    result = optimize(PROBLEM, config(evaluator, plateau=5), reporter)
    assert result.stop_reason == "plateau"
    assert [e.verdict for e in reporter.events[1:]] == [AttemptVerdict.REVERTED] * 5


def test_it_stops_once_the_target_speedup_is_reached():
    result = optimize(
        PROBLEM, config(FakeEvaluator(block_m_score), target_speedup=1.2), ListReporter()
    )
    assert result.stop_reason == "target" and result.best.speedup >= 1.2


def test_it_stops_when_the_reporter_asks_to_cancel():
    reporter = ListReporter(cancel_after=3)
    result = optimize(PROBLEM, config(FakeEvaluator(block_m_score)), reporter)
    assert result.stop_reason == "cancelled" and len(reporter.events) == 3


def test_it_does_not_start_an_evaluation_past_the_gpu_budget():
    evaluator = FakeEvaluator(block_m_score)  # each evaluation reports 0.01 s of harness time
    result = optimize(
        PROBLEM, config(evaluator, budget=Budget(wall_s=None, gpu_s=0.055)), ListReporter()
    )
    assert result.stop_reason == "gpu_time"
    assert result.gpu_s <= 0.055 + 0.01
    assert len(evaluator.calls) == 5


def test_it_carries_on_after_a_failing_baseline():
    def score(source):
        return Verdict.CRASH if constants(source).get("BLOCK_M") == 64 else 0.9

    reporter = ListReporter()
    result = optimize(
        PROBLEM, config(FakeEvaluator(score), budget=Budget(wall_s=60, max_attempts=6)), reporter
    )
    assert reporter.events[0].verdict is AttemptVerdict.CRASH
    first_ok = next(e for e in reporter.events if e.speedup is not None)
    assert first_ok.verdict is AttemptVerdict.KEPT and "first correct" in first_ok.reason
    assert result.best is not None


def test_it_is_deterministic_for_a_seed():
    runs = []
    for _ in range(2):
        reporter = ListReporter()
        optimize(PROBLEM, config(FakeEvaluator(block_m_score), seed=5), reporter)
        runs.append([(e.family, e.params) for e in reporter.events])
    assert runs[0] == runs[1]


def test_it_refuses_a_config_without_any_cap():
    with pytest.raises(ValueError, match="at least one budget cap"):
        OptimizeConfig(budget=Budget(wall_s=None))


def test_it_verifies_the_best_with_the_full_protocol_inside_the_budget():
    evaluator, reporter = FakeEvaluator(block_m_score), ListReporter()
    config = OptimizeConfig(
        evaluator=evaluator, budget=Budget(wall_s=None, gpu_s=0.1), plateau=None
    )
    result = optimize(PROBLEM, config, reporter)
    assert result.stop_reason == "gpu_time"
    assert len(evaluator.calls) * 0.01 <= 0.1 * (1 - config.verify_reserve) + 1e-9  # the reserve
    assert evaluator.verified == [result.best.candidate_id]
    assert result.verified is True and result.final_speedups == {"torch": result.best.speedup}
    assert reporter.finished_with[0].evaluation["verdict"] == "passed"


def test_it_reports_a_best_that_fails_the_final_verification():
    class FlakyAtFullProtocol(FakeEvaluator):
        def evaluate(self, candidate, problem, *, timeout_s, full=False):
            if full:
                self.verified.append(candidate.id)
                return (
                    super()
                    .evaluate(candidate, problem, timeout_s=timeout_s)
                    .__class__(
                        candidate.id,
                        problem.key,
                        Verdict.INCORRECT,
                        CompileResult(True),
                        error="odd shape 127 wrong",
                    )
                )
            return super().evaluate(candidate, problem, timeout_s=timeout_s)

    config = OptimizeConfig(
        evaluator=FlakyAtFullProtocol(block_m_score), budget=Budget(wall_s=60, max_attempts=4)
    )
    result = optimize(PROBLEM, config, ListReporter())
    assert result.verified is False
    assert any("odd shape 127 wrong" in note for note in result.notes)


def test_it_stops_when_the_harness_itself_keeps_failing():
    reporter = ListReporter()
    result = optimize(PROBLEM, config(FakeEvaluator(lambda source: Verdict.INFRA_ERROR)), reporter)
    assert result.stop_reason == "harness_errors"
    assert [e.verdict for e in reporter.events] == [AttemptVerdict.ERROR] * 3


def test_it_profiles_at_most_the_configured_number_of_candidates():
    evaluator, reporter = FakeEvaluator(block_m_score), ListReporter()
    optimize(PROBLEM, config(evaluator, max_profiles=2), reporter)
    kept = [e for e in reporter.events if e.verdict is AttemptVerdict.KEPT]
    # The best at the end of a batch is profiled: the baseline, then one kept candidate.
    assert len(kept) >= 2 and len(reporter.profiles) == 2
    assert reporter.profiles[0] == 0 and reporter.profiles[1] in {e.index for e in kept}


def test_it_searches_only_the_families_the_evaluator_can_run():
    class TritonOnly(FakeEvaluator):
        def supports(self, backend: str) -> bool:  # a CPU worker: no nvcc, no GPU
            return backend == "triton"

    evaluator, reporter = TritonOnly(block_m_score), ListReporter()
    optimize(PROBLEM, config(evaluator), reporter)
    tried = {e.family for e in reporter.events}
    assert "matmul_cuda_wmma" not in tried and len(tried) >= 2

    evaluator, reporter = FakeEvaluator(block_m_score), ListReporter()
    optimize(PROBLEM, config(evaluator), reporter)
    assert "matmul_cuda_wmma" in {e.family for e in reporter.events}, "a GPU evaluator gets it"
