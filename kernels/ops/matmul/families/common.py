"""What every matmul family shares: the problem's fixed constants and resource limits."""

from __future__ import annotations

from typing import Any

from kernels.ops.matmul.op import split_layout
from kernels.problem import Problem

# Hopper (sm_90): 227 KiB of shared memory per block, 64 K 32-bit registers per SM.
SMEM_LIMIT = 232_448
MAX_ACC_REGS_PER_THREAD = 128  # fp32 accumulator values per thread before spills loom


def fixed_constants(problem: Problem) -> dict[str, Any]:
    operands, has_bias, activation = split_layout(problem.layout)
    return {
        "A_TRANS": operands[0] == "T",
        "B_TRANS": operands[1] == "T",
        "HAS_BIAS": has_bias,
        "ACTIVATION": activation,
    }


def elt_bytes(problem: Problem) -> int:
    return problem.torch_dtype.itemsize


def acc_regs(block_m: int, block_n: int, num_warps: int) -> float:
    return block_m * block_n / (32 * num_warps)
