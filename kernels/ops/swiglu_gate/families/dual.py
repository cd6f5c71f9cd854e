"""swiglu_gate_dual: one program per (BLOCK_M x BLOCK_N) output tile holds two accumulators,
x @ w_gate^T and x @ w_up^T, fed by the same x tile each K step; the epilogue writes
silu(gate) * up once, in the input dtype. Weights are read in nn.Linear's (N, K) layout (K
contiguous) with no copy: two matrices, or layout i8's one interleaved matrix (output j's gate
row at 16 (j // 8) + j % 8, its up row 8 further), with layout i8+rowscale's float32 row scale
applied to both accumulators before the gating. Few rows (decode) make it a weight stream:
narrow tiles, deep K steps, enough programs to keep every SM's loads in flight.
"""

from __future__ import annotations

from kernels.dual_gemm import DualGemmFamily
from kernels.ops.matmul.families import snippets
from kernels.ops.swiglu_gate.op import layout_constants
from kernels.render import FAST_LAUNCH, render_module

KERNEL = """
@triton.jit
def swiglu_gate_kernel(
    x_ptr, wg_ptr, wu_ptr, scale_ptr, out_ptr, M, N, K,
    stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr,
    INTERLEAVED: tl.constexpr, ROW_SCALE: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP, True)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Rows and columns past the edge read row/column 0 (dropped by the store mask): only K
    # needs masks, and the K-contiguous loads stay vectorized.
    rows = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    cols = tl.where(offs_n < N, offs_n, 0).to(tl.int64)
    offs_k = tl.max_contiguous(tl.multiple_of(tl.arange(0, BLOCK_K), BLOCK_K), BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]
    if INTERLEAVED:  # layout i8: output j's gate row is 16 (j // 8) + j % 8, its up row 8 on
        cols = (cols // 8) * 16 + cols % 8
    w_off = cols[None, :] * stride_wn + offs_k[:, None]  # (BLOCK_K, BLOCK_N): the W^T tile
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        wg = tl.load(wg_ptr + w_off, mask=offs_k[:, None] < k_left, other=0.0)
        wu = tl.load(wu_ptr + w_off, mask=offs_k[:, None] < k_left, other=0.0)
        gate = tl.dot(x, wg, gate)
        up = tl.dot(x, wu, up)
        x_ptrs += BLOCK_K
        w_off += BLOCK_K
    if ROW_SCALE:  # an RMSNorm folded in: each row's scale, before the gating
        scale = tl.load(scale_ptr + rows)[:, None]
        gate = gate * scale
        up = up * scale
    out = gate * tl.sigmoid(gate) * up
    out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask)
""".strip()

# run()'s first lines (shared with the weight stream): the two weights (or views of the
# interleaved one), the row scale and the sizes.
OPERANDS = """
    M, K = x.shape
    scale = out  # any pointer when there is no row scale; never read
    if ROW_SCALE:  # the interleaved weight, then the float32 (M,) row scale
        weights, scale = weights[:1], weights[1].contiguous()
    if INTERLEAVED:  # one (2N, K) weight: up's rows start 8 rows after gate's
        (w,) = weights
        N, w_gate, w_up = w.shape[0] // 2, w, w[8:]
    else:
        w_gate, w_up = weights
        N = w_gate.shape[0]
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
    + KERNEL
    + """


def run(x, *weights, out):
"""
    + OPERANDS
    + """
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    launch(
        swiglu_gate_kernel, (tiles,),
        x, w_gate, w_up, scale, out, M, N, K, x.stride(0), w_gate.stride(0), out.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP=GROUP,
        INTERLEAVED=INTERLEAVED, ROW_SCALE=ROW_SCALE, num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
"""
)


class DualSwigluGate(DualGemmFamily):
    name = "swiglu_gate_dual"
    op = "swiglu_gate"
    description = "gate and up accumulators on one x tile, silu(gate) * up in the epilogue"

    def render(self, problem, params):
        return render_module(
            TEMPLATE,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed=layout_constants(problem),
            summary=self.description,
        )
