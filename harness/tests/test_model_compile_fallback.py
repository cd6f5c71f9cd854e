"""The model child's one rule for a compile that Inductor's worker pool fails (CPU, in-process).

On an H100 the pool's workers found no GPU backend inside the sandbox; the end-to-end check's
variants were made again at one compile thread, but its ablation compiled without that rule,
and the whole check died (model_llama_decode_h100_v2.json). Every compile of the child now goes
through child._compiled: the variants, the ablation, the package's run and the profile."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config

from harness.model import child


@pytest.fixture
def pool(monkeypatch):
    """Inductor set to compile with a pool of 8 workers, and no failure recorded yet."""
    torch._dynamo.reset()
    monkeypatch.setattr(child, "pool_failures", [], raising=False)
    with inductor_config.patch(compile_threads=8):
        yield
    torch._dynamo.reset()


def _backend(calls: list, fails_at_one_thread: bool = False):
    """A compiler that fails as the pool did whenever more than one thread compiles."""

    def backend(gm, example_inputs):
        calls.append(inductor_config.compile_threads)
        if inductor_config.compile_threads != 1 or fails_at_one_thread:
            raise RuntimeError("Could not find an active GPU backend")
        return gm.forward

    return backend


def test_a_compile_the_pool_fails_is_made_again_at_one_thread_for_the_ablation_too(pool):
    model, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    calls: list = []
    # The ablation builds its ways with _build_variant, as the variants and the package do.
    fn, _seconds = child._build_variant("ours", model, [x], {}, {"ours": _backend(calls)})
    assert calls == [8, 1] and inductor_config.compile_threads == 1
    assert len(child.pool_failures) == 1 and "active GPU backend" in child.pool_failures[0]
    with torch.no_grad():
        assert torch.equal(fn(x), model(x))


def test_a_variant_that_fails_at_one_thread_too_is_reported_with_the_fallback(pool):
    model, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    calls: list = []
    backends = {"ours": _backend(calls, fails_at_one_thread=True)}
    entry: dict = {}
    assert child._build_or_report("ours", model, [x], {}, backends, entry, "cpu") is None
    assert calls == [8, 1]  # tried once more, not again and again
    assert "active GPU backend" in entry["error"]
    assert "active GPU backend" in entry["compile_threads_fallback"]
