"""The one place the worker chooses which agent runs a task, and with what budget.

KF_AGENT=graph (the default) runs the real LangGraph optimizer (agents.optimize) with the
offline planner, or the LLM one when KF_PLANNER/KF_CODER say so; KF_AGENT=standin runs the
stand-in, which the fast worker tests use because it needs no harness.
"""

from __future__ import annotations

import dataclasses

from django.conf import settings

from agents.reporting import Reporter
from agents.standin import run_standin
from kernels.problem import Problem


def run_agent(problem: Problem, reporter: Reporter, *, task_id: int, resume_from: int) -> None:
    if settings.KF_AGENT == "standin":
        run_standin(
            problem,
            reporter,
            iterations=settings.KF_STANDIN_ITERATIONS,
            pause_s=settings.KF_STANDIN_PAUSE_S,
            resume_from=resume_from,
        )
        return

    from agents import optimize
    from agents.config import OptimizeConfig
    from webapp.jobs.selectors import task_budget_s

    config = OptimizeConfig.from_env()
    budget_s = task_budget_s(task_id=task_id)  # a model job's: its Amdahl plan's slice
    # GPU seconds are the job's currency; wall time gets the same cap so a slow CPU worker
    # (Triton's interpreter) also ends, with whatever verified best it found.
    config = config.with_(
        budget=dataclasses.replace(config.budget, gpu_s=budget_s, wall_s=budget_s)
    )
    # The thread id is the task, so a re-run after a lost worker resumes from the checkpoint.
    optimize(
        problem,
        config,
        reporter,
        thread_id=f"task-{task_id}",
        checkpointer_url=settings.KF_CHECKPOINT_URL,
    )
