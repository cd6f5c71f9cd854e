"""On a GPU: a model's profile is of CUDA kernels tied to their modules (and of the compiled
model's kernels, for the plan), and a substituted kernel is verified end to end against every
baseline, and a kernel the model is slower with is left out. Skipped where no GPU is visible
(CI). The two end-to-end tests passed on an H200 (2026-11-30); the profile tests were not
re-run with these assertions."""

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


def test_it_profiles_the_compiled_model_for_the_plan():
    profile = profile_model(TINY_BF16, device="cuda", steps=2, warmup=1)
    assert profile.ok, profile.message
    assert profile.compiled and profile.compiled.ok, profile.compiled
    assert profile.basis == "torch.compile" and profile.compiled.compile_s > 0
    # Under Inductor the Linear layers are aten::mm on transposed weights (NN), planned under
    # the Linear layers' own (NT) keys.
    labels = {g["label"] for g in profile.plan_groups()}
    assert {"matmul/32x128x64/bf16/NT", "matmul/32x64x128/bf16/NT"} <= labels


def test_it_times_every_baseline_and_every_way_with_the_kernels():
    result = verify_model(
        TINY_BF16,
        [Winner("matmul/32x128x64/bf16/NT", MATMUL_KERNEL)],
        device="cuda",
        max_samples=20,
    )
    assert result.ok, result.message
    assert result.hits == {"matmul/32x128x64/bf16/NT": 1} and result.regime == "offline"
    assert set(result.variants) == {
        "eager", "cuda_graphs", "compile", "compile_max_autotune", "compile_cuda_graphs",
        "ours", "ours_cuda_graphs", "ours_compile", "ours_compile_cuda_graphs",
    }  # fmt: skip
    for name, v in result.variants.items():
        assert v["ok"], (name, v.get("error"))
        assert v["offline"]["median_us"] > 0 and v["server"]["median_us"] > 0
        assert v["compile_s"] >= 0
    assert result.variants["compile"]["compile_s"] > 0.1, "a real compile, timed"
    # A replay launches no Python: at this size it beats a launch-bound eager forward.
    graphs, eager = result.variants["cuda_graphs"], result.variants["eager"]
    assert graphs["server"]["median_us"] < eager["server"]["median_us"]
    assert result.best_baseline in result.variants and result.best_ours.startswith("ours")
    lo, hi = result.speedup_ci
    assert 0 < lo <= hi
    # Where the two best ways spend a forward, read from the profiler: GPU kernels, by name.
    assert set(result.kernels) == {result.best_baseline, result.best_ours}
    assert all(rows and rows[0]["us_per_step"] > 0 for rows in result.kernels.values())


SLOW_MATMUL_KERNEL = """
import torch

def run(a, b, out):
    for _ in range(200):  # right, and 200 times the work
        torch.matmul(a, b.T, out=out)
"""


def test_the_check_leaves_out_a_kernel_the_compiled_model_is_slower_with():
    result = verify_model(
        TINY_BF16,
        [
            Winner("matmul/32x128x64/bf16/NT", MATMUL_KERNEL),
            Winner("matmul/32x64x128/bf16/NT", SLOW_MATMUL_KERNEL),
        ],
        device="cuda",
        max_samples=20,
        max_autotune=False,
    )
    assert result.ok, result.message
    effects = {a["key"]: a for a in result.ablation}
    assert set(effects) == {"matmul/32x128x64/bf16/NT", "matmul/32x64x128/bf16/NT"}
    assert not effects["matmul/32x64x128/bf16/NT"]["kept"]
    assert result.left_out == ["matmul/32x64x128/bf16/NT"]
    assert result.hits == {"matmul/32x128x64/bf16/NT": 1}


QWEN2_SMALL = (
    (Path(__file__).parents[2] / "examples" / "models" / "qwen2_block.py")
    .read_text()
    .replace("return GPU if torch.cuda.is_available() else CPU", "return CPU")
)
ADDMM_KERNEL = """
import torch

def run(a, b, residual, out):
    torch.addmm(residual, a, b.T, out=out)
"""


def test_with_the_gqa_rewrite_the_kernels_alone_are_timed_as_the_package_runs_them():
    """Qwen2's small config on the GPU: its attention takes SDPA's own grouping (a rewrite),
    and the down projection a stand-in kernel; the kernels alone run again in the best way
    with the kernels, checked and timed against the best baseline."""
    assert "return CPU" in QWEN2_SMALL
    down, attention = "matmul/64x256x1024/bf16/NT+res", "attention/1x4x64x64/bf16/causal+kv_heads=2"
    result = verify_model(
        QWEN2_SMALL,
        [Winner(down, ADDMM_KERNEL)],
        device="cuda",
        max_samples=20,
        max_autotune=False,
        ablate=False,
    )
    assert result.ok, result.message
    assert [w["key"] for w in result.rewrites] == [attention]
    package = result.package
    assert package is not None and "error" not in package, package
    assert package["ok"] and package["way"] == result.best_ours
    assert package["hits"] == {down: 1}
    assert package["us"] > 0 and package["speedup_ci"][0] <= package["speedup"]
