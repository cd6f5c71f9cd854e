"""Op.unfused_bytes: the elementwise traffic a fused kernel removes, which the Amdahl plan counts
as a fusion's gain besides its GEMM time (agents/amdahl.py expected_gain)."""

from __future__ import annotations

import kernels


def _bytes(op: str, shape: str, dtype: str, layout: str) -> int:
    problem = kernels.parse_problem(op, shape, dtype, layout)
    return kernels.get_op(op).unfused_bytes(problem)


def test_an_activation_epilogue_removes_one_pass_over_the_output():
    # GPT-J's MLP up projection: 2048 x 16384 bf16 read and written once by the GELU.
    assert _bytes("matmul", "2048x16384x4096", "bf16", "NT+bias+gelu") == 2 * 2048 * 16384 * 2
    assert _bytes("matmul", "64x32x16", "fp16", "NN+bias+relu") == 2 * 64 * 32 * 2


def test_a_plain_or_biased_gemm_removes_nothing():
    # cuBLAS adds the bias in its own epilogue: PyTorch's form has no extra pass to remove.
    assert _bytes("matmul", "2048x4096x4096", "bf16", "NT") == 0
    assert _bytes("matmul", "2048x4096x16384", "bf16", "NT+bias") == 0


def test_the_fusions_remove_their_elementwise_passes():
    # silu(gate) * up reads two M x N tensors and writes one.
    assert _bytes("swiglu_gate", "4x14336x4096", "bf16", "") == 3 * 4 * 14336 * 2
    # The rotary reads and writes q (32 heads) and k (8 heads) of 128.
    assert _bytes("qkv_rotary", "4x32x8x128x4096", "bf16", "") == 2 * 4 * 40 * 128 * 2


def test_an_op_pytorch_runs_as_it_is_removes_nothing():
    assert _bytes("rmsnorm", "64x128", "bf16", "") == 0
