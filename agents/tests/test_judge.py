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
        "screen_speedup": None,
        "speedups": {"torch": speedup},
        "evaluation": {},
    }


def test_it_keeps_a_candidate_faster_than_the_best_by_more_than_the_noise():
    d = decide(evaluation(1.10), best(1.00), CONFIG)
    assert d.verdict is AttemptVerdict.KEPT and d.speedup == 1.10


def test_it_reverts_a_gain_inside_the_measured_noise():
    d = decide(evaluation(1.03, noise=0.05), best(1.00), CONFIG)
    assert d.verdict is AttemptVerdict.REVERTED
    assert "noise 5.0%" in d.reason


def test_it_uses_the_incumbents_noise_when_it_is_larger():
    d = decide(evaluation(1.03, noise=0.0), best(1.00, noise=0.04), CONFIG)
    assert d.verdict is AttemptVerdict.REVERTED


def test_it_keeps_the_incumbent_on_a_tie():
    assert decide(evaluation(1.0), best(1.0), CONFIG).verdict is AttemptVerdict.REVERTED


def test_it_keeps_the_first_verified_candidate_even_when_slower_than_the_baseline():
    # The best is the fastest verified kernel; whether it ships is the outcome's business.
    d = decide(evaluation(0.8), None, CONFIG)
    assert d.verdict is AttemptVerdict.KEPT and d.speedup == 0.8


def test_it_takes_every_failure_verdict_from_the_harness_by_name():
    # One definition: harness.results.Verdict; the attempt's verdict is its namesake.
    for harness_verdict in Verdict:
        if harness_verdict is Verdict.PASSED:
            continue
        d = decide(evaluation(None, verdict=harness_verdict), best(1.0), CONFIG)
        assert d.verdict is AttemptVerdict[harness_verdict.name] and d.reason == "boom"
    # ... and the values the database has stored since 0001 stay as they were.
    assert AttemptVerdict.COMPILE_ERROR.value == "compile_failed"
    assert AttemptVerdict.INFRA_ERROR.value == "error"


def test_it_never_keeps_an_implausible_result():
    d = decide(evaluation(50.0, implausible=True), best(1.0), CONFIG)
    assert d.verdict is AttemptVerdict.CHEAT


def test_its_reasons_keep_interpreter_sized_ratios_readable_and_say_where_they_were_timed():
    """Issue 17: "0.001x beats best 0.001x by +85.9%" hid both numbers."""
    d = decide(evaluation(0.00123, regime=Regime.INTERPRETER), best(0.000662), CONFIG)
    assert d.verdict is AttemptVerdict.KEPT
    assert d.reason.startswith("0.00123x beats best 0.000662x by +85.8%")
    assert d.reason.endswith("(CPU interpreter)")
    on_gpu = decide(evaluation(1.234), best(1.1), CONFIG).reason
    assert on_gpu.startswith("1.23x beats best 1.1x") and "interpreter" not in on_gpu


def test_a_slower_candidate_is_called_slower_not_a_tie_within_noise():
    """Issue 27: "0.000403x vs best 0.0127x: -96.8%, not above noise 46.1%" read as a tie."""
    slower = decide(
        evaluation(0.000403, noise=0.461, regime=Regime.INTERPRETER), best(0.0127), CONFIG
    )
    assert slower.verdict is AttemptVerdict.REVERTED
    assert slower.reason == "0.000403x is slower than best 0.0127x (-96.8%) (CPU interpreter)"
    tie = decide(evaluation(1.02, noise=0.05), best(1.00), CONFIG).reason
    assert tie == "1.02x vs best 1x: +2.0%, within noise 5.0%"
