"""matmul_streamk_tma: data-parallel tiles plus one stream-K wave, persistent, TMA loads.

A persistent grid of one program per SM finishes after ceil(tiles / SMs) tiles while the
average SM works tiles / SMs: 4096^3 in 128x256 tiles is 512 tiles on 132 SMs, 3.88 waves,
so ~3 % of the makespan is the partial last wave. Here the tiles split into a data-parallel
part (whole waves, one program per tile, GROUP-swizzled as in matmul_persistent_tma) and a
stream-K part (the partial wave, plus one whole wave with SK_WAVES=2) whose K-iterations are
divided evenly, to the iteration, over the programs. A program's stream-K range may cover the
tail of one tile, whole tiles and the head of another: a whole tile is stored directly; a
partial one goes as fp32 to the program's workspace slot, and the program whose arrival
completes the tile's count (the contributors are known from the split) sums the partials in
program order (the same bits whoever arrives last), applies the epilogue, stores C and
re-arms the counter. Nobody waits on anybody, so the kernel is correct even when programs
are not co-resident. SK_FIRST runs the stream-K share before the data-parallel tiles, so the
fixups overlap other programs' main loops. SK_PEEK lets a tile's head segment, usually the last
to arrive, read the count first and skip writing its partial when the other is already in.
Workspace and counters are kept per device between calls (counters are zero at rest), so two
launches on different streams at once would share them (as matmul_splitk_tma's do).
Problems whose strides TMA cannot take fall back to the tiled pointer kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from kernels.ops.matmul.families import snippets
from kernels.ops.matmul.families.persistent_tma import PersistentTmaMatmul
from kernels.problem import ParamSpace, Problem
from kernels.render import FAST_LAUNCH

STREAMK_KERNEL = """
@triton.jit
def accumulate(a_desc, b_desc, off_m, off_n, k_first, k_last,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               A_TRANS: tl.constexpr, B_TRANS: tl.constexpr):
    # TMA zero-fills reads past the edges (M, N and the K tail), so the loop has no masks.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_first, k_last):
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
    return acc


@triton.jit
def store_tile(c_desc, acc, bias_ptr, off_m, off_n, N, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
               HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    offs_n = off_n + tl.arange(0, BLOCK_N)
    acc = apply_epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    if EPILOGUE_SUBTILE:  # two half-width stores: half the staging buffer
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([off_m, off_n], left.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def share_start(p, sk_base, sk_extra):
    # The first stream-K iteration of program p: programs below sk_extra take one more.
    return p * sk_base + tl.minimum(p, sk_extra)


@triton.jit
def share_owner(i, sk_base, sk_extra):
    # The program whose share holds stream-K iteration i (the inverse of share_start).
    boundary = sk_extra * (sk_base + 1)
    return tl.where(
        i < boundary, i // (sk_base + 1), sk_extra + (i - boundary) // tl.maximum(sk_base, 1)
    )


@triton.jit
def partial_slot(ws_ptr, q, tile_begin, sk_base, sk_extra, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    # Where program q keeps its fp32 partial of the stream-K tile starting at iteration
    # tile_begin: two dense BLOCK_M x BLOCK_N slots per program, 0 for the tile its share
    # starts in, 1 for the tile it ends in (tiles in between are whole and stored directly).
    slot = 2 * q + (share_start(q, sk_base, sk_extra) < tile_begin).to(tl.int32)
    return ws_ptr + slot.to(tl.int64) * (BLOCK_M * BLOCK_N)


@triton.jit
def add_partial(acc, part_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # acc + the partial at part_ptr, one half-width column block at a time: a whole fp32
    # partial loaded next to a 128x256 accumulator needs more than 255 registers and spills.
    # .cg: read the other SMs' partials from L2, never a stale L1.
    HALF: tl.constexpr = BLOCK_N // 2
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, HALF)[None, :]
    left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, HALF)), (0, 2, 1)))
    left += tl.load(part_ptr + offs, cache_modifier=".cg")
    right += tl.load(part_ptr + HALF + offs, cache_modifier=".cg")
    return tl.reshape(tl.permute(tl.join(left, right), (0, 2, 1)), (BLOCK_M, BLOCK_N))


@triton.jit
def data_parallel_tiles(
    a_desc, b_desc, c_desc, bias_ptr, N, num_pid_m, num_pid_n, k_tiles, dp_tiles,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, M_MAJOR: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    A_TRANS: tl.constexpr, B_TRANS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    # Tiles 0 .. dp_tiles-1, whole waves of them: one program per tile, all of its K.
    for tile_id in tl.range(
        tl.program_id(0), dp_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE
    ):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP, M_MAJOR)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = accumulate(a_desc, b_desc, off_m, off_n, 0, k_tiles,
                         BLOCK_M, BLOCK_N, BLOCK_K, A_TRANS, B_TRANS)
        store_tile(c_desc, acc, bias_ptr, off_m, off_n, N, BLOCK_M, BLOCK_N,
                   EPILOGUE_SUBTILE, HAS_BIAS, ACTIVATION)


@triton.jit
def stream_k_share(
    a_desc, b_desc, c_desc, bias_ptr, ws_ptr, count_ptr, N, num_pid_m, num_pid_n, k_tiles,
    dp_tiles, sk_programs, sk_base, sk_extra,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, M_MAJOR: tl.constexpr,
    A_TRANS: tl.constexpr, B_TRANS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
    SK_PEEK: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    # Stream-K iteration i is K-step i % k_tiles of stream-K tile i // k_tiles (output tile
    # dp_tiles + i // k_tiles). Program p owns iterations share_start(p) .. share_start(p+1)-1
    # and takes each tile they touch in turn: the tail of one, whole tiles, the head of one.
    pid = tl.program_id(0)
    if pid < sk_programs:
        first = share_start(pid, sk_base, sk_extra)
        end = share_start(pid + 1, sk_base, sk_extra)
        first_tile = first // k_tiles
        tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        for s in range((end - 1) // k_tiles - first_tile + 1):
            sk_tile = first_tile + s
            tile_begin = sk_tile * k_tiles  # its first stream-K iteration
            k_first = tl.maximum(first - tile_begin, 0)
            k_last = tl.minimum(end - tile_begin, k_tiles)
            pid_m, pid_n = tile_coords(dp_tiles + sk_tile, num_pid_m, num_pid_n, GROUP, M_MAJOR)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            acc = accumulate(a_desc, b_desc, off_m, off_n, k_first, k_last,
                             BLOCK_M, BLOCK_N, BLOCK_K, A_TRANS, B_TRANS)
            done = (k_first == 0) & (k_last == k_tiles)  # a whole tile: no one else adds to it
            if k_last - k_first < k_tiles:
                first_owner = share_owner(tile_begin, sk_base, sk_extra)
                others = share_owner(tile_begin + k_tiles - 1, sk_base, sk_extra) - first_owner
                skip = k_first < 0  # False: store our partial and count ourselves in
                if SK_PEEK:
                    # A tile's head segment usually arrives last: the other contributor's share
                    # starts in this tile, so it gets here first. If it is in, skip our store.
                    if (k_first == 0) & (others == 1):
                        peek = tl.atomic_add(count_ptr + sk_tile, 0, sem="acquire", scope="gpu")
                        skip = peek == 1
                if skip:
                    done = skip
                else:
                    own = partial_slot(ws_ptr, pid, tile_begin, sk_base, sk_extra, BLOCK_M, BLOCK_N)
                    tl.store(own + tile_offs, acc)
                    tl.debug_barrier()  # every thread's partial is written before the count goes up
                    arrived = tl.atomic_add(count_ptr + sk_tile, 1, sem="acq_rel", scope="gpu")
                    done = arrived == others  # the last contributor to arrive
                if done:
                    # The partials are summed in program order, whoever arrives last, so every
                    # run gives the same bits; with two, a + b == b + a and ours stays put.
                    if others == 1:
                        other = 2 * first_owner + 1 - pid
                        part = partial_slot(ws_ptr, other, tile_begin, sk_base, sk_extra,
                                            BLOCK_M, BLOCK_N)
                        acc = add_partial(acc, part, BLOCK_M, BLOCK_N)
                    else:
                        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                        for q in range(first_owner, first_owner + others + 1):
                            part = partial_slot(ws_ptr, q, tile_begin, sk_base, sk_extra,
                                                BLOCK_M, BLOCK_N)
                            acc = add_partial(acc, part, BLOCK_M, BLOCK_N)
                    tl.atomic_xchg(count_ptr + sk_tile, 0)  # re-armed for the next call
            if done:
                store_tile(c_desc, acc, bias_ptr, off_m, off_n, N, BLOCK_M, BLOCK_N,
                           EPILOGUE_SUBTILE, HAS_BIAS, ACTIVATION)


# The split's counts are runtime values Triton need not specialize on (== 1, % 16): one
# compile then serves every shape whose sizes and strides specialize alike.
@triton.jit(do_not_specialize=["dp_tiles", "sk_programs", "sk_base", "sk_extra"])
def matmul_streamk_tma_kernel(
    a_desc, b_desc, c_desc, bias_ptr, ws_ptr, count_ptr, M, N, K,
    stride_a, stride_b, stride_c, dp_tiles, sk_programs, sk_base, sk_extra,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, M_MAJOR: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    SK_FIRST: tl.constexpr, SK_PEEK: tl.constexpr, A_TRANS: tl.constexpr, B_TRANS: tl.constexpr,
    DEVICE_DESCRIPTORS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr,
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
    k_tiles = tl.cdiv(K, BLOCK_K)
    if SK_FIRST:
        stream_k_share(a_desc, b_desc, c_desc, bias_ptr, ws_ptr, count_ptr, N, num_pid_m,
                       num_pid_n, k_tiles, dp_tiles, sk_programs, sk_base, sk_extra,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP, M_MAJOR, A_TRANS, B_TRANS,
                       EPILOGUE_SUBTILE, SK_PEEK, HAS_BIAS, ACTIVATION)
    data_parallel_tiles(a_desc, b_desc, c_desc, bias_ptr, N, num_pid_m, num_pid_n, k_tiles,
                        dp_tiles, BLOCK_M, BLOCK_N, BLOCK_K, GROUP, M_MAJOR, NUM_PROGRAMS,
                        A_TRANS, B_TRANS, EPILOGUE_SUBTILE, WARP_SPECIALIZE, FLATTEN,
                        HAS_BIAS, ACTIVATION)
    if not SK_FIRST:
        stream_k_share(a_desc, b_desc, c_desc, bias_ptr, ws_ptr, count_ptr, N, num_pid_m,
                       num_pid_n, k_tiles, dp_tiles, sk_programs, sk_base, sk_extra,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP, M_MAJOR, A_TRANS, B_TRANS,
                       EPILOGUE_SUBTILE, SK_PEEK, HAS_BIAS, ACTIVATION)
""".strip()

TEMPLATE = (
    """$HEADER

from typing import NamedTuple

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
    + STREAMK_KERNEL
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

# The number of programs (one per SM). Tests set it to a few programs so that the CPU
# interpreter, which has no SMs, still splits tiles between programs; None: the device's.
SM_COUNT_OVERRIDE = None
_SM_COUNT = {}  # device index -> multiprocessors; a device property, read once


def num_programs(device):
    if SM_COUNT_OVERRIDE is not None:
        return SM_COUNT_OVERRIDE
    if device.type != "cuda":  # the CPU interpreter: a few programs still split the tiles
        return 4
    if device.index not in _SM_COUNT:
        _SM_COUNT[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNT[device.index]


# A stream-K share is at least 1/MAX_SHARES_PER_TILE of a tile's K-iterations, so a tile
# has at most MAX_SHARES_PER_TILE + 1 contributors however few tiles there are.
MAX_SHARES_PER_TILE = 4


class StreamKSplit(NamedTuple):
    tiles: int
    k_tiles: int  # K-iterations per tile
    dp_tiles: int  # tiles 0 .. dp_tiles-1: whole tiles, round robin over the programs
    sk_tiles: int  # tiles dp_tiles .. tiles-1: their K-iterations are shared
    sk_programs: int  # programs 0 .. sk_programs-1 take a share
    sk_base: int  # iterations per share; programs below sk_extra take one more
    sk_extra: int


def stream_k_split(M, N, K, programs):
    """Which tiles are data-parallel and how the others' K-iterations are shared."""
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    k_tiles = triton.cdiv(K, BLOCK_K)
    partial_wave = tiles % programs
    sk_tiles = min(tiles, partial_wave + (SK_WAVES - 1) * programs) if partial_wave else 0
    sk_iters = sk_tiles * k_tiles
    min_share = triton.cdiv(k_tiles, MAX_SHARES_PER_TILE)
    sk_programs = min(programs, sk_iters // min_share)  # 0 when there is no stream-K part
    sk_base, sk_extra = divmod(sk_iters, sk_programs) if sk_programs else (0, 0)
    return StreamKSplit(tiles, k_tiles, tiles - sk_tiles, sk_tiles, sk_programs, sk_base, sk_extra)


_BUFFERS = {}  # (device, programs) -> (fp32 partial slots, int32 arrival counters, zero at rest)


def buffers(device, programs):
    # Two slots per program (the tile its share starts in and the one it ends in); fewer
    # than 2 * programs stream-K tiles (one partial wave plus at most one whole wave).
    # Allocated once and reused by every call: two launches running at once on different
    # streams would share them and corrupt each other (as matmul_splitk_tma's would).
    key = (str(device), programs)
    if key not in _BUFFERS:
        _BUFFERS[key] = (
            torch.empty(2 * programs * BLOCK_M * BLOCK_N, dtype=torch.float32, device=device),
            torch.zeros(2 * programs, dtype=torch.int32, device=device),
        )
    return _BUFFERS[key]


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
    programs = num_programs(out.device)
    split = stream_k_split(M, N, K, programs)
    workspace, counters = buffers(out.device, programs)
    if DESCRIPTORS == "device":  # built on the GPU from pointers: less host work per call
        a_desc, b_desc, c_desc = a, b, out
    else:  # host descriptors over the tensors as stored; the kernel transposes tiles
        a_desc = HostDescriptor.over(a, [BLOCK_K, BLOCK_M] if A_TRANS else [BLOCK_M, BLOCK_K])
        b_desc = HostDescriptor.over(b, [BLOCK_N, BLOCK_K] if B_TRANS else [BLOCK_K, BLOCK_N])
        c_block_n = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
        c_desc = HostDescriptor.over(out, [BLOCK_M, c_block_n])
    launch(matmul_streamk_tma_kernel, (programs,),
        a_desc, b_desc, c_desc, bias, workspace, counters, M, N, K,
        a.stride(0), b.stride(0), out.stride(0),
        split.dp_tiles, split.sk_programs, split.sk_base, split.sk_extra,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        GROUP=GROUP, M_MAJOR=TILE_ORDER == "m_major", NUM_PROGRAMS=programs,
        SK_FIRST=SK_FIRST, SK_PEEK=SK_PEEK, A_TRANS=A_TRANS, B_TRANS=B_TRANS,
        DEVICE_DESCRIPTORS=DESCRIPTORS == "device", EPILOGUE_SUBTILE=EPILOGUE_SUBTILE,
        WARP_SPECIALIZE=WARP_SPECIALIZE, FLATTEN=FLATTEN,
        HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class StreamKTmaMatmul(PersistentTmaMatmul):
    """The persistent TMA family's tiles, staging and rules; the grid and schedule differ."""

    template = TEMPLATE
    name = "matmul_streamk_tma"
    op = "matmul"
    description = (
        "persistent data-parallel waves plus one stream-K wave (the partial wave's K-iterations "
        "shared evenly by all SMs, last contributor fixes up), TMA loads and stores"
    )
    # Stream-K runs one program per SM by construction: no PROGRAMS_PER_SM.
    STREAM_K: ClassVar[dict[str, Sequence[Any]]] = {
        "SK_WAVES": [1, 2],
        "SK_FIRST": [True, False],
        "SK_PEEK": [True, False],
    }

    def space(self, problem: Problem) -> ParamSpace:
        base = super().space(problem)
        choices = {k: v for k, v in base.choices.items() if k != "PROGRAMS_PER_SM"}
        choices = {**choices, "GROUP": [1, 4, 8, 16], **self.STREAM_K}
        return ParamSpace(choices, constraints=base.constraints)

    def default(self, problem: Problem) -> dict:
        params = {k: v for k, v in super().default(problem).items() if k != "PROGRAMS_PER_SM"}
        return {**params, "SK_WAVES": 1, "SK_FIRST": True, "SK_PEEK": True}
