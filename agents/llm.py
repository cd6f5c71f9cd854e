"""The one way out to a language model, and the only module that imports litellm (P6, R7).

Every call has a timeout, retries only the retryable failures (timeouts, rate limits, 5xx,
dropped connections) with exponential backoff, and is accounted: tokens, cost
(litellm.completion_cost, or prices given in the settings), latency and retries. The token
and cost caps are checked before each call and fail closed.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

# Before the import: litellm otherwise fetches its price map from GitHub at import time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

from agents.config import LLMSettings  # noqa: E402

T = TypeVar("T")

litellm.suppress_debug_info = True
litellm.drop_params = True  # e.g. response_format where a provider lacks it


class LLMErrorKind(enum.StrEnum):
    MISSING_KEY = "missing_key"
    UNKNOWN_MODEL = "unknown_model"
    UNPRICED_MODEL = "unpriced_model"  # a cost cap is set but nobody knows this model's price
    RATE_LIMIT = "rate_limit"
    TIMEOUT = "timeout"
    PROVIDER = "provider"  # 5xx, connection refused, bad request...
    MALFORMED = "malformed"  # replies never passed our checks within the retry budget
    BUDGET = "budget"  # the token or cost cap is reached


class LLMError(Exception):
    def __init__(self, kind: LLMErrorKind, message: str) -> None:
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind


@dataclass
class CallRecord:
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    retries: int
    error: str = ""


@dataclass
class Accounting:
    """What this client spent; the graph copies the totals into its state."""

    tokens: int = 0
    cost_usd: float = 0.0
    calls: list[CallRecord] = field(default_factory=list)


_RETRYABLE = (
    litellm.Timeout,
    litellm.RateLimitError,
    litellm.InternalServerError,
    litellm.ServiceUnavailableError,
    litellm.APIConnectionError,
)


class LLMClient:
    def __init__(
        self,
        settings: LLMSettings,
        *,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        spent_tokens: int = 0,
        spent_cost_usd: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.spent = Accounting(tokens=spent_tokens, cost_usd=spent_cost_usd)
        self._sleep = sleep
        self._priced = self._check_ready()
        # The run's budget reaches here too: no call (retries and backoff included) goes past
        # this time.monotonic() (the nodes set it to where the search must stop).
        self.deadline_at: float | None = None

    def _check_ready(self) -> bool:
        """Fail early with a clear message: unknown provider, missing key, unknown price."""
        model = self.settings.model
        try:
            _, provider, _, _ = litellm.get_llm_provider(model, api_base=self.settings.api_base)
        except Exception as exc:
            raise LLMError(
                LLMErrorKind.UNKNOWN_MODEL,
                f"litellm cannot route model {model!r}; use 'provider/model', e.g. "
                f"'openai/gpt-4o-mini' or 'anthropic/claude-sonnet-4-5' ({_first_line(exc)})",
            ) from None
        env = litellm.validate_environment(
            model=model, api_key=self.settings.api_key, api_base=self.settings.api_base
        )
        if not env.get("keys_in_environment", False):
            missing = ", ".join(env.get("missing_keys") or ["an API key"])
            raise LLMError(
                LLMErrorKind.MISSING_KEY, f"model {model!r} needs {missing} (or --api-key)"
            )
        if self.settings.input_cost_per_token is not None:
            litellm.register_model(
                {
                    model: {
                        "input_cost_per_token": self.settings.input_cost_per_token,
                        "output_cost_per_token": self.settings.output_cost_per_token or 0.0,
                        "litellm_provider": provider,
                        "mode": "chat",
                    }
                }
            )
            return True
        try:
            litellm.get_model_info(model)
            return True
        except Exception:
            if self.max_cost_usd is not None:
                raise LLMError(
                    LLMErrorKind.UNPRICED_MODEL,
                    f"a cost cap is set but litellm has no price for {model!r}; "
                    "give input/output cost per token in the settings",
                ) from None
            return False

    def complete(self, messages: list[dict[str, str]], *, json_mode: bool = False) -> str:
        """One reply's text. Raises LLMError; never hangs longer than timeout x attempts."""
        self._check_budget(messages)
        attempts = self.settings.retries + 1
        started = time.monotonic()
        last: Exception | None = None
        for attempt in range(attempts):
            timeout = self.settings.timeout_s
            if self.deadline_at is not None:
                timeout = min(timeout, self.deadline_at - time.monotonic())
                if timeout < 1.0:
                    raise LLMError(LLMErrorKind.TIMEOUT, "the run's time for planning is up")
            try:
                response = litellm.completion(
                    model=self.settings.model,
                    messages=messages,
                    api_base=self.settings.api_base,
                    api_key=self.settings.api_key,
                    timeout=timeout,
                    num_retries=0,  # retries are ours, so each is counted and backed off
                    max_tokens=self._output_cap(messages),
                    temperature=self.settings.temperature,
                    **({"response_format": {"type": "json_object"}} if json_mode else {}),
                )
            except _RETRYABLE as exc:
                last = exc
                if attempt + 1 < attempts:
                    self._sleep(self.settings.backoff_s * (2**attempt))
                continue
            except litellm.AuthenticationError as exc:
                raise LLMError(
                    LLMErrorKind.MISSING_KEY, f"the provider refused the key: {_first_line(exc)}"
                ) from None
            except (litellm.NotFoundError, litellm.BadRequestError) as exc:
                raise LLMError(LLMErrorKind.PROVIDER, _first_line(exc)) from None
            return self._account(response, started, retries=attempt)
        self.spent.calls.append(
            CallRecord(
                self.settings.model, 0, 0, 0.0, time.monotonic() - started, attempts - 1, str(last)
            )
        )
        if isinstance(last, litellm.RateLimitError):
            raise LLMError(
                LLMErrorKind.RATE_LIMIT, f"rate limited {attempts} times: {_first_line(last)}"
            )
        if isinstance(last, litellm.Timeout):
            raise LLMError(
                LLMErrorKind.TIMEOUT,
                f"no reply within {self.settings.timeout_s:g} s, {attempts} times",
            )
        raise LLMError(LLMErrorKind.PROVIDER, f"{attempts} attempts failed: {_first_line(last)}")

    def complete_parsed(
        self,
        messages: list[dict[str, str]],
        parse: Callable[[str], T],
        *,
        retries: int,
        json_mode: bool = False,
    ) -> T:
        """Ask, parse, and on a ValueError ask again with the error, up to `retries` times."""
        conversation = list(messages)
        error = ""
        for _ in range(retries + 1):
            text = self.complete(conversation, json_mode=json_mode)
            try:
                return parse(text)
            except ValueError as exc:
                error = str(exc)
                conversation += [
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": f"That reply was rejected: {error}\nReply again, fixed.",
                    },
                ]
        raise LLMError(LLMErrorKind.MALFORMED, f"{retries + 1} replies rejected; last: {error}")

    def _check_budget(self, messages: list[dict[str, str]]) -> None:
        if (
            self.max_tokens is not None
            and self.spent.tokens + _estimate_tokens(messages) >= self.max_tokens
        ):
            raise LLMError(
                LLMErrorKind.BUDGET,
                f"token cap {self.max_tokens} reached ({self.spent.tokens} spent)",
            )
        if self.max_cost_usd is not None and self.spent.cost_usd >= self.max_cost_usd:
            raise LLMError(LLMErrorKind.BUDGET, f"cost cap ${self.max_cost_usd:g} reached")

    def _output_cap(self, messages: list[dict[str, str]]) -> int:
        cap = self.settings.max_output_tokens
        if self.max_tokens is not None:
            cap = min(cap, self.max_tokens - self.spent.tokens - _estimate_tokens(messages))
        return max(1, cap)

    def _account(self, response: Any, started: float, *, retries: int) -> str:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = 0.0
        if self._priced:
            try:
                cost = float(litellm.completion_cost(completion_response=response) or 0.0)
            except Exception:
                cost = 0.0
        self.spent.tokens += prompt + completion
        self.spent.cost_usd += cost
        self.spent.calls.append(
            CallRecord(
                self.settings.model, prompt, completion, cost, time.monotonic() - started, retries
            )
        )
        choices = getattr(response, "choices", None) or []
        text = choices[0].message.content if choices else None
        if not text:
            raise LLMError(LLMErrorKind.MALFORMED, "the reply had no text")
        return str(text)


def _estimate_tokens(messages: list[dict[str, str]]) -> int:
    # About 3 characters a token for code and English; a local estimate needs no tokenizer
    # download, and the caps only need to stop us before we overshoot, not to the token.
    return sum(len(m.get("content", "")) for m in messages) // 3


def _first_line(exc: BaseException | None) -> str:
    text = str(exc or "").strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
