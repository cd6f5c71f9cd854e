"""matmul_persistent_tma: one program per SM looping over tiles, TMA tensor-descriptor loads.

Hopper levers from the seeds: TMA bulk copies (host-side tensor descriptors), a persistent
grid with grouped tile order, epilogue subtiling (stores half a tile at a time, freeing shared
memory for deeper pipelines), optional warp specialization of the tile loop (tl.range
warp_specialize) and loop flattening. TMA needs 16-byte aligned row strides and base
addresses; when a problem's strides are not (odd K or N), run() uses the tiled pointer kernel
with the same tile sizes instead, so the candidate is correct for every shape.
"""

from __future__ import annotations

from kernels.ops.matmul.families import snippets
from kernels.ops.matmul.families.common import TritonMatmulFamily, elt_bytes
from kernels.problem import ParamSpace, Problem
from kernels.render import FAST_LAUNCH

PERSISTENT_KERNEL = """
@triton.jit
def matmul_persistent_tma_kernel(
    a_desc, b_desc, c_desc, bias_ptr, M, N, K, stride_a, stride_b, stride_c,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, M_MAJOR: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    A_TRANS: tl.constexpr, B_TRANS: tl.constexpr, DEVICE_DESCRIPTORS: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    if DEVICE_DESCRIPTORS:  # the *_desc arguments are plain pointers: build descriptors here
        if A_TRANS:
            a_desc = tl.make_tensor_descriptor(a_desc, [K, M], [stride_a, 1], [BLOCK_K, BLOCK_M])
        else:
            a_desc = tl.make_tensor_descriptor(a_desc, [M, K], [stride_a, 1], [BLOCK_M, BLOCK_K])
        if B_TRANS:
            b_desc = tl.make_tensor_descriptor(b_desc, [N, K], [stride_b, 1], [BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b_desc, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N])
        C_BLOCK_N: tl.constexpr = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
        c_desc = tl.make_tensor_descriptor(c_desc, [M, N], [stride_c, 1], [BLOCK_M, C_BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # TMA zero-fills reads past the edges and clips writes, so no masks anywhere.
    for tile_id in tl.range(
        tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE
    ):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP, M_MAJOR)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
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
        offs_n = off_n + tl.arange(0, BLOCK_N)
        acc = apply_epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
        if EPILOGUE_SUBTILE:  # two half-width stores: half the staging buffer
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([off_m, off_n], left.to(c_desc.dtype))
            c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
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
    + PERSISTENT_KERNEL
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


if DESCRIPTORS == "device":
    triton.set_allocator(_scratch)

_SM_COUNT = {}  # device index -> multiprocessors; a device property, read once


def num_programs(device, num_tiles):
    if device.type != "cuda":  # the CPU interpreter: a few programs still exercise the loop
        return max(1, min(num_tiles, 4 * PROGRAMS_PER_SM))
    if device.index not in _SM_COUNT:
        _SM_COUNT[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(num_tiles, _SM_COUNT[device.index] * PROGRAMS_PER_SM))


def run(a, b, *rest, out):
'''
    + snippets.OPERAND_VIEWS
    + """
    if not tma_compatible(a, b, out):
        grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
        launch(matmul_tiled_kernel, grid,
            a_view, b_view, out, bias, M, N, K,
            a_view.stride(0), a_view.stride(1), b_view.stride(0), b_view.stride(1),
            out.stride(0), out.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
            GROUP=GROUP, M_MAJOR=TILE_ORDER == "m_major",
            HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return
    if DESCRIPTORS == "device":  # built on the GPU from pointers: less host work per call
        a_desc, b_desc, c_desc = a, b, out
    else:  # host descriptors over the tensors as stored; the kernel transposes tiles
        a_desc = HostDescriptor.over(a, [BLOCK_K, BLOCK_M] if A_TRANS else [BLOCK_M, BLOCK_K])
        b_desc = HostDescriptor.over(b, [BLOCK_N, BLOCK_K] if B_TRANS else [BLOCK_K, BLOCK_N])
        c_block_n = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
        c_desc = HostDescriptor.over(out, [BLOCK_M, c_block_n])
    programs = num_programs(out.device, triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N))
    launch(matmul_persistent_tma_kernel, (programs,),
        a_desc, b_desc, c_desc, bias, M, N, K, a.stride(0), b.stride(0), out.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP=GROUP, M_MAJOR=TILE_ORDER == "m_major", NUM_PROGRAMS=programs,
        A_TRANS=A_TRANS, B_TRANS=B_TRANS, DEVICE_DESCRIPTORS=DESCRIPTORS == "device",
        EPILOGUE_SUBTILE=EPILOGUE_SUBTILE, WARP_SPECIALIZE=WARP_SPECIALIZE, FLATTEN=FLATTEN,
        HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class PersistentTmaMatmul(TritonMatmulFamily):
    template = TEMPLATE
    name = "matmul_persistent_tma"
    op = "matmul"
    description = "persistent grid, TMA descriptor loads, grouped tiles, epilogue subtiling, optional warp specialization"

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [64, 128, 256],
                "BLOCK_N": [64, 128, 256],
                "BLOCK_K": [32, 64, 128],
                "GROUP": [1, 4, 8, 16, 32],
                "TILE_ORDER": ["m_major", "n_major"],
                "PROGRAMS_PER_SM": [1, 2],
                "DESCRIPTORS": ["host", "device"],
                "EPILOGUE_SUBTILE": [False, True],
                "WARP_SPECIALIZE": [False, True],
                "FLATTEN": [False, True],
                "NUM_WARPS": [4, 8],
                "NUM_STAGES": [2, 3, 4, 5],
            },
            constraints=(
                "smem: NUM_STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*elt + BLOCK_M*BLOCK_N*elt/(1+EPILOGUE_SUBTILE)",
                "regs: BLOCK_M*BLOCK_N/threads",
            ),
        )

    def default(self, problem: Problem) -> dict:
        m, n, _ = problem.shape
        small = m * n <= 1024 * 1024
        return {
            "BLOCK_M": 128,
            "BLOCK_N": 128 if small else 256,
            "BLOCK_K": 64,
            "GROUP": 8,
            "TILE_ORDER": "m_major",
            "PROGRAMS_PER_SM": 1,
            "DESCRIPTORS": "host",
            "EPILOGUE_SUBTILE": not small,
            "WARP_SPECIALIZE": False,
            "FLATTEN": False,
            "NUM_WARPS": 8,
            "NUM_STAGES": 3,
        }

    def staging_bytes(self, problem: Problem, params) -> int:
        # The epilogue stages the output tile (half of it when subtiled) for the TMA store.
        return (
            params["BLOCK_M"]
            * params["BLOCK_N"]
            * elt_bytes(problem)
            // (2 if params["EPILOGUE_SUBTILE"] else 1)
        )

    def check(self, problem: Problem, params) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        if params["WARP_SPECIALIZE"] and params["NUM_WARPS"] < 8:
            return "warp specialization failed to compile with 4 warps on Hopper (triton 3.6)"
        if params["FLATTEN"] and not params["WARP_SPECIALIZE"]:
            return "FLATTEN only matters with WARP_SPECIALIZE"
        return None
