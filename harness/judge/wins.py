"""Never ship a loss: does a kernel beat every baseline it was timed against, beyond noise?

The one rule, used by the agent's outcome (agents/tiers.py), the worker that records a result
for the web app (Iteration.beats_baselines, which the web app ranks by) and the benchmark
(benchmarks/verdict.py):

  for every baseline timed beside the kernel (same process, interleaved), the lower bound of
  its speedup (baseline median / kernel median) is above 1; the lower bound is the bootstrap
  95 % interval's (harness.timing.speedup_ci) where there is one, else speedup / (1 + noise).

Every baseline, not only the fastest by median: a slower baseline with a wide interval can
still be a tie, and a tie ships nothing. No baseline timed, or a speedup that is not a finite
number, beats nothing. The judge's `min_gain` is not part of it: that margin decides whether
a candidate replaces the best one (search effort), not whether a kernel is a loss.

Pure Python (no torch), so anything above the harness can apply it to stored numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.results import Timings


@dataclass(frozen=True)
class Margin:
    """The kernel against one baseline."""

    baseline: str  # the harness's name: "torch", "compile", "cublaslt", ...
    speedup: float  # baseline median / kernel median
    low: float  # the lower bound the rule compares with 1 (NaN when the speedup is no number)
    ci: tuple[float, float] | None = None  # the bootstrap 95 % interval, when there is one

    @property
    def beaten(self) -> bool:
        return self.low > 1.0  # False for NaN


@dataclass(frozen=True)
class BaselineCall:
    """The decision and what it was made from (one Margin per baseline timed)."""

    margins: tuple[Margin, ...] = ()

    @property
    def beats(self) -> bool:
        return bool(self.margins) and all(m.beaten for m in self.margins)

    @property
    def fastest(self) -> Margin | None:
        """The fastest baseline (the smallest speedup): what a user would otherwise run."""
        timed = [m for m in self.margins if _finite(m.speedup)]
        return min(timed, key=lambda m: m.speedup) if timed else None

    @property
    def closest(self) -> Margin | None:
        """The baseline that decided the call: the smallest lower bound."""
        if not self.margins:
            return None
        return min(self.margins, key=lambda m: m.low if _finite(m.low) else -math.inf)

    def describe(self) -> str:
        m = self.closest
        if m is None:
            return "no baseline timed"
        low = f"{m.low:.3f}" if _finite(m.low) else "none"
        word = "beyond" if self.beats else "not beyond"
        return f"{m.speedup:.3f}x {m.baseline} (lower bound {low}): {word} noise"


def beats_baselines(
    speedups: Mapping[str, Any],
    speedup_ci: Mapping[str, Any] | None = None,
    noise: Any = 0.0,
) -> BaselineCall:
    """The rule on a result's numbers (Timings' fields, typed or as stored JSON: `noise` may
    be missing or no number there, which counts as none)."""
    intervals = speedup_ci or {}
    spread = float(noise) if _finite(noise) and noise > 0 else 0.0
    margins = []
    for name, speedup in speedups.items():
        if not _finite(speedup):
            margins.append(Margin(name, math.nan, math.nan))
            continue
        ci = _interval(intervals.get(name))
        low = ci[0] if ci is not None else float(speedup) / (1.0 + spread)
        margins.append(Margin(name, float(speedup), low, ci))
    return BaselineCall(tuple(margins))


def of_timings(timings: Timings | Mapping[str, Any] | None) -> BaselineCall:
    """The rule on an Evaluation's timings, typed or as stored (Evaluation.to_dict()); none:
    beats nothing."""
    if timings is None:
        return BaselineCall()
    if isinstance(timings, Timings):
        return beats_baselines(timings.speedups, timings.speedup_ci, timings.noise)
    speedups = timings.get("speedups")
    if not isinstance(speedups, Mapping):
        return BaselineCall()
    intervals = timings.get("speedup_ci")
    return beats_baselines(
        speedups, intervals if isinstance(intervals, Mapping) else None, timings.get("noise")
    )


def of_samples(samples_us: Mapping[str, Sequence[float]]) -> BaselineCall:
    """The rule on raw samples: "candidate" and each baseline, timed in the same run."""
    from harness.timing import speedup_ci  # imports torch: only callers with samples pay it

    cand = list(samples_us.get("candidate") or [])
    baselines = {k: list(v) for k, v in samples_us.items() if k != "candidate" and v}
    if not cand or not baselines:
        return BaselineCall()
    cand_median = statistics.median(cand)
    speedups = {k: statistics.median(v) / cand_median for k, v in baselines.items()}
    intervals = {k: speedup_ci(v, cand) for k, v in baselines.items()}
    return beats_baselines(speedups, intervals)


def _interval(value: Any) -> tuple[float, float] | None:
    # The upper bound may be inf (a resample with a zero median); only the lower one is used.
    if isinstance(value, list | tuple) and len(value) == 2 and _finite(value[0]):
        return float(value[0]), float(value[1])
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
