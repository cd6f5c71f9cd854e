"""On a GPU: a model's profile is of CUDA kernels tied to their modules, and a substituted
kernel is verified end to end. Skipped where no GPU is visible (CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.model.profile import profile_model
from harness.model.verify import Winner, verify_model

pytestmark = pytest.mark.gpu
TINY = (Path(__file__).parent / "fixtures" / "models" / "tiny_mlp.py").read_text()
TINY_BF16 = TINY.replace(
    "torch.randn(32, 64)", "torch.randn(32, 64, dtype=torch.bfloat16)"
).replace(
    "self.down = nn.Linear(hidden, dim, bias=False)",
    "self.down = nn.Linear(hidden, dim, bias=False)\n        self.to(torch.bfloat16)",
)
MATMUL_KERNEL = """
import torch

def run(a, b, out):
    torch.matmul(a, b.T, out=out)
"""


def test_it_profiles_cuda_kernels_and_classifies_the_linear_layers():
    profile = profile_model(TINY_BF16, device="cuda", steps=2, warmup=1)
    assert profile.ok, profile.message
    assert profile.device == "cuda" and profile.label == "GPU kernels"
    labels = {g.label for g in profile.groups}
    assert {"matmul/32x128x64/bf16/NT", "matmul/32x64x128/bf16/NT", "rmsnorm/32x64/bf16"} <= labels


def test_it_verifies_a_substituted_matmul_on_the_gpu():
    result = verify_model(
        TINY_BF16,
        [Winner("matmul/32x128x64/bf16/NT", MATMUL_KERNEL)],
        device="cuda",
        max_samples=20,
    )
    assert result.ok, result.message
    assert result.hits == {"matmul/32x128x64/bf16/NT": 1} and result.regime == "offline"


def test_it_times_the_substituted_model_eager_launch_bound_and_as_cuda_graphs():
    result = verify_model(
        TINY_BF16,
        [Winner("matmul/32x128x64/bf16/NT", MATMUL_KERNEL)],
        device="cuda",
        max_samples=20,
    )
    assert result.ok, result.message
    graphed, bound = result.graphed, result.launch_bound
    assert graphed.get("ok"), graphed.get("error")
    assert graphed["compare"]["original"]["passed"] and graphed["compare"]["substituted"]["passed"]
    assert bound["regime"] == "server" and graphed["regime"] == "offline"
    for pair in (graphed, bound):
        assert pair["original_us"] > 0 and pair["substituted_us"] > 0 and pair["samples"] >= 10
        lo, hi = pair["speedup_ci"]
        assert 0 < lo <= hi
    # A replay launches no Python: at this size it is much faster than a launch-bound forward.
    assert graphed["original_us"] < bound["original_us"]
