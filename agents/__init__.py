"""agents/: what to try next. A LangGraph planner -> coder -> judge -> profiler loop over the
harness, with an offline provider (playbook + learning search) and an LLM provider (litellm).

Public entry: optimize(problem, config, reporter, *, thread_id=None, checkpointer_url=None).
"""

from agents.config import Budget, LLMSettings, OptimizeConfig, Provider

__all__ = ["Budget", "LLMSettings", "OptimizeConfig", "OptimizeResult", "Provider", "optimize"]


def __getattr__(name: str):
    # Imported on first use: agents.optimize needs LangGraph, which a model job that only
    # screens our own families (python -m agents.model_job --optimizer screen) does not.
    if name in ("OptimizeResult", "optimize"):
        from agents import optimize as _optimize

        return getattr(_optimize, name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
