"""matmul_tiled: one program per output tile, grouped (swizzled) tile order, pointer loads.

The portable family: any shape, stride or layout (the residual's "+res" ones too),
software-pipelined by num_stages.
"""

from __future__ import annotations

from kernels.ops.matmul.families import snippets
from kernels.ops.matmul.families.common import TritonMatmulFamily
from kernels.problem import ParamSpace, Problem
from kernels.render import FAST_LAUNCH

TEMPLATE = (
    """$HEADER

import torch
import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


"""
    + FAST_LAUNCH
    + "\n\n\n"
    + snippets.TF32_FN
    + "\n\n\n"
    + snippets.EPILOGUE_FN
    + "\n\n\n"
    + snippets.TILE_COORDS_FN
    + "\n\n\n"
    + snippets.TILED_KERNEL
    + """


def run(a, b, *rest, out):
"""
    + snippets.OPERAND_VIEWS
    + """
    residual = rest[-1] if HAS_RESIDUAL else None
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    launch(matmul_tiled_kernel, grid,
        a_view, b_view, out, bias, M, N, K,
        a_view.stride(0), a_view.stride(1), b_view.stride(0), b_view.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP=GROUP, M_MAJOR=TILE_ORDER == "m_major",
        HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
        res_ptr=residual, stride_rm=0 if residual is None else residual.stride(0),
        stride_rn=0 if residual is None else residual.stride(1), HAS_RESIDUAL=HAS_RESIDUAL,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class TiledMatmul(TritonMatmulFamily):
    template = TEMPLATE
    name = "matmul_tiled"
    op = "matmul"
    description = "one program per tile, grouped tile order, pointer loads (any shape/layout)"
    residual = True

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [16, 32, 64, 128, 256],
                "BLOCK_N": [16, 32, 64, 128, 256],
                "BLOCK_K": [16, 32, 64, 128],
                "GROUP": [1, 4, 8, 16],
                "TILE_ORDER": ["m_major", "n_major"],
                "NUM_WARPS": [2, 4, 8],
                "NUM_STAGES": [1, 2, 3, 4, 5],
            },
            constraints=(
                "smem: NUM_STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*elt",
                "regs: BLOCK_M*BLOCK_N/threads",
            ),
        )

    def default(self, problem: Problem) -> dict:
        m, n, _ = problem.shape
        if m <= 64:
            return {
                "BLOCK_M": 16,
                "BLOCK_N": 64,
                "BLOCK_K": 128,
                "GROUP": 1,
                "TILE_ORDER": "m_major",
                "NUM_WARPS": 4,
                "NUM_STAGES": 4,
            }
        if m * n <= 512 * 512:
            return {
                "BLOCK_M": 64,
                "BLOCK_N": 64,
                "BLOCK_K": 64,
                "GROUP": 8,
                "TILE_ORDER": "m_major",
                "NUM_WARPS": 4,
                "NUM_STAGES": 3,
            }
        return {
            "BLOCK_M": 128,
            "BLOCK_N": 256,
            "BLOCK_K": 64,
            "GROUP": 8,
            "TILE_ORDER": "m_major",
            "NUM_WARPS": 8,
            "NUM_STAGES": 3,
        }
