"""The run's outcome and the event the worker stores read one rule (harness/judge/wins.py): a best
ships only if it beats every baseline of its full-protocol evaluation beyond noise."""

from agents import tiers
from agents.attempt import Attempt
from agents.config import Budget, OptimizeConfig
from agents.reporting import AttemptVerdict
from agents.state import Pending
from harness.results import CompileResult, Evaluation, Regime, Timings, TimingStats, Verdict

CONFIG = OptimizeConfig(budget=Budget(wall_s=60), min_gain=0.01)


def evaluation(speedups: dict[str, float], cis: dict[str, tuple[float, float]]) -> Evaluation:
    stats = TimingStats(10.0, 0.1, 10.0, 9.9, 50, 0.001)
    first = next(iter(cis.values()))
    noise = (first[1] - first[0]) / 2 / next(iter(speedups.values()))
    timings = Timings(
        Regime.OFFLINE,
        "kf-timing-v1",
        stats,
        dict.fromkeys(speedups, stats),
        speedups=speedups,
        speedup_ci=cis,
        noise=noise,
    )
    return Evaluation("c", "p", Verdict.PASSED, CompileResult(True), timings=timings)


def kept(ev: Evaluation) -> Attempt:
    item: Pending = {
        "source": "def run(*a, out): pass\n",
        "family": "f",
        "params": {},
        "hypothesis": "h",
        "parent": None,
        "origin": "family:f",
        "tier": "verify",
        "screen_speedup": None,
        "llm_tokens": 0,
        "llm_cost_usd": 0.0,
        "error": "",
    }
    assert ev.timings is not None
    return Attempt(0, item, "c", AttemptVerdict.KEPT, "r", ev, ev.timings.speedups["torch"],
                   None, 1.0, 1.0)  # fmt: skip


def test_a_tie_with_any_baseline_ships_nothing_and_the_event_says_so():
    # torch's interval is narrow and far above 1 (the agent's copy took its half-width as the
    # noise of every baseline); compile's reaches below 1.
    attempt = kept(evaluation({"torch": 1.3, "compile": 1.03}, {"torch": (1.29, 1.31), "compile": (0.99, 1.07)}))  # fmt: skip
    result = tiers.outcome({"best": attempt.best()}, CONFIG, "unused")
    assert result.kind == "baseline" and "compile" in result.reason
    assert attempt.event().beats_baselines is False


def test_a_win_beyond_noise_ships_even_below_the_judges_min_gain():
    # 0.8 % over the fastest baseline with an interval above 1: not a loss. min_gain is how much
    # a candidate must beat the best by to replace it, not part of the ship rule.
    attempt = kept(evaluation({"torch": 1.4, "compile": 1.008}, {"torch": (1.38, 1.42), "compile": (1.004, 1.012)}))  # fmt: skip
    result = tiers.outcome({"best": attempt.best()}, CONFIG, "unused")
    assert result.kind == "verified" and "(compile)" in result.reason
    assert attempt.event().beats_baselines is True


def test_a_slower_best_is_called_slower_once_and_says_where_it_was_timed():
    """Issue 27: "reaches 0.180x torch, 0.180x torch (lower bound 0.010): not beyond noise"
    named the baseline twice and called a 5.5x slowdown a matter of noise."""
    ev = evaluation({"torch": 0.18}, {"torch": (0.01, 0.35)})
    best = kept(ev).best()
    best["evaluation"]["timings"]["regime"] = "interpreter"
    result = tiers.outcome({"best": best}, CONFIG, "unused")
    assert result.kind == "baseline"
    assert result.reason == (
        "the best verified candidate (#0 f) is slower than torch (0.180x) (CPU interpreter "
        "timings): nothing beat the fastest baseline, PyTorch is kept"
    )


def test_a_tie_names_the_baseline_that_decided_it():
    ev = evaluation({"torch": 1.3, "compile": 1.03}, {"torch": (1.29, 1.31), "compile": (0.99, 1.07)})  # fmt: skip
    result = tiers.outcome({"best": kept(ev).best()}, CONFIG, "unused")
    assert "reaches 1.030x compile, within noise (lower bound 0.990)" in result.reason
    assert result.reason.count("compile") == 1


def test_a_cancelled_run_says_cancelled_not_that_the_budget_ran_short():
    from agents.nodes.finish import _why_none
    from agents.state import StopReason

    why = _why_none({"stop_reason": StopReason.CANCELLED}, None)  # type: ignore[arg-type]
    assert why == "cancelled before a candidate was fully verified"


def test_the_surrogates_extrapolations_stay_out_of_the_hypothesis():
    """Issue 27: a CPU run's hypothesis said "surrogate predicts 3.66e+03x"."""
    from agents.nodes.planner import _surrogate_guess

    assert _surrogate_guess(3.66e3) == "" and _surrogate_guess(None) == ""
    assert _surrogate_guess(1e-6) == ""
    assert _surrogate_guess(1.234) == "; surrogate predicts 1.23x on the screen"
