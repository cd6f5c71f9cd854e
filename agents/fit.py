"""The least budget a problem needs to reach a verified win: a screen of its opening batch
and of every point this machine's kernel library built for it, and one verification (issue 24:
a model job's largest GEMM got one attempt, 0.706x, before its slice ran out; a search is held
to the library's best point, so it must have the time to screen them all). The Amdahl plan
(agents/amdahl.py) funds no problem with less; the plan and the job page say why a problem was
left out.

The numbers are the search's own estimates before a run has measured anything: a screening
child's start-up, the opening batch compiled on every core (a CUDA C++ configuration is one
nvcc build, in parallel with the others; a library build is none: the screen takes it as
compiled, so with a library only the Triton renders are waited for), screened at the measured
rate, and the reserve the run keeps for one full verification (agents/stopping.py: this
machine's recent median where it has a GPU, agents.evaluator.verify_estimate_s).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agents.config import OptimizeConfig
from agents.evaluator import SCREEN_MIN_S, verify_estimate_s
from agents.stopping import ESTIMATE_SLACK
from harness import library as machine_library
from kernels import get_op
from kernels.problem import Problem

# Seconds per screened render, by where it runs: 3,809 per GPU-hour on an H100 (agent run at
# 4096x3584x18944 bf16, 2026-11-27: results/agents/matmul_4096x3584x18944_bf16_h100_budget5m
# .json); 28,416 per hour under the CPU interpreter at a shrunken matmul (a CPU run of matmul
# 256x256x256 quoted in webapp/jobs/tests/test_task_status.py; no results file).
SCREEN_S_PER_POINT = {"gpu": 3600.0 / 3809.0, "cpu": 3600.0 / 28416.0}
# Wall time to compile an opening batch on every core, by the slowest backend in it: a CUTLASS
# configuration builds in ~80 s (all of them in parallel); Triton renders in a few seconds each.
COMPILE_WALL_S = {"cuda": 90.0, "triton": 15.0}


@dataclass(frozen=True)
class Least:
    points: int  # the opening batch and the library: the screen it needs at least
    screen_s: float  # start-up, compiles and the screen of those points
    verify_s: float  # one full verification, with the run's slack
    library: int = 0  # of the points, this machine's library builds for the problem

    @property
    def total_s(self) -> float:
        return self.screen_s + self.verify_s

    def describe(self) -> str:
        built = f", {self.library} of them the machine's library" if self.library else ""
        return (
            f"a screen of {self.points} points{built} (~{self.screen_s:.0f} s) and one"
            f" verification (~{self.verify_s:.0f} s)"
        )


def least_budget(problem: Problem, *, gpu: bool, config: OptimizeConfig | None = None) -> Least:
    """What a search on `problem` needs at least, on a GPU worker or under the interpreter."""
    config = config or OptimizeConfig()
    op = get_op(problem.op)
    families = op.families_for(problem)
    backends = {f.backend for f in families if gpu or f.backend == "triton"}
    # No CUDA C++ runs on a CPU worker: no library either.
    library = len(machine_library.points_for(problem)) if gpu else 0
    opening = len(op.starting_points(problem)) + len(families)  # the search's fixed start
    points = max(config.screen_batch, opening + library) if library else config.screen_batch
    if library:
        backends = {"triton"} & backends
    compile_s = max((COMPILE_WALL_S.get(b, 0.0) for b in backends), default=0.0) if gpu else 0.0
    screen_s = SCREEN_MIN_S + compile_s + points * SCREEN_S_PER_POINT["gpu" if gpu else "cpu"]
    # On the GPU worker that plans the job, its own recent verifications (a full one went from
    # 36 to 21 s median on an H200 on 2026-11-28: a constant would under-fund the plan).
    verify_s = ESTIMATE_SLACK * verify_estimate_s(full=gpu)
    return Least(points, math.ceil(screen_s), math.ceil(verify_s), library)


def for_plan(*, gpu: bool) -> Callable[[Mapping[str, Any]], Least]:
    """`least` for agents.amdahl.make_plan: a plan group's problem dict -> what it needs."""
    return lambda problem: least_budget(Problem.from_dict(dict(problem)), gpu=gpu)
