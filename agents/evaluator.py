"""How the nodes reach the GPU: the harness's public functions, behind one seam.

The default is the real harness: `screen` (tier one, renders of our families only),
`evaluate` (the sandboxed protocol: quick for untrusted code's check, full for verification)
and `profile`. Tests inject a fake through OptimizeConfig.evaluator to keep unit tests fast;
the CI graph tests use the real one under Triton's interpreter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from harness.results import Candidate, CompileResult, Evaluation, Profile, Verdict
from harness.screen import ScreenPoint, ScreenResult
from kernels.problem import Problem

# Seconds one verification takes before this machine has measured one (agents/stopping.py keeps
# that much back for the last one). The full protocol (every baseline, compute-sanitizer) at
# 2048x6144x4096 bf16 takes 18-29 s on an H200 since 2026-11-28 (median 21.5 s, from 36 s:
# results/verify_cost_h200_*.json; an H100's took 47-56 s before, under compile load:
# side_stream_compile_load_h100.json), Llama-3's decode SwiGLU 24-33 s; the CPU interpreter's
# 6-14 s at 256^3 fp16 (verify_cost_cpu_256.json). The quick one took 17-31 s on an H200.
# Too much kept back ends a short task before its second screen round: the likely reason why
# issue 26's first try saw 120-s tasks stop on wall time at ~33 s with nothing kept, when 54 s
# of each was kept back.
VERIFY_ESTIMATE_S = {"full": 35.0, "quick": 30.0}


def verify_estimate_s(*, full: bool) -> float:
    """On a GPU, this machine's recent median for the protocol (harness/verify_times.py); else
    the constant: what a run keeps back for its final verification until it has measured one
    itself, and what a model job's plan counts for each problem's verification (agents/fit.py)."""
    from harness import verify_times
    from harness.device import gpu_visible

    protocol = "full" if full else "quick"
    known = verify_times.typical(protocol) if gpu_visible() else None
    return known if known is not None else VERIFY_ESTIMATE_S[protocol]


# Evaluations that end before the protocol's work (a build that failed, a dead sandbox, the
# harness's own fault): their durations say nothing of what a verification takes.
_NOT_A_FULL_RUN = (Verdict.COMPILE_ERROR, Verdict.CRASH, Verdict.INFRA_ERROR)

if TYPE_CHECKING:
    from agents.config import OptimizeConfig


class Evaluator(Protocol):
    def evaluate(
        self, candidate: Candidate, problem: Problem, *, timeout_s: float, full: bool = False
    ) -> Evaluation:
        """full=True: the harness's publishable protocol and every baseline that applies."""
        ...

    def screen(
        self,
        points: Sequence[ScreenPoint],
        problem: Problem,
        *,
        timeout_s: float,
        run_left_s: float,
        min_ready: int,
    ) -> ScreenResult:
        """Tier one: hand `points` to the screen (they start compiling), then screen whatever
        has compiled within timeout_s. Compiles may go on until run_left_s from now."""
        ...

    def verify_estimate_s(self, *, full: bool) -> float:
        """Seconds one evaluation of that protocol takes, before any was measured."""
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


def compile_stats(evaluator: object) -> dict[str, Any]:
    """The evaluator's compile-ahead counters, or {} for evaluators that keep none."""
    stats = getattr(evaluator, "compile_stats", None)
    return stats() if callable(stats) else {}


def prefetch_final(evaluator: object, candidate: Candidate, problem: Problem) -> None:
    """Compile the search's challenger ahead for its final, full verification, if the
    evaluator compiles ahead at all."""
    ahead = getattr(evaluator, "prefetch_final", None)
    if callable(ahead):
        ahead(candidate, problem)


def end_search(evaluator: object) -> None:
    """The search has stopped: drop the background work only it could use, if the evaluator
    keeps any, before the final verification needs the CPU cores."""
    end = getattr(evaluator, "end_search", None)
    if callable(end):
        end()


def begin_run(evaluator: object, problem: Problem, *, deadline_at: float) -> None:
    """Tell an evaluator that keeps background work when the run must end, if it wants to know."""
    begin = getattr(evaluator, "begin", None)
    if callable(begin):
        begin(problem, deadline_at=deadline_at)


def runs_backend(evaluator: object, backend: str) -> bool:
    """Whether the evaluator can run candidates of this backend; evaluators that don't say can."""
    supports = getattr(evaluator, "supports", None)
    return True if supports is None else bool(supports(backend))


@dataclass
class CompileStats:
    """What compiling ahead did in this process (a resumed run counts from its restart)."""

    workers: int = 0  # precompile threads (each one sandboxed child at a time)
    submitted: int = 0  # candidates handed over to compile ahead
    compiled: int = 0  # precompiles that ran a child and succeeded
    cache_hits: int = 0  # precompiles answered by the compile cache: same source seen before
    failed: int = 0  # precompiles that failed (compile errors included)
    rejected_early: int = 0  # compile errors found ahead: evaluated without touching the GPU
    used: int = 0  # evaluations whose candidate had been compiled ahead
    precompile_s: float = 0.0  # wall time of the precompile children, on the CPU side
    waited_s: float = 0.0  # time evaluations waited for a precompile still running
    # JIT work done ahead for candidates that were then evaluated, less any wait for it: the
    # compile seconds taken off the GPU's critical path.
    compile_s_saved: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# A screening child's start-up (torch, CUDA, the references and the baseline) before it screens
# anything: ~8-12 s on the H100 at 4096^3 (2026-11-24). A round shorter than this is not begun.
SCREEN_MIN_S = 20.0


# Subclasses the protocol (rather than only matching it) to inherit `supports`: without it a CPU
# worker was offered CUDA C++ families (agents.context.RunContext.families).
class HarnessEvaluator(Evaluator):
    """harness.evaluate / harness.profile with the run's quick mode, baselines and time limits.

    Compiling ahead: `prefetch` hands the next planned candidates to a thread pool (bounded by
    the CPU cores) that runs `harness.precompile` for each while the GPU times the current one;
    compiled kernels land in the harness's compile cache keyed by source hash, so the
    evaluation that follows loads them instead of compiling. A candidate whose precompile
    failed to compile is answered as a compile error without running the evaluation.
    """

    def __init__(self, config: OptimizeConfig) -> None:
        import harness  # imported here: the harness pulls in torch and triton
        from harness.config import EvalConfig, Limits
        from harness.device import gpu_visible, usable_cpus

        self._harness = harness
        self._config = config
        self._eval_config = EvalConfig
        self._limits = Limits
        # Under the CPU interpreter nothing compiles: a precompile would only run it twice.
        enabled = config.precompile if config.precompile is not None else gpu_visible()
        workers = config.precompile_workers or max(1, min(8, usable_cpus() - 2))
        self._pool = ThreadPoolExecutor(workers, "kf-precompile") if enabled else None
        self._ahead: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.stats = CompileStats(workers=workers if enabled else 0)
        self._screener: Any = None
        self.screen_min_s = SCREEN_MIN_S
        self._warm: threading.Thread | None = None
        self.deadline_at: float | None = None  # the run's end (time.monotonic())

    def begin(self, problem: Problem, *, deadline_at: float) -> None:
        """The run starts: nothing this evaluator starts in the background may outlive
        deadline_at. Meanwhile, measure the device's ceilings and build the cuBLASLt baseline
        (once per device, cached on disk), so the first full verification does not."""
        self.deadline_at = deadline_at
        if self._warm is None and self._config.full_protocol:
            left = deadline_at - time.monotonic()
            self._warm = threading.Thread(
                target=self._harness.warm_up,
                args=(problem,),
                kwargs={"deadline_s": left},
                name="kf-warm-up",
            )
            self._warm.start()

    def end_search(self) -> None:
        """Screen compiles still queued are dropped (nothing will screen them); running ones
        end within their limits. The final verification's judge compiles too (its
        torch.compile baseline): on 4x H200, finals behind 45-62 queued points took 35-42 s,
        behind 0-19 28-35 s (results/worker_scaling_h200x4_together.json; the shapes differ
        too, and the search's `final` record now shows the wait)."""
        if self._screener is not None:
            self._screener.close()

    def _left(self, default: float) -> float:
        if self.deadline_at is None:
            return default
        return max(1.0, min(default, self.deadline_at - time.monotonic()))

    def screen(
        self,
        points: Sequence[ScreenPoint],
        problem: Problem,
        *,
        timeout_s: float,
        run_left_s: float,
        min_ready: int,
    ) -> ScreenResult:
        from harness.screen import Screener

        now = time.monotonic()
        if self._screener is None:
            self._screener = Screener(problem, deadline_at=now + run_left_s)
        self._screener.deadline_at = now + run_left_s
        self._screener.submit(points)
        # Wait for compiles at most half the round: the screening child needs the rest.
        return self._screener.screen(
            deadline_at=now + timeout_s, min_ready=min_ready, max_wait_s=timeout_s / 2
        )

    def verify_estimate_s(self, *, full: bool) -> float:
        return verify_estimate_s(full=full)

    def _settings(self, timeout_s: float, *, full: bool = False) -> Any:
        """`timeout_s` caps the whole evaluate() call (every phase), not each phase."""
        if full and self._config.full_protocol:  # every baseline that applies on this device
            return self._eval_config(
                quick=False,
                baselines=None,
                limits=self._limits(wall_s=timeout_s),
                deadline_s=timeout_s,
                sanitize=self._config.sanitize_final,
            )
        baselines = tuple(dict.fromkeys(("torch", self._config.baseline)))
        return self._eval_config(
            quick=self._config.quick,
            baselines=baselines,
            limits=self._limits(wall_s=timeout_s),
            deadline_s=timeout_s,
        )

    def evaluate(
        self, candidate: Candidate, problem: Problem, *, timeout_s: float, full: bool = False
    ) -> Evaluation:
        started = time.monotonic()
        rejected = self._await_ahead(candidate, problem, timeout_s)
        if rejected is not None:
            return rejected
        timeout_s = max(1.0, timeout_s - (time.monotonic() - started))
        settings = self._settings(timeout_s, full=full)
        evaluation = self._harness.evaluate(candidate, problem, config=settings)
        if evaluation.verdict not in _NOT_A_FULL_RUN and settings.device != "cpu":
            from harness import verify_times
            from harness.device import gpu_visible

            if gpu_visible():
                protocol = "full" if full and self._config.full_protocol else "quick"
                # From the call's start: the reserve it estimates must cover the wait for
                # the compile ahead too (the final verification's timeout does).
                verify_times.record(protocol, time.monotonic() - started)
        return evaluation

    def profile(self, candidate: Candidate, problem: Problem, *, timeout_s: float) -> Profile:
        return self._harness.profile(candidate, problem, config=self._settings(timeout_s))

    def prefetch(self, candidates: Sequence[Candidate], problem: Problem) -> None:
        if self._pool is None:
            return
        self._ahead_of(candidates, problem, self._settings(self._left(self._config.eval_timeout_s)))

    def prefetch_final(self, candidate: Candidate, problem: Problem) -> None:
        """The challenger at every shape of the full protocol, while the search goes on: the
        final verification's judge would otherwise JIT-compile the sweep's specializations on
        its own clock (a full verification took 46-56 s on an H100, cases 13 s of it)."""
        if self._pool is None or not self._config.full_protocol:
            return
        settings = self._settings(self._left(self._config.eval_timeout_s), full=True)
        self._ahead_of([candidate], problem, settings)
        # Its judge too: a warm spare imports torch, Dynamo and the harness now, not on the
        # verification's clock (3.5-5.8 s of compile_imports each on an H200).
        self._harness.warm_judge(settings)

    def _ahead_of(self, candidates: Sequence[Candidate], problem: Problem, settings: Any) -> None:
        """Hand each candidate not already on its way to the pool, compiled for `settings`."""
        assert self._pool is not None
        for candidate in candidates:
            with self._lock:
                if candidate.id in self._ahead:
                    continue
                self.stats.submitted += 1
                self._ahead[candidate.id] = self._pool.submit(
                    self._precompile, candidate, problem, settings
                )

    def _precompile(self, candidate: Candidate, problem: Problem, settings: Any) -> Any:
        result = self._harness.precompile(candidate, problem, config=settings)
        with self._lock:
            self.stats.precompile_s += result.seconds
            if result.cached:
                self.stats.cache_hits += 1
            elif result.ok:
                self.stats.compiled += 1
            else:
                self.stats.failed += 1
        return result

    def _await_ahead(
        self, candidate: Candidate, problem: Problem, timeout_s: float
    ) -> Evaluation | None:
        """Wait for this candidate's precompile, if one was started; a compile error ends here."""
        with self._lock:
            future = self._ahead.pop(candidate.id, None)
        if future is None:
            return None
        started = time.monotonic()
        try:
            result = future.result(timeout=max(1.0, timeout_s))
        except Exception:  # a precompile that broke or hangs: the evaluation decides alone
            return None
        waited = time.monotonic() - started
        with self._lock:
            self.stats.used += 1
            self.stats.waited_s += waited
            self.stats.compile_s_saved += max(0.0, result.compile_s - waited)
        if result.ok or result.failure != "compile":
            return None  # "raised", a timeout or a crash: not conclusive, evaluate normally
        with self._lock:
            self.stats.rejected_early += 1
        return Evaluation(
            candidate_id=candidate.id,
            problem_key=problem.key,
            verdict=Verdict.COMPILE_ERROR,
            compile=CompileResult(ok=False, log=result.error[-6000:], seconds=result.compile_s),
            error="compile error found when compiling ahead: " + result.error[-2000:],
            duration_s=waited,
        )

    def compile_stats(self) -> dict[str, Any]:
        with self._lock:
            return self.stats.to_dict()

    def close(self) -> None:
        if self._pool is not None:
            # Queued precompiles are dropped; running ones end within their sandbox limits.
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._screener is not None:
            self._screener.close()  # running compile children end by the run's deadline
