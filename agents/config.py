"""One typed configuration for an optimization run, passed in; nodes never read os.environ.

`OptimizeConfig.from_env` is the only place environment variables are read, and only the CLI
and the Celery worker (the edges) call it.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.evaluator import Evaluator


class Provider(enum.StrEnum):
    OFFLINE = "offline"  # playbook + learning search over family parameters; no network
    LLM = "llm"  # litellm, any provider string


@dataclass(frozen=True)
class Budget:
    """Hard caps. None means no cap on that quantity; at least one cap must be set."""

    wall_s: float | None = 600.0  # wall time of the whole run, across resumes
    gpu_s: float | None = None  # harness time (screen + verify + profile), summed
    llm_tokens: int | None = None  # prompt + completion tokens, summed over calls
    llm_cost_usd: float | None = None  # litellm.completion_cost, summed
    max_attempts: int | None = None  # candidates judged (full verifications and checks)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class LLMSettings:
    model: str = "openai/gpt-4o-mini"  # any litellm provider string
    api_base: str | None = None  # e.g. a vLLM server or the tests' fake server
    api_key: str | None = None  # resolved from the environment at the edge, never in nodes
    timeout_s: float = 120.0  # per attempt; litellm's own default (600 s) is too long to hang
    retries: int = 2  # for timeouts, rate limits and 5xx, with exponential backoff
    backoff_s: float = 2.0  # first wait; doubles each retry
    max_output_tokens: int = 8192
    temperature: float = 0.2
    # Prices for models litellm does not know ($ per token); without them an unknown model
    # can only run when no cost cap is set (R7.2: fail closed).
    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None
    reply_retries: int = 2  # extra replies asked for when a plan or code fails our checks


@dataclass(frozen=True)
class OptimizeConfig:
    budget: Budget = field(default_factory=Budget)
    planner: Provider = Provider.OFFLINE
    coder: Provider = Provider.OFFLINE
    llm: LLMSettings = field(default_factory=LLMSettings)
    seed: int = 0
    baseline: str = "torch"  # which harness baseline the speedup is measured against
    plateau: int | None = 12  # stop after this many rounds in a row without a new best
    target_speedup: float | None = None  # stop once the best reaches this speedup
    roof_pct: float | None = None  # stop once the best reaches this % of the roof
    # Tier one, the screen (agents/tiers.py): renders of our families handed to it per planner
    # step, and how many of each round's fastest go on to full verification (tier two).
    screen_batch: int = 48
    finalists: int = 2
    # Built library points (harness/library.py) fill the first batch after the starting points
    # and the defaults, then this share of every later batch until all are screened.
    library_share: float = 0.5
    batch_size: int = 4  # points an LLM plan may name; LLM-written candidates per step
    min_gain: float = 0.01  # a keep needs more than max(noise, min_gain) relative gain
    profile: bool = True  # profile every new best (ncu costs seconds each)
    max_profiles: int | None = None  # at most this many profiles
    quick: bool = True  # the harness's quick mode for untrusted code's check (tier one for it)
    eval_timeout_s: float = 300.0  # per harness call, shortened near the caps
    # Tier two is the harness's full protocol (every correctness stage, anti-cheat, timing,
    # every baseline; compute-sanitizer memcheck with sanitize_final). False: the quick
    # protocol against `baseline` only (short slices of a model job).
    full_protocol: bool = True
    sanitize_final: bool = True
    # Seconds one full verification takes, for the reserve kept back for the last one (the
    # caps include it). None: the evaluator's estimate until this run has measured one.
    verify_estimate_s: float | None = None
    # Compile the next LLM-written candidates in sandboxed children while the GPU times one
    # (harness.precompile). None: when a GPU is visible. precompile_workers None: the usable cores
    # less two, at most 8. The screen compiles renders on every core less two on its own.
    precompile: bool | None = None
    precompile_workers: int | None = None
    # Dependency injection: None means the real harness. Tests pass a fake for speed.
    evaluator: Evaluator | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        caps = self.budget.to_dict().values()
        if all(cap is None for cap in caps):
            raise ValueError(
                "set at least one budget cap (wall time, GPU s, tokens, cost, attempts)"
            )
        if self.batch_size < 1 or self.screen_batch < 1 or self.finalists < 1:
            raise ValueError("batch_size, screen_batch and finalists must be at least 1")

    @property
    def uses_llm(self) -> bool:
        return Provider.LLM in (self.planner, self.coder)

    def with_(self, **changes: Any) -> OptimizeConfig:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> OptimizeConfig:
        """Build from KF_* variables (the edge: CLI, Celery worker); keyword overrides win."""
        env = dict(os.environ if environ is None else environ)
        llm_fields: dict[str, Any] = {}
        if "KF_LLM_MODEL" in env:
            llm_fields["model"] = env["KF_LLM_MODEL"]
        if "KF_LLM_API_BASE" in env:
            llm_fields["api_base"] = env["KF_LLM_API_BASE"]
        if "KF_LLM_TIMEOUT_S" in env:
            llm_fields["timeout_s"] = float(env["KF_LLM_TIMEOUT_S"])
        llm_fields["api_key"] = env.get("KF_LLM_API_KEY") or _provider_key(
            llm_fields.get("model", LLMSettings.model), env
        )
        base = cls(llm=LLMSettings(**llm_fields))
        if "KF_PLANNER" in env:
            base = replace(base, planner=Provider(env["KF_PLANNER"]))
        if "KF_CODER" in env:
            base = replace(base, coder=Provider(env["KF_CODER"]))
        return replace(base, **overrides)


def _provider_key(model: str, env: dict[str, str]) -> str | None:
    """The conventional key variable of the model's provider, e.g. OPENAI_API_KEY."""
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return env.get(f"{provider.upper().replace('-', '_')}_API_KEY")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """'10m' -> 600.0, '90s' -> 90.0, '1.5h' -> 5400.0, '45' -> 45.0 (seconds)."""
    match = _DURATION.match(text.lower())
    if not match:
        raise ValueError(f"duration {text!r}: use a number with s, m or h, e.g. 10m")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
