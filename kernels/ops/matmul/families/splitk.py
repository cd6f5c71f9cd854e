"""matmul_splitk: split the K loop over SPLIT_K programs per tile, then reduce in fp32.

For small M (decode) and deep K, a grid of one program per output tile leaves most SMs idle;
splitting K multiplies the programs (and the bytes in flight) by SPLIT_K. Partial sums go to
an fp32 workspace; a second small kernel adds them, applies the epilogue and casts.
"""

from __future__ import annotations

from kernels.ops.matmul.families import snippets
from kernels.ops.matmul.families.common import TritonMatmulFamily
from kernels.problem import ParamSpace, Problem
from kernels.render import FAST_LAUNCH

SPLITK_KERNELS = """
@triton.jit
def matmul_partial_kernel(
    a_ptr, b_ptr, ws_ptr, M, N, K, k_per_split,
    stride_am, stride_ak, stride_bk, stride_bn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, M_MAJOR: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP, M_MAJOR)
    split = tl.program_id(1)
    k_start = split * k_per_split
    k_stop = tl.minimum(k_start + k_per_split, K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.max_contiguous(tl.multiple_of(tl.where(offs_m < M, offs_m, 0), BLOCK_M), BLOCK_M)
    cols = tl.max_contiguous(tl.multiple_of(tl.where(offs_n < N, offs_n, 0), BLOCK_N), BLOCK_N)
    offs_k = k_start + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows.to(tl.int64)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_stop, BLOCK_K):
        k_left = k_stop - k
        a = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=tl.arange(0, BLOCK_K)[:, None] < k_left, other=0.0)
        acc = tl.dot(tf32_operand(a), tf32_operand(b), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    ws_ptrs = ws_ptr + (split * M + offs_m[:, None]).to(tl.int64) * N + offs_n[None, :]
    tl.store(ws_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def splitk_reduce_kernel(
    ws_ptr, c_ptr, bias_ptr, M, N, stride_cm, stride_cn,
    SPLIT_K: tl.constexpr, BLOCK: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    row = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs_n < N
    acc = tl.zeros((1, BLOCK), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        part = tl.load(ws_ptr + (s * M + row).to(tl.int64) * N + offs_n, mask=mask, other=0.0)
        acc += part[None, :]
    acc = apply_epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    out = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + row.to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn, out, mask=mask[None, :])
""".strip()

TEMPLATE = (
    """$HEADER

import torch
import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS

REDUCE_BLOCK = 1024  # columns per program of the reduction kernel


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
    + "\n\n\n"
    + SPLITK_KERNELS
    + """


def run(a, b, *rest, out):
"""
    + snippets.OPERAND_VIEWS
    + """
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    k_blocks = triton.cdiv(K, BLOCK_K)
    splits = min(SPLIT_K, k_blocks)
    if splits == 1:  # nothing to split: the plain tiled kernel writes the output directly
        launch(matmul_tiled_kernel, (tiles,),
            a_view, b_view, out, bias, M, N, K,
            a_view.stride(0), a_view.stride(1), b_view.stride(0), b_view.stride(1),
            out.stride(0), out.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
            GROUP=GROUP, M_MAJOR=TILE_ORDER == "m_major",
            HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return
    k_per_split = triton.cdiv(k_blocks, splits) * BLOCK_K
    splits = triton.cdiv(K, k_per_split)
    workspace = torch.empty((splits, M, N), dtype=torch.float32, device=out.device)
    launch(matmul_partial_kernel, (tiles, splits),
        a_view, b_view, workspace, M, N, K, k_per_split,
        a_view.stride(0), a_view.stride(1), b_view.stride(0), b_view.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP=GROUP, M_MAJOR=TILE_ORDER == "m_major",
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    launch(splitk_reduce_kernel, (M, triton.cdiv(N, REDUCE_BLOCK)),
        workspace, out, bias, M, N, out.stride(0), out.stride(1),
        SPLIT_K=splits, BLOCK=REDUCE_BLOCK, HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
        num_warps=4,
    )
"""
)


class SplitKMatmul(TritonMatmulFamily):
    template = TEMPLATE
    name = "matmul_splitk"
    op = "matmul"
    description = "K split over SPLIT_K programs per tile, fp32 partials reduced by a second kernel"

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [16, 32, 64, 128],
                "BLOCK_N": [32, 64, 128, 256],
                "BLOCK_K": [32, 64, 128, 256, 512],
                "SPLIT_K": [1, 2, 3, 4, 6, 8, 12, 16],
                "GROUP": [1, 8],
                "TILE_ORDER": ["m_major", "n_major"],
                "NUM_WARPS": [2, 4, 8],
                "NUM_STAGES": [1, 2, 3, 4, 5, 6],
            },
            constraints=("smem: NUM_STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*elt",),
        )

    def default(self, problem: Problem) -> dict:
        m, n, k = problem.shape
        if m <= 16:
            return {
                "BLOCK_M": 16,
                "BLOCK_N": 64,
                "BLOCK_K": 256,
                "SPLIT_K": 4,
                "GROUP": 1,
                "TILE_ORDER": "m_major",
                "NUM_WARPS": 4,
                "NUM_STAGES": 4,
            }
        return {
            "BLOCK_M": 64,
            "BLOCK_N": 128,
            "BLOCK_K": 64,
            "SPLIT_K": 4 if k >= 4 * max(m, n) else 2,
            "GROUP": 8,
            "TILE_ORDER": "m_major",
            "NUM_WARPS": 4,
            "NUM_STAGES": 4,
        }
