"""agents/llm.py against a real HTTP server on 127.0.0.1 speaking the OpenAI chat protocol."""

import pytest

from agents.config import LLMSettings
from agents.llm import LLMClient, LLMError, LLMErrorKind
from agents.tests.fake_llm_server import FakeLLMServer, Reply

HELLO = [{"role": "user", "content": "hello"}]


def client(server, **kw):
    settings = {
        "model": "openai/fake",
        "api_base": server.api_base,
        "api_key": "test-key",
        "timeout_s": 1.0,
        "backoff_s": 0.01,
        "retries": 2,
    }
    limits = {k: kw.pop(k) for k in ("max_tokens", "max_cost_usd") if k in kw}
    return LLMClient(LLMSettings(**{**settings, **kw}), **limits)


def test_it_returns_the_reply_and_counts_tokens():
    with FakeLLMServer([Reply("hi there", prompt_tokens=10, completion_tokens=5)]) as server:
        llm = client(server)
        assert llm.complete(HELLO) == "hi there"
    assert llm.spent.tokens == 15
    assert server.requests[0]["path"].endswith("/chat/completions")
    assert server.requests[0]["messages"] == HELLO


def test_it_retries_a_timeout_and_a_rate_limit_with_backoff():
    waits = []
    with FakeLLMServer([Reply(delay_s=3.0), Reply(status=429), Reply("finally")]) as server:
        llm = LLMClient(
            LLMSettings(
                model="openai/fake",
                api_base=server.api_base,
                api_key="k",
                timeout_s=0.5,
                backoff_s=0.1,
                retries=2,
            ),
            sleep=waits.append,
        )
        assert llm.complete(HELLO) == "finally"
    assert waits == [0.1, 0.2]
    assert llm.spent.calls[-1].retries == 2


def test_it_gives_up_on_repeated_timeouts_with_a_clear_error():
    with FakeLLMServer([Reply(delay_s=2.0)] * 2) as server:
        llm = client(server, retries=1, timeout_s=0.3)
        with pytest.raises(LLMError) as err:
            llm.complete(HELLO)
    assert err.value.kind is LLMErrorKind.TIMEOUT
    assert "0.3 s" in str(err.value)


def test_it_reports_a_rate_limit_that_does_not_clear():
    with FakeLLMServer([Reply(status=429)] * 3) as server, pytest.raises(LLMError) as err:
        client(server).complete(HELLO)
    assert err.value.kind is LLMErrorKind.RATE_LIMIT


def test_it_names_the_missing_key_before_any_call(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LLMError) as err:
        LLMClient(LLMSettings(model="anthropic/claude-sonnet-4-5", api_key=None), max_tokens=10)
    assert err.value.kind is LLMErrorKind.MISSING_KEY
    assert "ANTHROPIC_API_KEY" in str(err.value)


def test_it_rejects_a_model_string_litellm_cannot_route():
    with pytest.raises(LLMError) as err:
        LLMClient(LLMSettings(model="no-such-provider/model-x", api_key="k"))
    assert err.value.kind is LLMErrorKind.UNKNOWN_MODEL


def test_it_fails_closed_on_an_unpriced_model_under_a_cost_cap():
    with pytest.raises(LLMError) as err:
        LLMClient(
            LLMSettings(model="openai/fake-unpriced", api_base="http://127.0.0.1:9", api_key="k"),
            max_cost_usd=1.0,
        )
    assert err.value.kind is LLMErrorKind.UNPRICED_MODEL


def test_it_charges_the_configured_price_and_stops_at_the_cost_cap():
    with FakeLLMServer([Reply("a", prompt_tokens=1000, completion_tokens=1000)] * 2) as server:
        llm = client(
            server, input_cost_per_token=1e-4, output_cost_per_token=2e-4, max_cost_usd=0.25
        )
        llm.complete(HELLO)
        assert llm.spent.cost_usd == pytest.approx(0.3)
        with pytest.raises(LLMError) as err:
            llm.complete(HELLO)
    assert err.value.kind is LLMErrorKind.BUDGET
    assert len(server.requests) == 1


def test_it_stops_at_the_token_cap():
    with FakeLLMServer([Reply("a", prompt_tokens=60, completion_tokens=60)] * 2) as server:
        llm = client(server, max_tokens=100)
        llm.complete(HELLO)
        with pytest.raises(LLMError) as err:
            llm.complete(HELLO)
    assert err.value.kind is LLMErrorKind.BUDGET


def test_it_sends_a_rejected_reply_back_with_the_error():
    def parse(text):
        if text != "42":
            raise ValueError("answer with a number")
        return int(text)

    with FakeLLMServer([Reply("forty-two"), Reply("42")]) as server:
        assert client(server).complete_parsed(HELLO, parse, retries=1) == 42
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "forty-two"}
    assert "answer with a number" in retry[-1]["content"]


def test_it_reports_malformed_output_after_the_retry_budget():
    def parse(text):
        raise ValueError("never good")

    with FakeLLMServer([Reply("x")] * 2) as server, pytest.raises(LLMError) as err:
        client(server).complete_parsed(HELLO, parse, retries=1)
    assert err.value.kind is LLMErrorKind.MALFORMED
    assert len(server.requests) == 2
