"""The one rule for "beats the baseline beyond noise" (harness/judge/wins.py), on the cases where the
three copies it replaced (agents/tiers.py, webapp's selectors, benchmarks/verdict.py) disagreed.
"""

from __future__ import annotations

import math
import random

from harness.judge import wins
from harness.results import Regime, Timings, TimingStats


def samples(median_us: float, spread: float = 0.01, n: int = 60, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median_us * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_every_baseline_must_be_beaten_not_only_the_fastest_by_median():
    # cublaslt is the fastest by median and clearly beaten; compile is slower by median but
    # noisy, and its interval reaches below 1: a tie with one baseline ships nothing. (The
    # benchmark's copy looked only at the fastest baseline by median and called this a win.)
    call = wins.beats_baselines(
        {"cublaslt": 1.10, "compile": 1.15},
        {"cublaslt": (1.06, 1.14), "compile": (0.97, 1.40)},
    )
    assert not call.beats
    assert call.fastest.baseline == "cublaslt" and call.closest.baseline == "compile"
    assert "not beyond noise" in call.describe()


def test_the_interval_decides_not_the_first_baselines_noise():
    # The agent's copy took the relative half-width of the *first* baseline's interval as the
    # noise of every baseline: here torch's is narrow, cublaslt's interval reaches below 1.
    call = wins.beats_baselines(
        {"torch": 1.30, "cublaslt": 1.03}, {"torch": (1.29, 1.31), "cublaslt": (0.99, 1.07)}, 0.008
    )
    assert not call.beats
    call = wins.beats_baselines({"torch": 1.30, "cublaslt": 1.03}, {"torch": (1.29, 1.31)}, 0.008)
    assert call.beats  # no interval for cublaslt: 1.03 / 1.008 > 1


def test_without_an_interval_the_speedup_less_the_noise_decides():
    assert wins.beats_baselines({"torch": 1.02}, None, 0.01).beats
    assert not wins.beats_baselines({"torch": 1.02}, None, 0.03).beats


def test_nothing_timed_or_no_number_beats_nothing():
    assert not wins.beats_baselines({}).beats
    assert not wins.of_timings(None).beats
    assert not wins.beats_baselines({"torch": math.nan, "compile": 2.0}).beats
    assert not wins.beats_baselines({"torch": math.inf}).beats
    assert not wins.beats_baselines({"torch": 2.0}, {"torch": (math.nan, 3.0)}, 1.5).beats
    # An infinite upper bound (a resample with a zero median) still has a usable lower one.
    assert wins.beats_baselines({"torch": 2.0}, {"torch": (1.5, math.inf)}).beats


def test_typed_and_stored_timings_get_the_same_call():
    stats = TimingStats(10.0, 0.1, 10.0, 9.9, 50, 0.001)
    timings = Timings(
        Regime.OFFLINE,
        "kf-timing-v1",
        stats,
        {"torch": stats, "compile": stats},
        speedups={"torch": 1.5, "compile": 1.02},
        speedup_ci={"torch": (1.45, 1.55), "compile": (0.995, 1.04)},
        noise=0.03,
    )
    stored = {
        "speedups": {"torch": 1.5, "compile": 1.02},
        "speedup_ci": {"torch": [1.45, 1.55], "compile": [0.995, 1.04]},
        "noise": 0.03,
    }
    assert wins.of_timings(timings) == wins.of_timings(stored)
    assert not wins.of_timings(timings).beats
    assert not wins.of_timings({"speedups": "garbage"}).beats


def test_samples_are_judged_by_their_bootstrap_interval():
    clear = wins.of_samples({"candidate": samples(20), "torch": samples(31, seed=1)})
    assert clear.beats and clear.fastest.ci[0] > 1.0
    tie = wins.of_samples({"candidate": samples(20, 0.05), "torch": samples(20.1, 0.05, seed=1)})
    assert not tie.beats
    assert not wins.of_samples({"candidate": samples(20)}).beats
