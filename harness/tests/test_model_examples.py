"""The shipped example models on the CPU (their small CPU configs, as in CI): profiled in the
sandbox into the problems the GPU run optimizes, with the sites where fusions go, and
verified end to end with kernels substituted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.model.profile import profile_model
from harness.model.verify import EndToEnd, Winner, verify_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
LLAMA = (EXAMPLES / "llama_block.py").read_text()
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
        ablate=False,  # stand-in kernels, CPU times: this checks where they go, not their worth
    )
    assert result.ok, result.message
    assert result.hits == {"rmsnorm/128x1024/bf16": 2, "rotary/128x16x64/bf16": 2}
    assert "cuda_graphs" not in result.variants, "CUDA graphs only on a GPU"


DECODE = (EXAMPLES / "llama_decode.py").read_text()


def test_the_decode_example_profiles_with_its_fusion_sites_and_plans_them():
    profile = profile_model(DECODE, device="cpu", steps=1, warmup=1)
    assert profile.ok, profile.message
    kinds = {s["kind"]: s["key"] for s in profile.sites}
    assert kinds["swiglu_gate"] == "swiglu_gate/8x688x256/bf16/i8+rowscale"  # its norm folded in
    assert kinds["qkv_rotary"] == "qkv_rotary/8x4x4x64x256/bf16"
    assert kinds["decode_attention"] == "decode_attention/1x4x8x40x64/bf16"
    groups = {g["label"]: g for g in profile.plan_groups()}
    assert groups["swiglu_gate/8x688x256/bf16/i8+rowscale"]["calls"] == 2  # one per layer
    # q/k/v/o share one shape: the fusion took q, k and v; o stays a matmul problem.
    assert groups["matmul/8x256x256/bf16/NT"]["calls"] == 2
    assert "matmul/8x688x256/bf16/NT" not in groups, "gate and up are the fusion's"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # GQA with biased q/k/v (k/v narrower than q) and rotate-half written out on the
        # transposed heads: one qkv_rotary fusion (its weights and biases interleaved as one);
        # SwiGLU found as its fusion; o_proj and down_proj add the residual themselves.
        # Its attention over the 2 key/value heads as they are (no repeat_interleave).
        ("qwen2_block", {"swiglu_gate/64x1024x256/bf16/i8+rowscale",
                         "qkv_rotary/64x4x2x64x256/bf16/i8+bias+rowscale+kv_heads=2",
                         "attention/1x4x64x64/bf16/causal+kv_heads=2",
                         "matmul/64x256x256/bf16/NT+res", "matmul/64x256x1024/bf16/NT+res",
                         "rmsnorm/64x256/bf16"}),
        # Parallel attention and MLP off one LayerNorm; the MLP's GEMMs carry biases, the
        # first its GELU too (one GEMM with a bias+GELU epilogue); the block's two adds go
        # into the attention's output projection and the MLP's second GEMM; q/k/v and the
        # partial rotary of adjacent pairs are one GEMM over the three weights.
        ("gptj_block", {"qkv_rotary/64x4x4x64x256/bf16/pairs+rot=16+head_dim=64+kv_heads=4",
                        "matmul/64x1024x256/bf16/NT+bias+gelu",
                        "matmul/64x256x256/bf16/NT+res", "matmul/64x256x1024/bf16/NT+bias+res",
                        "layernorm/64x256/bf16", "attention/1x4x64x64/bf16/causal"}),
        # A GQA decode step: attention over the 2 cached heads as they are (no repeat_kv).
        ("llama3_decode", {"decode_attention/1x4x4x36x64/bf16/kv_heads=2",
                           "qkv_rotary/4x4x2x64x256/bf16", "swiglu_gate/4x512x256/bf16/i8+rowscale",
                           "rmsnorm/4x256/bf16/eps=1e-05"}),
        # 2 x 65 tokens: an M of 130, no multiple of any tile; attention with no mask.
        ("vit_block", {"attention/2x3x65x64/bf16", "matmul/130x576x192/bf16/NT+bias",
                       "matmul/130x768x192/bf16/NT+bias+gelu_erf",
                       "matmul/130x192x768/bf16/NT+bias+res",
                       "matmul/130x192x192/bf16/NT+bias+res"}),
    ],
)  # fmt: skip
def test_the_architectures_we_did_not_write_profile_into_our_problems(name, expected):
    """Issue 25: three models written from published configurations (their CPU configs)."""
    profile = profile_model((EXAMPLES / f"{name}.py").read_text(), device="cpu", steps=1, warmup=1)
    assert profile.ok, profile.message
    planned = {g["label"] for g in profile.plan_groups() if g.get("problem")}
    assert expected <= planned, planned


QWEN2 = (EXAMPLES / "qwen2_block.py").read_text()


ATTENTION = "attention/1x4x64x64/bf16/causal+kv_heads=2"
DOWN_PROJ = "matmul/64x256x1024/bf16/NT+res"
ADDMM_KERNEL = """
import torch

def run(a, b, residual, out):  # NT+res: b is the Linear's (N, K) weight
    out.copy_((a.float() @ b.float().t() + residual.float()).to(out.dtype))
"""


def test_a_baseline_rewrite_gives_qwen2s_attention_sdpas_grouping_with_no_kernel():
    # Qwen2 repeats k and v for SDPA; the check (as a job runs it) also runs the model with the
    # attention op's own baseline there (SDPA grouping the heads) and says so.
    result = verify_model(QWEN2, [], device="cpu", max_samples=3)
    assert result.ok, result.message
    assert [r["key"] for r in result.rewrites] == [ATTENTION] and result.hits == {ATTENTION: 1}
    assert result.rewrites[0]["where"] == ["self_attn"]
    assert "repeated 2x" in result.rewrites[0]["saves"]
    assert result.variants["ours"]["ok"] and result.best_ours == "ours"
    # No kernel: there is no package to time, and nothing of ours ships whatever the change is.
    assert result.package is None and not result.package_faster
    # Without rewrites, no winner: the model runs unchanged, nothing of ours timed.
    plain = verify_model(QWEN2, [], device="cpu", max_samples=3, baseline_rewrites=False)
    assert plain.ok and plain.rewrites == [] and plain.best_ours is None


def test_the_plan_knows_where_the_check_tries_pytorchs_own_call():
    profile = profile_model(QWEN2, device="cpu", steps=1, warmup=1)
    assert profile.ok, profile.message
    groups = {g["label"]: g for g in profile.plan_groups()}
    assert "repeated 2x" in groups[ATTENTION]["baseline_saves"]
    assert "baseline_saves" not in groups[DOWN_PROJ]


def test_with_a_rewrite_the_package_is_the_kernels_alone_timed_again():
    # What ships must be faster without the change to the user's code: the kernels alone run
    # again, in the best way with the kernels, checked and timed against the best baseline.
    result = verify_model(
        QWEN2,
        [Winner(DOWN_PROJ, ADDMM_KERNEL)],
        device="cpu",
        max_samples=3,
        ablate=False,  # a stand-in kernel, CPU times: this checks what runs, not its worth
    )
    assert result.ok, result.message
    assert result.hits == {ATTENTION: 1, DOWN_PROJ: 1}
    assert [r["key"] for r in result.rewrites] == [ATTENTION]
    package = result.package
    assert package is not None and package["way"] == result.best_ours and package["ok"]
    assert package["hits"] == {DOWN_PROJ: 1}, "the package's run has the kernel, not the rewrite"
    # Timed against the headline's best baseline again, not its number: two CPU timings of 3
    # samples each differed 33x on a loaded CI box (776 vs 25,747 us).
    assert package["baseline"] == result.best_baseline
    assert package["speedup"] == pytest.approx(package["baseline_us"] / package["us"])
    lo, hi = package["speedup_ci"]
    assert lo <= package["speedup"] <= hi
    # Its verdict is its own: the package ships only if the kernels alone are faster.
    assert result.package_faster == (result.faster and lo > 1.0)
    assert result.to_dict()["package_faster"] == result.package_faster


@pytest.mark.parametrize(
    ("rewrites", "package_ci", "ships"),
    [
        ([], None, True),  # no change to the user's code: the headline decides
        ([{"key": ATTENTION}], [1.02, 1.04], True),
        ([{"key": ATTENTION}], [0.99, 1.03], False),  # only the change to the code wins
        ([{"key": ATTENTION}], None, False),  # no kernel to run alone
    ],
)
def test_with_rewrites_only_the_kernels_alone_decide_what_ships(rewrites, package_ci, ships):
    package = {"ok": True, "speedup_ci": package_ci} if package_ci else None
    e2e = EndToEnd(ok=True, speedup_ci=(1.05, 1.07), rewrites=rewrites, package=package)
    assert e2e.faster and e2e.package_faster == ships
    failed = EndToEnd(ok=True, speedup_ci=(1.05, 1.07), rewrites=rewrites, package={
        "ok": False, "speedup_ci": [1.02, 1.04]})  # fmt: skip
    assert failed.package_faster == (not rewrites), "outputs that differ never ship"
