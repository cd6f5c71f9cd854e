"""agents/: what to try next. A LangGraph planner -> coder -> judge -> profiler loop over the
harness, with an offline provider (playbook + learning search) and an LLM provider (litellm).

Public entry: optimize(problem, config, reporter, *, thread_id=None, checkpointer_url=None).
"""

from agents.config import Budget, LLMSettings, OptimizeConfig, Provider

try:
    from agents.optimize import OptimizeResult, optimize
except ModuleNotFoundError as _missing:
    # Without LangGraph (a GPU box that only screens our families: python -m
    # benchmarks.model_job --optimizer screen imports agents.amdahl) the package still imports;
    # running the agent says what is missing.
    if not (_missing.name or "").startswith("langgraph"):
        raise
    _why = f"the agent needs LangGraph ({_missing}); pip install -r requirements.txt"

    # Placeholders so imports of the names still work; mypy checks the real ones above.
    class OptimizeResult:  # type: ignore[no-redef]  # noqa: D101
        def __init__(self, *args, **kwargs):
            raise ModuleNotFoundError(_why)

    def optimize(*args, **kwargs):  # type: ignore[misc]
        raise ModuleNotFoundError(_why)


__all__ = ["Budget", "LLMSettings", "OptimizeConfig", "OptimizeResult", "Provider", "optimize"]
