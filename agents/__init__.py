"""agents/: what to try next. A LangGraph planner -> coder -> judge -> profiler loop over the
harness, with an offline provider (playbook + learning search) and an LLM provider (litellm).

Public entry: optimize(problem, config, reporter, *, thread_id=None, checkpointer_url=None).
"""

from agents.config import Budget, LLMSettings, OptimizeConfig, Provider
from agents.optimize import OptimizeResult, optimize

__all__ = ["Budget", "LLMSettings", "OptimizeConfig", "OptimizeResult", "Provider", "optimize"]
