"""harness/: is a candidate kernel right, and how fast. See harness/README.md.

Public API (kept light to import: nothing here imports torch or touches CUDA until called):
    evaluate(candidate, problem, *, config=None) -> Evaluation
    profile(candidate, problem, *, config=None) -> Profile
    device_ceilings() -> DeviceInfo
    EvalConfig, Limits, benchmark (trusted in-process timing for trusted kernels)
    warm_up(problem): device ceilings and the cuBLASLt build ahead of the first full evaluation
    harness.screen: Screener / screen() rank renders of our own families (tier one of a search)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.config import EvalConfig, Limits
from harness.precompile import PrecompileResult, precompile
from harness.results import (
    Backend,
    Candidate,
    DeviceInfo,
    Evaluation,
    Profile,
    Regime,
    Verdict,
)

if TYPE_CHECKING:
    from kernels.problem import Problem

__all__ = [
    "Backend",
    "Candidate",
    "DeviceInfo",
    "EvalConfig",
    "Evaluation",
    "Limits",
    "PrecompileResult",
    "Profile",
    "Regime",
    "Verdict",
    "benchmark",
    "device_ceilings",
    "evaluate",
    "precompile",
    "profile",
    "warm_judge",
    "warm_up",
]


def evaluate(
    candidate: Candidate, problem: Problem, *, config: EvalConfig | None = None
) -> Evaluation:
    from harness.judge.evaluation import evaluate as _evaluate

    return _evaluate(candidate, problem, config=config)


def profile(candidate: Candidate, problem: Problem, *, config: EvalConfig | None = None) -> Profile:
    from harness.profiling import profile as _profile

    return _profile(candidate, problem, config=config)


def device_ceilings() -> DeviceInfo:
    from harness.device import device_ceilings as _ceilings

    return _ceilings()


def warm_up(problem: Problem, *, deadline_s: float | None = None) -> None:
    from harness.judge.evaluation import warm_up as _warm_up

    _warm_up(problem, deadline_s=deadline_s)


def warm_judge(config: EvalConfig | None = None) -> None:
    from harness.judge.evaluation import warm_judge as _warm_judge

    _warm_judge(config)


def benchmark(fn, **kwargs):
    """Trusted in-process timing (kf-timing-v2) of your own kernel; see harness/timing.py."""
    from harness.timing import benchmark as _benchmark

    return _benchmark(fn, **kwargs)
