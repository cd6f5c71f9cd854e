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
