"""How the judge and profiler reach the GPU: the harness's public functions, behind one seam.

The default is the real harness. Tests inject a fake through OptimizeConfig.evaluator to keep
unit tests fast; the CI graph tests use the real one under Triton's interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from harness.results import Candidate, Evaluation, Profile
from kernels.problem import Problem

if TYPE_CHECKING:
    from agents.config import OptimizeConfig


class Evaluator(Protocol):
    def evaluate(
        self, candidate: Candidate, problem: Problem, *, timeout_s: float, full: bool = False
    ) -> Evaluation:
        """full=True: the harness's publishable protocol and every baseline that applies."""
        ...

    def supports(self, backend: str) -> bool:
        # CUDA C++ candidates need nvcc and a GPU; Triton runs anywhere (the CPU interpreter).
        from harness.device import gpu_visible

        return backend != "cuda" or gpu_visible()

    def profile(self, candidate: Candidate, problem: Problem, *, timeout_s: float) -> Profile: ...

    def prefetch(self, candidates: Sequence[Candidate], problem: Problem) -> None:
        """Compile candidates ahead (CPU cores) while the GPU times another; may do nothing."""
        ...

    def close(self) -> None: ...


def runs_backend(evaluator: object, backend: str) -> bool:
    """Whether the evaluator can run candidates of this backend; evaluators that don't say can."""
    supports = getattr(evaluator, "supports", None)
    return True if supports is None else bool(supports(backend))


class HarnessEvaluator:
    """harness.evaluate / harness.profile with the run's quick mode, baselines and time limits."""

    def __init__(self, config: OptimizeConfig) -> None:
        import harness  # imported here: the harness pulls in torch and triton
        from harness.config import EvalConfig, Limits

        self._harness = harness
        self._config = config
        self._eval_config = EvalConfig
        self._limits = Limits

    def _settings(self, timeout_s: float, *, full: bool = False) -> Any:
        if full:  # None: every baseline that applies on this device (harness/baselines.py)
            return self._eval_config(
                quick=False, baselines=None, limits=self._limits(wall_s=timeout_s)
            )
        baselines = tuple(dict.fromkeys(("torch", self._config.baseline)))
        return self._eval_config(
            quick=self._config.quick,
            baselines=baselines,
            limits=self._limits(wall_s=timeout_s),
        )

    def evaluate(
        self, candidate: Candidate, problem: Problem, *, timeout_s: float, full: bool = False
    ) -> Evaluation:
        settings = self._settings(timeout_s, full=full)
        return self._harness.evaluate(candidate, problem, config=settings)

    def profile(self, candidate: Candidate, problem: Problem, *, timeout_s: float) -> Profile:
        return self._harness.profile(candidate, problem, config=self._settings(timeout_s))

    def prefetch(self, candidates: Sequence[Candidate], problem: Problem) -> None:
        precompile = getattr(self._harness, "precompile", None)
        if precompile is not None:
            precompile(list(candidates), problem)

    def close(self) -> None:
        return None
