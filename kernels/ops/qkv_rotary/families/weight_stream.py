"""qkv_rotary_weight_stream: the decode step's q/k/v projections and rotary as one weight stream.

With a few rows (decode: M <= 64) the time is the time to read the three weights once. Each
program owns BLOCK_N rotary pairs (a pair's first-half and second-half columns, as in
qkv_rotary_dual) and streams those weight rows over its range of K tiles into two fp32
accumulators, the whole padded M in one tile. How many programs share K is picked at run time
from the shape and the device (matmul_weight_stream's split plan, two tiles per K step); the
last program of a tile to arrive sums the partials in a fixed order (deterministic), then adds
the bias, rotates and stores, as the dual family does. The dual family gives each program a
whole K loop instead: on an H100 its Llama-2-7B decode step (8 rows, 32 heads) streamed the
weights at about 2.7 TB/s (benchmarks/results/model_llama_decode_h100_v2_replay.json).
"""

from __future__ import annotations

from typing import Any

from kernels.dual_gemm import STREAM_PAIR_FN, DualStreamFamily
from kernels.ops.matmul.families.weight_stream import STREAM_PRELUDE
from kernels.ops.qkv_rotary.families.dual import OPERANDS, PAIRS_FN
from kernels.ops.qkv_rotary.op import BIAS, has_bias
from kernels.problem import Problem

KERNEL = """
# The split is a run-time value, never specialized on: one binary serves every split.
@triton.jit(do_not_specialize=["k_tiles_per_split", "splits"])
def qkv_rotary_stream_kernel(
    x_ptr, wq_ptr, wk_ptr, wv_ptr, cos_ptr, sin_ptr, bq_ptr, bk_ptr, bv_ptr, out_ptr,
    ws_ptr, count_ptr, M, K, H, HKV, HALF, k_tiles_per_split, splits,
    stride_xm, stride_wn, stride_cm, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    # The splits of one tile are adjacent program ids: they run together, and the last one
    # finds the others' partials still in L2. Tiles go along the pairs first.
    tile = tl.program_id(0) // splits
    split = tl.program_id(0) % splits
    n_tiles = tl.cdiv((H + 2 * HKV) * HALF, BLOCK_N)
    pid_m = tile // n_tiles
    pid_n = tile % n_tiles
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    pairs, g, j, is_q, is_k, head, w_row = pair_columns(
        pid_n, H, HKV, HALF, wq_ptr, wk_ptr, wv_ptr, stride_wn, BLOCK_N
    )
    # First halves' rows, and HALF rows on, the second halves'.
    acc1, acc2, last = stream_pair(
        x_ptr, w_row, w_row + HALF * stride_wn, ws_ptr, count_ptr, offs_m, mask_m, K, tile,
        split, splits, k_tiles_per_split, stride_xm, BLOCK_M, BLOCK_N, BLOCK_K,
    )
    if last:
        rotate_and_store(
            acc1, acc2, offs_m, M, pairs, g, j, is_q, is_k, head, H, HKV, HALF,
            cos_ptr, sin_ptr, bq_ptr, bk_ptr, bv_ptr, out_ptr, stride_cm, stride_om, HAS_BIAS,
        )
""".strip()

TEMPLATE = (
    STREAM_PRELUDE
    + "\n\n\n"
    + STREAM_PAIR_FN
    + "\n\n\n"
    + PAIRS_FN
    + "\n\n\n"
    + KERNEL
    + """


def run(x, w_q, w_k, w_v, cos, sin, *biases, out):
"""
    + OPERANDS
    + """
    x = x.contiguous()
    # The split plan's N: the pairs, BLOCK_N of them a tile (two weight rows each).
    pairs = (H + 2 * HKV) * half
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(pairs, BLOCK_N)
    args = (x, w_q, w_k, w_v, cos, sin, b_q, b_k, b_v, out)
    sizes = (M, K, H, HKV, half)
    strides = (x.stride(0), w_q.stride(0), cos.stride(0), out.stride(0))
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, HAS_BIAS=HAS_BIAS)

    def compile_kernel():  # the binary the launch below will use, compiled without a launch
        ws, count = buffers(out.device, 1, 2, accumulators=2)
        return qkv_rotary_stream_kernel.warmup(
            *args, ws, count, *sizes, 2, 2, *strides, **meta,
            grid=(1,), num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )

    splits, k_tiles_per_split = plan(
        out.device, M, pairs, K, x.element_size(), compile_kernel, accumulators=2
    )
    workspace, counters = buffers(out.device, tiles, splits, accumulators=2)
    launch(qkv_rotary_stream_kernel, (tiles * splits,),
        *args, workspace, counters, *sizes, k_tiles_per_split, splits, *strides, **meta,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class WeightStreamQkvRotary(DualStreamFamily):
    name = "qkv_rotary_weight_stream"
    op = "qkv_rotary"
    layouts = ("", BIAS)  # three weights as the model has them, as qkv_rotary_dual reads them
    description = (
        "few-row weight stream: each program streams the q/k/v weight rows of BLOCK_N rotary "
        "pairs over its K range once, split K picked per shape and device, rotary by the last"
    )

    template = TEMPLATE

    def fixed(self, problem: Problem) -> dict[str, Any]:
        return {"HAS_BIAS": has_bias(problem)}
