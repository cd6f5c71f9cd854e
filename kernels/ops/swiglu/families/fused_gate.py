"""swiglu_fused_gate: gate and up projections in one kernel (x read once, silu-gating in the
epilogue, h written once in the input dtype), then a tiled down projection. A starting point:
the next step is fusing the down projection (split over F) or a persistent TMA gate kernel.
"""

from __future__ import annotations

from kernels.ops.matmul.families import snippets
from kernels.problem import Family, ParamSpace
from kernels.render import FAST_LAUNCH, render_module

GATE_KERNEL = """
@triton.jit
def gate_up_kernel(
    x_ptr, wg_ptr, wu_ptr, h_ptr, M, F, D,
    stride_xm, stride_wd, stride_hm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(F, BLOCK_N)
    pid_m, pid_n = tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP, True)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    cols = tl.max_contiguous(tl.multiple_of(tl.where(offs_n < F, offs_n, 0), BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]
    w_off = offs_k[:, None].to(tl.int64) * stride_wd + cols[None, :]
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(D, BLOCK_K)):
        k_left = D - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        wg = tl.load(wg_ptr + w_off, mask=offs_k[:, None] < k_left, other=0.0)
        wu = tl.load(wu_ptr + w_off, mask=offs_k[:, None] < k_left, other=0.0)
        gate = tl.dot(x, wg, gate)
        up = tl.dot(x, wu, up)
        x_ptrs += BLOCK_K
        w_off += BLOCK_K * stride_wd
    h = gate * tl.sigmoid(gate) * up
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < F)
    h_ptrs = h_ptr + offs_m[:, None].to(tl.int64) * stride_hm + offs_n[None, :]
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=mask)
""".strip()

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
    + "\n\n\n"
    + GATE_KERNEL
    + """


def run(x, w_gate, w_up, w_down, *, out):
    x, w_gate, w_up = x.contiguous(), w_gate.contiguous(), w_up.contiguous()
    M, D = x.shape
    F = w_gate.shape[1]
    h = torch.empty((M, F), dtype=x.dtype, device=x.device)
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(F, BLOCK_N)
    launch(
        gate_up_kernel, (tiles,),
        x, w_gate, w_up, h, M, F, D, x.stride(0), w_gate.stride(0), h.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP=GROUP,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    tiles = triton.cdiv(M, DOWN_BLOCK_M) * triton.cdiv(D, DOWN_BLOCK_N)
    launch(
        matmul_tiled_kernel, (tiles,),
        h, w_down, out, out, M, D, F,
        h.stride(0), h.stride(1), w_down.stride(0), w_down.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=DOWN_BLOCK_M, BLOCK_N=DOWN_BLOCK_N, BLOCK_K=BLOCK_K, GROUP=GROUP, M_MAJOR=True,
        HAS_BIAS=False, ACTIVATION="none",
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class FusedGateSwiglu(Family):
    name = "swiglu_fused_gate"
    op = "swiglu"
    description = (
        "gate+up in one kernel with the silu-gating epilogue, then a tiled down projection"
    )

    def space(self, problem):
        return ParamSpace(
            {
                "BLOCK_M": [16, 32, 64, 128],
                "BLOCK_N": [32, 64, 128],
                "BLOCK_K": [32, 64],
                "DOWN_BLOCK_M": [16, 32, 64, 128],
                "DOWN_BLOCK_N": [32, 64, 128, 256],
                "GROUP": [1, 8],
                "NUM_WARPS": [4, 8],
                "NUM_STAGES": [2, 3, 4],
            },
            constraints=("smem: NUM_STAGES*(BLOCK_M + 2*BLOCK_N)*BLOCK_K*elt",),
        )

    def default(self, problem):
        small = problem.shape[0] <= 64
        return {
            "BLOCK_M": 16 if small else 128,
            "BLOCK_N": 64 if small else 128,
            "BLOCK_K": 64,
            "DOWN_BLOCK_M": 16 if small else 128,
            "DOWN_BLOCK_N": 64 if small else 128,
            "GROUP": 8,
            "NUM_WARPS": 4 if small else 8,
            "NUM_STAGES": 3,
        }

    def check(self, problem, params):
        if (why := super().check(problem, params)) is not None:
            return why
        p = params
        elt = problem.torch_dtype.itemsize
        smem = p["NUM_STAGES"] * (p["BLOCK_M"] + 2 * p["BLOCK_N"]) * p["BLOCK_K"] * elt
        if smem > 232_448:
            return f"needs {smem} bytes of shared memory"
        if 2 * p["BLOCK_M"] * p["BLOCK_N"] / (32 * p["NUM_WARPS"]) > 256:
            return "two accumulators need too many registers; more warps or smaller tiles"
        return None

    def render(self, problem, params):
        return render_module(
            TEMPLATE,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            summary=self.description,
        )
