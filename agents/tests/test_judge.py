from agents.config import Budget, OptimizeConfig
from agents.nodes.judge import decide
from agents.reporting import AttemptVerdict
from harness.results import CompileResult, Evaluation, Regime, Timings, TimingStats, Verdict

CONFIG = OptimizeConfig(budget=Budget(wall_s=60), min_gain=0.01)


def evaluation(
    speedup: float | None,
    *,
    noise: float = 0.01,
    verdict=Verdict.PASSED,
    implausible=False,
    regime=Regime.OFFLINE,
):
    timings = None
    if speedup is not None:
        stats = TimingStats(100 / speedup, 1.0, 100 / speedup, 100 / speedup, 20, noise)
        timings = Timings(regime, "v1", stats, speedups={"torch": speedup}, noise=noise)
    return Evaluation(
        "c",
        "p",
        verdict,
        CompileResult(True),
        timings=timings,
        implausible=implausible,
        error="boom" if verdict is not Verdict.PASSED else "",
    )


def best(speedup: float, noise: float = 0.01):
    return {
        "index": 0,
        "candidate_id": "b",
        "source": "",
        "family": "f",
        "params": {},
        "speedup": speedup,
        "median_us": 100 / speedup,
        "noise": noise,
        "pct_of_roof": None,
        "evaluation": {},
    }


def test_it_keeps_a_candidate_faster_than_the_best_by_more_than_the_noise():
    d = decide(evaluation(1.10), best(1.00), CONFIG, is_first=False)
    assert d.verdict is AttemptVerdict.KEPT and d.speedup == 1.10


def test_it_reverts_a_gain_inside_the_measured_noise():
    d = decide(evaluation(1.03, noise=0.05), best(1.00), CONFIG, is_first=False)
    assert d.verdict is AttemptVerdict.REVERTED
    assert "noise 5.0%" in d.reason


def test_it_uses_the_incumbents_noise_when_it_is_larger():
    d = decide(evaluation(1.03, noise=0.0), best(1.00, noise=0.04), CONFIG, is_first=False)
    assert d.verdict is AttemptVerdict.REVERTED


def test_it_keeps_the_incumbent_on_a_tie():
    assert (
        decide(evaluation(1.0), best(1.0), CONFIG, is_first=False).verdict
        is AttemptVerdict.REVERTED
    )


def test_it_marks_the_first_attempt_as_the_baseline():
    d = decide(evaluation(0.8), None, CONFIG, is_first=True)
    assert d.verdict is AttemptVerdict.BASELINE and d.speedup == 0.8


def test_it_keeps_the_first_correct_candidate_when_the_baseline_failed():
    assert decide(evaluation(0.5), None, CONFIG, is_first=False).verdict is AttemptVerdict.KEPT


def test_it_maps_harness_failures_to_attempt_verdicts():
    cases = {
        Verdict.COMPILE_ERROR: AttemptVerdict.COMPILE_FAILED,
        Verdict.INCORRECT: AttemptVerdict.INCORRECT,
        Verdict.CHEAT: AttemptVerdict.CHEAT,
        Verdict.TIMEOUT: AttemptVerdict.TIMEOUT,
        Verdict.CRASH: AttemptVerdict.CRASH,
        Verdict.INFRA_ERROR: AttemptVerdict.ERROR,
    }
    for harness_verdict, attempt_verdict in cases.items():
        d = decide(evaluation(None, verdict=harness_verdict), best(1.0), CONFIG, is_first=False)
        assert d.verdict is attempt_verdict and d.reason == "boom"


def test_it_never_keeps_an_implausible_result():
    d = decide(evaluation(50.0, implausible=True), best(1.0), CONFIG, is_first=False)
    assert d.verdict is AttemptVerdict.CHEAT


def test_its_reasons_keep_interpreter_sized_ratios_readable_and_say_where_they_were_timed():
    """Issue 17: "0.001x beats best 0.001x by +85.9%" hid both numbers."""
    d = decide(
        evaluation(0.00123, regime=Regime.INTERPRETER), best(0.000662), CONFIG, is_first=False
    )
    assert d.verdict is AttemptVerdict.KEPT
    assert d.reason.startswith("0.00123x beats best 0.000662x by +85.8%")
    assert d.reason.endswith("(CPU interpreter)")
    on_gpu = decide(evaluation(1.234), best(1.1), CONFIG, is_first=False).reason
    assert on_gpu.startswith("1.23x beats best 1.1x") and "interpreter" not in on_gpu
