"""The one place the worker chooses which agent runs a task.

Today that is the stand-in (agents/standin.py); switching to the real graph means changing
only `run_agent`.
"""

from __future__ import annotations

from django.conf import settings

from agents.reporting import Reporter
from agents.standin import run_standin
from kernels.problem import Problem


def run_agent(problem: Problem, reporter: Reporter, *, resume_from: int) -> None:
    run_standin(
        problem,
        reporter,
        iterations=settings.KF_STANDIN_ITERATIONS,
        pause_s=settings.KF_STANDIN_PAUSE_S,
        resume_from=resume_from,
    )
