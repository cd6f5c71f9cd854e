"""The shipped Llama-style example on the CPU (its small CPU config, as in CI): profiled in the
sandbox into the problems the GPU run optimizes, and verified end to end with rmsnorm and
rotary kernels substituted; and the patch's per-module tables (rotary cos/sin over the batch)
are built once, not on every call."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from harness.model import patch as model_patch
from harness.model.profile import profile_model
from harness.model.verify import Winner, verify_model

LLAMA = (Path(__file__).resolve().parents[2] / "examples" / "models" / "llama_block.py").read_text()
RMSNORM_KERNEL = """
import torch

def run(x, weight, out):
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight)
"""
ROTARY_KERNEL = """
import torch

def run(x, cos, sin, out):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos[:, None, :].float(), sin[:, None, :].float()
    out.copy_(torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype))
"""


def test_the_llama_example_profiles_on_the_cpu_in_its_small_config():
    started = time.monotonic()
    profile = profile_model(LLAMA, device="cpu", steps=1, warmup=1)
    assert profile.ok, profile.message
    labels = {g.label for g in profile.groups if g.optimizable}
    assert {"rmsnorm/128x1024/bf16", "rotary/128x16x64/bf16"} <= labels
    assert time.monotonic() - started < 120, "the CPU config must stay small enough for CI"


def test_the_llama_example_verifies_with_rmsnorm_and_rotary_substituted_on_the_cpu():
    result = verify_model(
        LLAMA,
        [
            Winner("rmsnorm/128x1024/bf16", RMSNORM_KERNEL),
            Winner("rotary/128x16x64/bf16", ROTARY_KERNEL),
        ],
        device="cpu",
        max_samples=3,
    )
    assert result.ok, result.message
    assert result.hits == {"rmsnorm/128x1024/bf16": 2, "rotary/128x16x64/bf16": 2}
    assert result.graphed == {} and result.launch_bound == {}, "CUDA-only timings stay empty"


class Rotary(torch.nn.Module):
    def __init__(self, seq: int, half: int):
        super().__init__()
        self.register_buffer("cos", torch.rand(seq, half))
        self.register_buffer("sin", torch.rand(seq, half))

    def forward(self, x):
        raise AssertionError("patched: the kernel runs instead")


class Recorder:
    def __init__(self):
        self.tables = []

    def run(self, x, cos, sin, *, out):
        self.tables.append((cos, sin))
        out.copy_(x)


def test_the_patch_builds_rotary_tables_once_and_again_after_a_buffer_changes():
    module, kernel = Rotary(8, 4), Recorder()
    patcher = model_patch.patch(module, {"rotary/16x2x8/fp32": kernel})
    patcher.enabled = True
    x = torch.randn(2, 8, 2, 8)  # (batch, seq, heads, head_dim)
    module(x)
    module(x)
    assert patcher.hits == {"rotary/16x2x8/fp32": 2}
    (cos1, sin1), (cos2, sin2) = kernel.tables
    assert cos1 is cos2 and sin1 is sin2, "the batch-repeated tables are reused"
    assert torch.equal(cos1, module.cos.repeat(2, 1))
    with torch.no_grad():
        module.cos.mul_(2)  # a buffer written in place: its version counter moves
    module(x)
    assert kernel.tables[-1][0] is not cos1
    assert torch.equal(kernel.tables[-1][0], module.cos.repeat(2, 1))
