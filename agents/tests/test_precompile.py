"""Compiling ahead on the CPU (harness.precompile), against the real harness and its sandbox
under Triton's interpreter. An untrusted source is recorded ahead (its plans filed in the
artifact store under the evaluation's key, so the evaluation records nothing again); a render
of our own family is compiled into the trusted caches the judge reads."""

import json
import os
import uuid

import pytest

from agents import Budget, OptimizeConfig, optimize
from agents.evaluator import VERIFY_ESTIMATE_S, HarnessEvaluator
from agents.tests.fakes import ListReporter
from harness import Backend, EvalConfig, evaluate, precompile
from harness.device import gpu_visible
from harness.judge import artifacts
from harness.judge.evaluation import record_problems
from harness.results import Candidate, Verdict
from kernels import get_op, parse_problem

PROBLEM = parse_problem("rmsnorm", "32x256", "fp32")
_ROWWISE = next(f for f in get_op("rmsnorm").families() if f.name == "rmsnorm_rowwise")
_PARAMS = _ROWWISE.default(PROBLEM)
GOOD = _ROWWISE.render(PROBLEM, _PARAMS)
BROKEN = GOOD + "\nimport kf_no_such_module  # fails at import, as a kernel that does not compile\n"
RAISES = "def run(x, w, *, out):\n    raise RuntimeError('probe only')\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "kf-cache"))


def _unclaimed(source: str) -> Candidate:
    """The render as an LLM would hand it in: untrusted, recorded and replayed."""
    return Candidate(source + f"\n# {uuid.uuid4().hex}\n")


def test_a_second_evaluation_of_the_same_source_reuses_its_recorded_plans():
    candidate = _unclaimed(GOOD)
    config = EvalConfig(quick=True)
    first = evaluate(candidate, PROBLEM, config=config)
    assert first.verdict is Verdict.PASSED, first.error
    assert (
        "candidate_record" in first.checks["phase_wall_s"] and not first.checks["plans"]["cached"]
    )
    second = evaluate(candidate, PROBLEM, config=config)
    assert second.verdict is Verdict.PASSED, second.error
    assert "candidate_record" not in second.checks["phase_wall_s"]
    assert second.checks["plans"] == {**first.checks["plans"], "cached": True}
    assert second.compile.cached


def test_a_precompile_records_once_per_source_and_the_evaluation_uses_it():
    raises = precompile(Candidate(RAISES), PROBLEM)
    # run() raises while recorded: not a compile error, and not a reason to keep the source
    assert not raises.ok and raises.failure == "raised" and "probe only" in raises.error

    candidate = _unclaimed(GOOD)
    recorded = precompile(candidate, PROBLEM)
    assert recorded.ok and not recorded.cached and recorded.seconds > 0, recorded.error
    again = precompile(candidate, PROBLEM)
    assert again.ok and again.cached and again.seconds == 0.0
    assert artifacts.load_plans(artifacts.store(), recorded.cache_key) is not None

    evaluation = evaluate(candidate, PROBLEM, config=EvalConfig(quick=True))
    assert evaluation.verdict is Verdict.PASSED, evaluation.error
    assert evaluation.checks["plans"]["cached"], evaluation.checks
    assert "candidate_record" not in evaluation.checks["phase_wall_s"]


def test_a_render_of_our_family_is_compiled_not_recorded():
    render = Candidate.of_render(GOOD, Backend.TRITON, _ROWWISE.name, _PARAMS)
    result = precompile(render, PROBLEM)
    assert result.ok and result.files == 0, result.error
    # At every shape its evaluation calls it at, not the screen's two (on a GPU the full
    # protocol's sweep adds more): the judge then JIT-compiles nothing on its own clock.
    shapes = record_problems(get_op("rmsnorm"), PROBLEM, EvalConfig(quick=True), gpu=False)
    assert result.shapes == len(shapes) > 2, (result, shapes)
    evaluation = evaluate(render, PROBLEM, config=EvalConfig(quick=True))
    assert evaluation.verdict is Verdict.PASSED, evaluation.error
    assert evaluation.checks["trusted_render"] and "plans" not in evaluation.checks


def test_a_precompile_failure_surfaces_as_a_compile_error_without_an_evaluation():
    broken = Candidate(source=BROKEN)
    result = precompile(broken, PROBLEM)
    assert not result.ok and result.failure == "compile"
    assert "kf_no_such_module" in result.error

    evaluator = HarnessEvaluator(OptimizeConfig(precompile=True, precompile_workers=2))
    try:
        evaluator.prefetch([broken, broken], PROBLEM)  # the same source is compiled once
        evaluation = evaluator.evaluate(broken, PROBLEM, timeout_s=120)
    finally:
        evaluator.close()
    assert evaluation.verdict is Verdict.COMPILE_ERROR and not evaluation.compile.ok
    assert "kf_no_such_module" in evaluation.compile.log
    assert "compiling ahead" in evaluation.error  # answered from the precompile
    stats = evaluator.compile_stats()
    assert stats["submitted"] == 1 and stats["rejected_early"] == 1 and stats["used"] == 1


@pytest.mark.slow
def test_the_graph_compiles_ahead_and_reports_throughput():
    reporter = ListReporter()
    config = OptimizeConfig(
        budget=Budget(wall_s=300, max_attempts=2),
        plateau=None,
        screen_batch=6,
        finalists=2,
        min_gain=-1.0,  # the round's second finalist goes to tier two too
        profile=False,
        full_protocol=False,
        precompile=True,
        precompile_workers=2,
    )
    result = optimize(PROBLEM, config, reporter)
    assert [e.index for e in reporter.events] == [0, 1]
    stats = result.compile
    # The round's first finalist (#0) is verified while its second (#1) compiles ahead.
    assert stats["submitted"] == 1 and stats["used"] == 1, stats
    assert stats["compiled"] == 1 and stats["workers"] == 2, stats
    summary = result.to_dict()
    assert summary["candidates_per_wall_hour"] > 0 and summary["candidates_per_gpu_hour"] > 0
    assert summary["compile_s_saved"] == stats["compile_s_saved"] >= 0.0


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_visible(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_recorded_candidate_is_not_recorded_again():
    problem = parse_problem("matmul", "2048x2048x2048", "bf16", "NN")
    family = get_op("matmul").families()[0]
    candidate = _unclaimed(family.render(problem, family.default(problem)))
    first = precompile(candidate, problem)
    assert first.ok and first.files > 0, first.error  # the cubins, filed by their hash
    evaluation = evaluate(candidate, problem, config=EvalConfig(quick=True))
    assert evaluation.verdict is Verdict.PASSED, evaluation.error
    assert evaluation.checks["plans"]["cached"], evaluation.checks
    record = {
        "device": evaluation.device.name if evaluation.device else "",
        "precompile": first.to_dict(),
        "evaluation_s": evaluation.duration_s,
        "phase_wall_s": evaluation.checks["phase_wall_s"],
    }
    if os.environ.get("KF_RESULTS_DIR"):
        out = os.path.join(os.environ["KF_RESULTS_DIR"], "precompile_gpu.json")
        with open(out, "w") as f:
            json.dump(record, f, indent=2)


def test_the_first_reserve_is_this_gpu_machines_own_verification_time(monkeypatch):
    # A run keeps back one full verification from its start; before it has measured one it
    # takes this machine's recent median (kept across runs), not a constant an H100 overran.
    from harness import verify_times

    evaluator = HarnessEvaluator(OptimizeConfig(precompile=False))
    monkeypatch.setattr("harness.device.gpu_visible", lambda: False)
    verify_times.record("full", 56.0)
    constant = VERIFY_ESTIMATE_S["full"]
    assert evaluator.verify_estimate_s(full=True) == constant  # the CPU interpreter
    monkeypatch.setattr("harness.device.gpu_visible", lambda: True)
    assert evaluator.verify_estimate_s(full=True) == 56.0
    assert evaluator.verify_estimate_s(full=False) == 30.0  # nothing measured for that protocol
    evaluator.close()
