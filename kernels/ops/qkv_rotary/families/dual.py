"""qkv_rotary_dual: one program per (BLOCK_M rows x BLOCK_N rotary pairs) holds two
accumulators, each pair's first-half and second-half columns (j and j + D/2 of its head), fed
by the same x tile each K step. The epilogue rotates them with the tokens' cos/sin (q and k
heads) or stores them as they are (v heads). Each column streams its own weight row (w_q,
w_k or w_v, read in nn.Linear's layout, no concatenated copy; a tile may span heads and
projections), so the three projections are one launch. Layout "+bias": each column's bias
(b_q, b_k or b_v, chosen like its weight row) is added to both accumulators before the rotation.
"""

from __future__ import annotations

from kernels.dual_gemm import DualGemmFamily
from kernels.ops.matmul.families import snippets
from kernels.ops.qkv_rotary.op import BIAS, has_bias
from kernels.render import FAST_LAUNCH, render_module

# Shared with the weight-stream form (weight_stream.py): which weight row each rotary pair
# column reads, and the epilogue (bias, rotation, store).
PAIRS_FN = """
@triton.jit
def pair_columns(pid_n, H, HKV, HALF, wq_ptr, wk_ptr, wv_ptr, stride_wn, BLOCK_N: tl.constexpr):
    # Rotary pairs (column j and j + D/2 of one head) of q's heads, then k's, then v's. A tile
    # may span heads and projections: each column finds its own weight row.
    pairs_total = (H + 2 * HKV) * HALF
    pairs = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    p = tl.where(pairs < pairs_total, pairs, 0)
    g = p // HALF  # head among q's, k's, then v's
    j = p % HALF
    is_q = g < H
    is_k = (g >= H) & (g < H + HKV)
    head = tl.where(is_q, g, tl.where(is_k, g - H, g - H - HKV))
    w_row = tl.where(is_q, wq_ptr, tl.where(is_k, wk_ptr, wv_ptr)) + (
        (head * 2 * HALF + j).to(tl.int64) * stride_wn
    )
    return pairs, g, j, is_q, is_k, head, w_row


@triton.jit
def rotate_and_store(
    acc1, acc2, offs_m, M, pairs, g, j, is_q, is_k, head, H, HKV, HALF,
    cos_ptr, sin_ptr, bq_ptr, bk_ptr, bv_ptr, out_ptr, stride_cm, stride_om,
    HAS_BIAS: tl.constexpr,
):
    pairs_total = (H + 2 * HKV) * HALF
    if HAS_BIAS:  # each column's bias, from the projection its weight row came from
        b_col = tl.where(is_q, bq_ptr, tl.where(is_k, bk_ptr, bv_ptr)) + head * 2 * HALF + j
        acc1 += tl.load(b_col, mask=pairs < pairs_total, other=0.0).to(tl.float32)[None, :]
        acc2 += tl.load(b_col + HALF, mask=pairs < pairs_total, other=0.0).to(tl.float32)[None, :]
    mask = (offs_m[:, None] < M) & (pairs[None, :] < pairs_total)
    rotate = (g < H + HKV)[None, :]  # q and k heads: rotate-half with the token's angle
    c_off = offs_m[:, None].to(tl.int64) * stride_cm + j[None, :]
    c = tl.load(cos_ptr + c_off, mask=mask & rotate, other=1.0).to(tl.float32)
    s = tl.load(sin_ptr + c_off, mask=mask & rotate, other=0.0).to(tl.float32)
    out1 = acc1 * c - acc2 * s  # v heads: c = 1, s = 0
    out2 = acc2 * c + acc1 * s
    out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + (g * 2 * HALF + j)[None, :]
    tl.store(out_ptrs, out1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptrs + HALF, out2.to(out_ptr.dtype.element_ty), mask=mask)
""".strip()

KERNEL = """
@triton.jit
def qkv_rotary_kernel(
    x_ptr, wq_ptr, wk_ptr, wv_ptr, cos_ptr, sin_ptr, bq_ptr, bk_ptr, bv_ptr, out_ptr,
    M, K, H, HKV, HALF,
    stride_xm, stride_wn, stride_cm, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv((H + 2 * HKV) * HALF, BLOCK_N)
    pid_m, pid_n = tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP, True)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs, g, j, is_q, is_k, head, w_row = pair_columns(
        pid_n, H, HKV, HALF, wq_ptr, wk_ptr, wv_ptr, stride_wn, BLOCK_N
    )
    rows = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    offs_k = tl.max_contiguous(tl.multiple_of(tl.arange(0, BLOCK_K), BLOCK_K), BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_row[None, :] + offs_k[:, None]  # first halves; + HALF rows: second halves
    second = HALF * stride_wn
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        w1 = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        w2 = tl.load(w_ptrs + second, mask=offs_k[:, None] < k_left, other=0.0)
        acc1 = tl.dot(x, w1, acc1)
        acc2 = tl.dot(x, w2, acc2)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    rotate_and_store(
        acc1, acc2, offs_m, M, pairs, g, j, is_q, is_k, head, H, HKV, HALF,
        cos_ptr, sin_ptr, bq_ptr, bk_ptr, bv_ptr, out_ptr, stride_cm, stride_om, HAS_BIAS,
    )
""".strip()

# run()'s first lines (shared with the weight stream): the biases and the sizes.
OPERANDS = """
    b_q, b_k, b_v = biases if HAS_BIAS else (out, out, out)  # any pointer; never read
    M, K = x.shape
    half = cos.shape[1]
    H = w_q.shape[0] // (2 * half)
    HKV = w_k.shape[0] // (2 * half)
""".strip("\n")

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


"""
    + FAST_LAUNCH
    + "\n\n\n"
    + snippets.TILE_COORDS_FN
    + "\n\n\n"
    + PAIRS_FN
    + "\n\n\n"
    + KERNEL
    + """


def run(x, w_q, w_k, w_v, cos, sin, *biases, out):
"""
    + OPERANDS
    + """
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv((H + 2 * HKV) * half, BLOCK_N)
    launch(
        qkv_rotary_kernel, (tiles,),
        x, w_q, w_k, w_v, cos, sin, b_q, b_k, b_v, out, M, K, H, HKV, half,
        x.stride(0), w_q.stride(0), cos.stride(0), out.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP=GROUP, HAS_BIAS=HAS_BIAS,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class DualQkvRotary(DualGemmFamily):
    name = "qkv_rotary_dual"
    op = "qkv_rotary"
    layouts = ("", BIAS)  # three weights as the model has them (the "i8" ones are CUTLASS's)
    description = "q/k/v heads' two halves as two accumulators, rotary in the epilogue"

    def render(self, problem, params):
        return render_module(
            TEMPLATE,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed={"HAS_BIAS": has_bias(problem)},
            summary=self.description,
        )
