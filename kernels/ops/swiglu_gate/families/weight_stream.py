"""swiglu_gate_weight_stream: the decode step's gate and up projections as one weight stream.

With a few rows (decode: M <= 64) the time is the time to read the two weights once. Each
program owns BLOCK_N outputs: their gate rows and their up rows, a BLOCK_N strip of each weight,
which it streams over its range of K tiles with 16-byte loads into two fp32 accumulators fed
by the same x tile (the whole padded M in one tile, so no weight byte is read twice). How many
programs share K is picked at run time from the shape and the device (matmul_weight_stream's
split plan, with two tiles per K step and two partials per split); the last program of a tile
to arrive sums the partials in split order 0, 1, 2, ... (deterministic), applies layout
i8+rowscale's row scale and writes silu(gate) * up once. The dual family (swiglu_gate_dual)
gives each program a whole K loop instead. On an H100 at 8x11008x4096 its best screened point
took 75.3 us (results/model_llama_decode_h100_run2_screen.json, 2026-11-24), where in the
compiled model cuBLAS ran both products in 67.2 us a layer (134.3 us for two layers in the
kernel table of results/model_llama_decode_h100_v2_replay.json): two runs, not one A/B.

Layouts: two (N, K) weights, or "i8"/"i8+rowscale"'s one interleaved (2N, K) matrix (output j's
gate row at 16 (j // 8) + j % 8, its up row 8 further), read in place.
"""

from __future__ import annotations

from typing import Any

from kernels.dual_gemm import STREAM_PAIR_FN, DualStreamFamily
from kernels.ops.matmul.families.weight_stream import STREAM_PRELUDE
from kernels.ops.swiglu_gate.families.dual import OPERANDS
from kernels.ops.swiglu_gate.op import layout_constants
from kernels.problem import Problem

KERNEL = """
# The split is a run-time value, never specialized on: one binary serves every split.
@triton.jit(do_not_specialize=["k_tiles_per_split", "splits"])
def swiglu_gate_stream_kernel(
    x_ptr, wg_ptr, wu_ptr, scale_ptr, out_ptr, ws_ptr, count_ptr, M, N, K,
    k_tiles_per_split, splits, stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    INTERLEAVED: tl.constexpr, ROW_SCALE: tl.constexpr,
):
    # The splits of one tile are adjacent program ids: they run together, and the last one
    # finds the others' partials still in L2. Tiles go along N first (then M, when M > BLOCK_M).
    tile = tl.program_id(0) // splits
    split = tl.program_id(0) % splits
    n_tiles = tl.cdiv(N, BLOCK_N)
    pid_m = tile // n_tiles
    pid_n = tile % n_tiles
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # Columns past N read column 0 (dropped by the store mask): the weight loads need K masks only.
    cols = tl.where(mask_n, offs_n, 0)
    if INTERLEAVED:  # output j's gate row is 16 (j // 8) + j % 8, its up row 8 on
        cols = (cols // 8) * 16 + cols % 8
    rows = cols.to(tl.int64) * stride_wn
    gate, up, last = stream_pair(
        x_ptr, wg_ptr + rows, wu_ptr + rows, ws_ptr, count_ptr, offs_m, mask_m, K, tile, split,
        splits, k_tiles_per_split, stride_xm, BLOCK_M, BLOCK_N, BLOCK_K,
    )
    if last:
        if ROW_SCALE:  # an RMSNorm folded in: each row's scale, before the gating
            scale = tl.load(scale_ptr + offs_m, mask=mask_m, other=0.0)[:, None]
            gate = gate * scale
            up = up * scale
        out = gate * tl.sigmoid(gate) * up
        out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])
""".strip()

TEMPLATE = (
    STREAM_PRELUDE
    + "\n\n\n"
    + STREAM_PAIR_FN
    + "\n\n\n"
    + KERNEL
    + """


def run(x, *weights, out):
"""
    + OPERANDS
    + """
    x = x.contiguous()
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    strides = (x.stride(0), w_gate.stride(0), out.stride(0))
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, INTERLEAVED=INTERLEAVED,
                ROW_SCALE=ROW_SCALE)

    def compile_kernel():  # the binary the launch below will use, compiled without a launch
        ws, count = buffers(out.device, 1, 2, accumulators=2)
        return swiglu_gate_stream_kernel.warmup(
            x, w_gate, w_up, scale, out, ws, count, M, N, K, 2, 2, *strides, **meta,
            grid=(1,), num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )

    splits, k_tiles_per_split = plan(
        out.device, M, N, K, x.element_size(), compile_kernel, accumulators=2
    )
    workspace, counters = buffers(out.device, tiles, splits, accumulators=2)
    launch(swiglu_gate_stream_kernel, (tiles * splits,),
        x, w_gate, w_up, scale, out, workspace, counters, M, N, K, k_tiles_per_split, splits,
        *strides, **meta, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class WeightStreamSwigluGate(DualStreamFamily):
    name = "swiglu_gate_weight_stream"
    op = "swiglu_gate"
    description = (
        "few-row weight stream: each program streams a BLOCK_N strip of the gate and up weights "
        "over its K range once, split K picked per shape and device, silu(gate) * up by the last"
    )

    template = TEMPLATE

    def fixed(self, problem: Problem) -> dict[str, Any]:
        return layout_constants(problem)
