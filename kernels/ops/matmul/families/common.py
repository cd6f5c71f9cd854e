"""What every matmul family shares: the problem's fixed constants and resource limits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.ops.matmul.op import has_residual, split_layout
from kernels.problem import Family, Problem
from kernels.render import render_module

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
        "HAS_RESIDUAL": has_residual(problem.layout),
    }


def serves_residual(family: Family, layout: str) -> bool:
    """A "+res" layout only for the families whose epilogue adds it (`residual = True`)."""
    return getattr(family, "residual", False) or not has_residual(layout)


def elt_bytes(problem: Problem) -> int:
    return problem.torch_dtype.itemsize


def acc_regs(block_m: int, block_n: int, num_warps: int) -> float:
    return block_m * block_n / (32 * num_warps)


class TritonMatmulFamily(Family):
    """A Triton matmul family: one TEMPLATE, a pipelined A/B tile in shared memory per stage."""

    template: str
    residual = False  # whether the template adds a "+res" layout's residual

    def serves(self, layout: str) -> bool:
        return serves_residual(self, layout)

    def staging_bytes(self, problem: Problem, params: Mapping[str, Any]) -> int:
        """Shared memory beyond the pipelined A/B tiles (e.g. an epilogue buffer)."""
        return 0

    def check(self, problem: Problem, params: Mapping[str, Any]) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        p = params
        tiles = p["NUM_STAGES"] * (p["BLOCK_M"] + p["BLOCK_N"]) * p["BLOCK_K"] * elt_bytes(problem)
        smem = (tiles + self.staging_bytes(problem, p)) * p.get("PROGRAMS_PER_SM", 1)
        if smem > SMEM_LIMIT:
            return f"needs {smem} bytes of shared memory per SM, over {SMEM_LIMIT}"
        if acc_regs(p["BLOCK_M"], p["BLOCK_N"], p["NUM_WARPS"]) > MAX_ACC_REGS_PER_THREAD:
            return "accumulator needs more than 128 registers per thread; use more warps"
        return None

    def render(self, problem: Problem, params: Mapping[str, Any]) -> str:
        return render_module(
            self.template,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed=fixed_constants(problem),
            summary=self.description,
        )
