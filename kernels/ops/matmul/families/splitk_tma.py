"""matmul_splitk_tma: K split over SPLIT_K programs per tile, TMA loads, one-kernel fixup.

For decode (M = 1 or 16) and deep K, one program per output tile leaves SMs idle and too few
bytes in flight. Here each tile's K range is split over SPLIT_K adjacent programs that stream
their A and B tiles with TMA (NUM_STAGES deep). Every program stores its fp32 partial to its
own workspace slab, then counts itself in on the tile's counter; the last one to arrive
(whichever it is) adds the others' partials to its own, applies the epilogue, writes the
output and re-arms the counter. So one launch, no memset and no second reduction kernel, which
matters when the whole GEMM takes 10-30 us. Workspace and counters are kept per device and
size between calls (the counters are zero at rest). DESCRIPTORS: "device" builds the TMA descriptors in the
kernel (less host work per call), "host" passes them as launch parameters (no in-kernel
descriptor set-up on the critical path of a 10 us kernel).
Problems whose strides TMA cannot take fall back to the tiled pointer kernel.
"""

from __future__ import annotations

from kernels.ops.matmul.families import snippets
from kernels.ops.matmul.families.common import TritonMatmulFamily
from kernels.problem import ParamSpace, Problem
from kernels.render import FAST_LAUNCH

SPLITK_TMA_KERNEL = """
@triton.jit
def matmul_splitk_tma_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, count_ptr, M, N, K, k_tiles_per_split,
    stride_a, stride_b, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, GROUP: tl.constexpr, M_MAJOR: tl.constexpr,
    A_TRANS: tl.constexpr, B_TRANS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    DEVICE_DESCRIPTORS: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    if DEVICE_DESCRIPTORS:  # a_ptr, b_ptr are plain pointers: build the descriptors here
        if A_TRANS:
            a_desc = tl.make_tensor_descriptor(a_ptr, [K, M], [stride_a, 1], [BLOCK_K, BLOCK_M])
        else:
            a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_a, 1], [BLOCK_M, BLOCK_K])
        if B_TRANS:
            b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [stride_b, 1], [BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N])
    else:
        a_desc = a_ptr
        b_desc = b_ptr
    # The SPLIT_K programs of one tile are adjacent: they run together and the fixup finds
    # the other partials still in L2.
    tile_id = tl.program_id(0) // SPLIT_K
    split = tl.program_id(0) % SPLIT_K
    pid_m, pid_n = tile_coords(tile_id, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP, M_MAJOR)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    k_first = split * k_tiles_per_split
    k_last = tl.minimum(k_first + k_tiles_per_split, tl.cdiv(K, BLOCK_K))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # TMA zero-fills reads past the edges (M, N and the K tail), so the loop has no masks.
    # With WARP_SPECIALIZE, a producer warp issues the TMA loads while the others run wgmma.
    for ki in tl.range(k_first, k_last, warp_specialize=WARP_SPECIALIZE):
        off_k = ki * BLOCK_K
        if A_TRANS:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if B_TRANS:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        acc = tl.dot(tf32_operand(a), tf32_operand(b), acc)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    last = True
    if SPLIT_K > 1:
        # Workspace: one dense BLOCK_M x BLOCK_N fp32 slab per (tile, split), no masks. (Adding
        # into one slab with atomics instead needs a re-zeroing that raced with its reads.)
        tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        slab = ws_ptr + (tile_id * SPLIT_K).to(tl.int64) * (BLOCK_M * BLOCK_N) + tile_offs
        tl.store(slab + split * (BLOCK_M * BLOCK_N), acc)
        tl.debug_barrier()  # every thread's partial is written before the count goes up
        arrived = tl.atomic_add(count_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
        last = arrived == SPLIT_K - 1
        if last:
            for s in tl.static_range(SPLIT_K):
                if s != split:  # .cg: read the other SMs' partials from L2, never a stale L1
                    acc += tl.load(slab + s * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
            tl.atomic_xchg(count_ptr + tile_id, 0)  # re-armed for the next call
    if last:
        acc = apply_epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
""".strip()

TEMPLATE = (
    """$HEADER

import torch
import triton
import triton.language as tl
from triton.runtime import driver
from triton.tools.tensor_descriptor import TensorDescriptor

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
    + SPLITK_TMA_KERNEL
    + "\n\n\n"
    + snippets.TILED_KERNEL
    + "\n\n\n"
    + snippets.HOST_DESCRIPTOR
    + '''


def tma_compatible(*tensors):
    """TMA wants 16-byte aligned base addresses and row strides, and unit inner strides."""
    for t in tensors:
        if t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            return False
    return True


def _scratch(size, alignment, stream):
    """Global memory where device-side TMA descriptors are written (triton.set_allocator)."""
    return torch.empty(size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() else "cpu")


triton.set_allocator(_scratch)

_BUFFERS = {}  # (device, tiles) -> (fp32 partial slabs, int32 arrival counters, zero at rest)


def buffers(device, tiles):
    key = (str(device), tiles)
    if key not in _BUFFERS:
        _BUFFERS[key] = (
            torch.empty(tiles * SPLIT_K * BLOCK_M * BLOCK_N if SPLIT_K > 1 else 1, dtype=torch.float32, device=device),
            torch.zeros(tiles, dtype=torch.int32, device=device),
        )
    return _BUFFERS[key]


def run(a, b, *rest, out):
'''
    + snippets.OPERAND_VIEWS
    + """
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    if not tma_compatible(a, b):
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
    k_tiles = triton.cdiv(K, BLOCK_K)
    k_tiles_per_split = triton.cdiv(k_tiles, SPLIT_K)  # the last splits may get less, or none
    workspace, counters = buffers(out.device, tiles)
    if DESCRIPTORS == "host":  # over the tensors as stored; the kernel transposes tiles
        a_arg = HostDescriptor.over(a, [BLOCK_K, BLOCK_M] if A_TRANS else [BLOCK_M, BLOCK_K])
        b_arg = HostDescriptor.over(b, [BLOCK_N, BLOCK_K] if B_TRANS else [BLOCK_K, BLOCK_N])
    else:
        a_arg, b_arg = a, b
    launch(matmul_splitk_tma_kernel, (tiles * SPLIT_K,),
        a_arg, b_arg, out, bias, workspace, counters, M, N, K, k_tiles_per_split,
        a.stride(0), b.stride(0), out.stride(0), out.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        SPLIT_K=SPLIT_K, GROUP=GROUP, M_MAJOR=TILE_ORDER == "m_major",
        A_TRANS=A_TRANS, B_TRANS=B_TRANS, WARP_SPECIALIZE=WARP_SPECIALIZE,
        DEVICE_DESCRIPTORS=DESCRIPTORS == "device",
        HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class SplitKTmaMatmul(TritonMatmulFamily):
    template = TEMPLATE
    name = "matmul_splitk_tma"
    op = "matmul"
    description = (
        "K split over SPLIT_K adjacent programs per tile, TMA loads, "
        "fp32 partials reduced in the same kernel by the last program to finish"
    )

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [16, 32, 64, 128, 256],
                "BLOCK_N": [32, 64, 128, 256],
                "BLOCK_K": [64, 128, 256],
                "SPLIT_K": [1, 2, 3, 4, 6, 8, 16],
                "GROUP": [1, 8],
                "TILE_ORDER": ["m_major", "n_major"],
                "DESCRIPTORS": ["device", "host"],
                "WARP_SPECIALIZE": [False, True],
                "NUM_WARPS": [4, 8],
                "NUM_STAGES": [2, 3, 4, 5, 6],
            },
            constraints=(
                "smem: NUM_STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*elt",
                "regs: BLOCK_M*BLOCK_N/threads",
            ),
        )

    def default(self, problem: Problem) -> dict:
        m, n, k = problem.shape
        if m <= 16:  # decode: stream the weight, many programs along N and K
            return {
                "BLOCK_M": 16,
                "BLOCK_N": 64,
                "BLOCK_K": 256,
                "SPLIT_K": 4,
                "GROUP": 1,
                "TILE_ORDER": "m_major",
                "DESCRIPTORS": "device",
                "WARP_SPECIALIZE": False,
                "NUM_WARPS": 4,
                "NUM_STAGES": 4,
            }
        return {
            "BLOCK_M": 128,
            "BLOCK_N": 128,
            "BLOCK_K": 64,
            "SPLIT_K": 2 if k >= 4 * max(m, n) else 1,
            "GROUP": 8,
            "TILE_ORDER": "m_major",
            "DESCRIPTORS": "device",
            "WARP_SPECIALIZE": False,
            "NUM_WARPS": 8,
            "NUM_STAGES": 4,
        }

    def check(self, problem: Problem, params) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        if params["WARP_SPECIALIZE"] and (params["NUM_WARPS"] < 8 or params["BLOCK_M"] < 64):
            return "warp specialization wants 8 warps and wgmma-sized tiles (BLOCK_M >= 64)"
        return None
