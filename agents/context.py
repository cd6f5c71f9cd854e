"""What the nodes need that is not state: the config, the op, the evaluator, the reporter, the
LLM client and the clock. Passed as LangGraph's run context, so it is never checkpointed.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents.config import OptimizeConfig
from agents.evaluator import Evaluator, runs_backend
from agents.reporting import Reporter
from harness.results import Backend, Candidate
from kernels.problem import Family, Op, Problem

if TYPE_CHECKING:
    from agents.llm import LLMClient


@dataclass
class RunContext:
    config: OptimizeConfig
    problem: Problem
    op: Op
    evaluator: Evaluator
    reporter: Reporter
    llm: LLMClient | None = None
    elapsed_before: float = 0.0  # wall time spent by earlier runs of this thread (resume)
    started: float = field(default_factory=time.monotonic)
    prefetched: set[str] = field(default_factory=set)  # candidate ids already sent to compile
    reported: set[int] = field(default_factory=set)  # indexes emitted by this process
    screen_resumed: bool = False  # this process handed the screen what was queued before it

    @property
    def families(self) -> dict[str, Family]:
        """The op's families for this problem's layout that this evaluator can run (no CUDA
        C++ on a CPU-only worker)."""
        return {
            f.name: f
            for f in self.op.families_for(self.problem)
            if runs_backend(self.evaluator, f.backend)
        }

    @functools.cached_property
    def library(self) -> list[dict]:
        """This machine's built library points that fit the problem ({family, params}) in
        the families this evaluator runs: each costs the screen no compile
        (harness/library.py; [] where nothing is built)."""
        from harness import library

        families = self.families
        return [p for p in library.points_for(self.problem) if p["family"] in families]

    def candidate(
        self, source: str, family: str | None, origin: str = "", params: dict | None = None
    ) -> Candidate:
        """The harness candidate for a source: a CUDA C++ family's builds with nvcc (longer
        compile limit), everything else is Triton. A family point (family and params) claims
        to be that point's render: the judge checks the claim by rendering it again, and runs
        only an exact render in its own process (anything else is recorded in its sandbox)."""
        backend = next((f.backend for f in self.op.families() if f.name == family), "triton")
        if family and params:
            return Candidate(
                source, Backend.of_family(backend), origin, family, tuple(sorted(params.items()))
            )
        return Candidate(source=source, backend=Backend.of_family(backend), origin=origin)

    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.started)
