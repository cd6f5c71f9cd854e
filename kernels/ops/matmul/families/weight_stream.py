"""matmul_weight_stream: small-M GEMM (decode, small batch, MoE experts) as a weight stream.

With M <= 64 the time is the time to read B (the weights) once; the arithmetic is a rounding
error. So each program owns a BLOCK_N-wide strip of B and a contiguous range of its K tiles,
streams that range once with 16-byte loads, and keeps the whole (padded) M in one tile, so no
byte of B is read twice. LOADS = "async" lets the compiler pipeline the loads NUM_STAGES deep
(cp.async into shared memory); "registers" prefetches the next two tiles into registers by
hand, so that the loads keep their L2 evict-first hint (cp.async drops it). MMA = "dot" pads
M to BLOCK_M >= 16 for tl.dot; "fma" (BLOCK_M = 1) multiplies on the CUDA cores.

How many programs share K (the split) is picked at run time from the shape and how many
programs of the compiled kernel the device holds at once (SPLIT_K = "auto", `split_plan`,
`slots`): enough programs in flight to cover HBM latency
(Little's law), whole waves, and as few fp32 partials as that allows. A fixed SPLIT_K
overrides it. The split is reduced deterministically: every program stores its fp32 partial
to its own slab, counts itself in on the tile's counter, and the last to arrive sums all the
slabs in split order 0, 1, 2, ... (not arrival order), so a given shape on a given GPU gives
bit-identical results on every call. One launch, no memset; the counters re-arm to zero.
That program also applies the epilogue: bias, activation and a "+res" layout's residual (a
decode step's o_proj and down_proj write x + y directly).
The workspace and counters are kept per device and plan between calls: two streams running
the same candidate at once would share them (as matmul_splitk_tma's would).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.ops.matmul.families import snippets
from kernels.ops.matmul.families.common import SMEM_LIMIT, TritonMatmulFamily, elt_bytes
from kernels.problem import Family, ParamSpace, Problem
from kernels.render import FAST_LAUNCH

WEIGHT_STREAM_KERNEL = """
@triton.jit
def load_tiles(a_ptrs, b_ptrs, ki, k_last, K, offs_k, mask_m, mask_n, BLOCK_K: tl.constexpr):
    # A's [BLOCK_M, BLOCK_K] and B's [BLOCK_K, BLOCK_N] tile number ki (zeros past k_last).
    k_ok = (offs_k < K - ki * BLOCK_K) & (ki < k_last)
    a = tl.load(a_ptrs, mask=mask_m[:, None] & k_ok[None, :], other=0.0)
    # B is read exactly once: evict it first, so it does not push out of L2 what others left
    # there (activations, dirty lines that would cost a write-back). cp.async drops the hint;
    # plain loads (LOADS = "registers", and the FMA form) keep it.
    b = tl.load(b_ptrs, mask=k_ok[:, None] & mask_n[None, :], other=0.0, eviction_policy="evict_first")
    return a, b


@triton.jit
def multiply_add(acc, a, b, USE_DOT: tl.constexpr):
    a, b = tf32_operand(a), tf32_operand(b)  # the FMA form computes TF32 products too
    if USE_DOT:
        acc = tl.dot(a, b, acc)
    else:  # FMA form (BLOCK_M == 1): acc is [BLOCK_K, BLOCK_N], reduced over K at the end
        acc = acc + tl.reshape(a, (b.shape[0], 1)).to(tl.float32) * b.to(tl.float32)
    return acc


# The split is a run-time value, never specialized on: one binary serves every split, and the
# occupancy probe (slots) compiles the very binary that then runs.
@triton.jit(do_not_specialize=["k_tiles_per_split", "splits"])
def matmul_weight_stream_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, ws_ptr, count_ptr, M, N, K, k_tiles_per_split,
    splits, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm,
    stride_rn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, PREFETCH: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
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
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    k_first = split * k_tiles_per_split
    k_last = tl.minimum(k_first + k_tiles_per_split, tl.cdiv(K, BLOCK_K))
    k0 = k_first * BLOCK_K
    # 64-bit offsets: B may hold up to 2**34 elements.
    a_ptrs = (
        a_ptr + offs_m[:, None].to(tl.int64) * stride_am
        + (k0 + offs_k)[None, :].to(tl.int64) * stride_ak
    )
    b_ptrs = b_ptr + (k0 + offs_k)[:, None].to(tl.int64) * stride_bk + offs_n[None, :] * stride_bn
    a_step = tl.full([], BLOCK_K, tl.int64) * stride_ak
    b_step = tl.full([], BLOCK_K, tl.int64) * stride_bk
    if USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    if PREFETCH:
        # LOADS = "registers": the tiles of the next two iterations are loaded into registers
        # before this one's multiply, so two tiles per program are always in flight; the
        # compiler's own pipelining is off (num_stages=1) and the loads keep their L2 hint.
        a0, b0 = load_tiles(a_ptrs, b_ptrs, k_first, k_last, K, offs_k, mask_m, mask_n, BLOCK_K)
        a1, b1 = load_tiles(
            a_ptrs + a_step, b_ptrs + b_step, k_first + 1, k_last, K, offs_k, mask_m, mask_n,
            BLOCK_K,
        )
        for ki in range(k_first, k_last):
            a_ptrs += a_step
            b_ptrs += b_step
            a2, b2 = load_tiles(
                a_ptrs + a_step, b_ptrs + b_step, ki + 2, k_last, K, offs_k, mask_m, mask_n,
                BLOCK_K,
            )
            acc = multiply_add(acc, a0, b0, USE_DOT)
            a0, b0, a1, b1 = a1, b1, a2, b2
    else:
        # LOADS = "async": the compiler pipelines the loads NUM_STAGES deep (cp.async).
        for ki in range(k_first, k_last):
            a, b = load_tiles(a_ptrs, b_ptrs, ki, k_last, K, offs_k, mask_m, mask_n, BLOCK_K)
            acc = multiply_add(acc, a, b, USE_DOT)
            a_ptrs += a_step
            b_ptrs += b_step
    if not USE_DOT:
        acc = tl.reshape(tl.sum(acc, axis=0), (1, BLOCK_N))
    last = splits == 1
    if splits > 1:
        tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        slab = ws_ptr + (tile * splits).to(tl.int64) * (BLOCK_M * BLOCK_N) + tile_offs
        # Rows past M are never stored or read: at M = 1 the partials are one row, not 16.
        tl.store(slab + split * (BLOCK_M * BLOCK_N), acc, mask=mask_m[:, None])
        tl.debug_barrier()  # every thread's partial is written before the count goes up
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        last = arrived == splits - 1
        if last:
            # Fixed order 0..splits-1 (this program's own slab included): deterministic sums.
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(0, splits):  # .cg: the other SMs' partials from L2, never stale L1
                acc += tl.load(
                    slab + s * (BLOCK_M * BLOCK_N), mask=mask_m[:, None], other=0.0,
                    cache_modifier=".cg",
                )
            tl.atomic_xchg(count_ptr + tile, 0)  # re-armed for the next call
    if last:
        acc = apply_epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
        mask = mask_m[:, None] & mask_n[None, :]
        if HAS_RESIDUAL:  # "+res": the model's residual add, after the bias and activation
            r_ptrs = res_ptr + offs_m[:, None].to(tl.int64) * stride_rm + offs_n[None, :] * stride_rn
            acc = acc + tl.load(r_ptrs, mask=mask, other=0.0).to(tl.float32)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
""".strip()

# Host side: the split plan. Pure Python on sizes only, so it is cached per shape and device.
SPLIT_PLAN = '''
# Little's law: HBM needs about bandwidth x loaded latency bytes in flight to run at its
# roof (H100 ~3 TB/s x ~1.5-2 us; H200 ~4.3 TB/s). Below that the stream is latency-bound.
IN_FLIGHT_BYTES = 6 * 2**20
MAX_SPLITS = 32


def split_plan(tiles, k_tiles, slots, rows, elt, accumulators=1):
    """(splits, k_tiles_per_split) that should finish soonest, in a fluid model of the stream.

    Programs run in waves of at most `slots` (resident programs, `slots()`); a wave of n programs of
    `per` K tiles each streams n * per tiles, but no faster than the latency allows when n
    programs keep too few bytes in flight (n < crowd). Each wave pays a start-up latency, and
    each split beyond the first writes an fp32 partial that the last program re-reads.
    Units: the time to stream one K step's tiles of B at the roof: one BLOCK_K x BLOCK_N tile
    per accumulator (two where a program keeps two products, swiglu_gate's gate and up; each
    has its own partial too). Fewest splits wins ties.
    """
    tile_bytes = BLOCK_K * BLOCK_N * accumulators * elt
    # LOADS = "registers" (NUM_STAGES 1) counts as one tile in flight, though it keeps two:
    # the H100 numbers of 2026-11-24 were taken with this plan.
    in_flight = max(1, NUM_STAGES - 1) * tile_bytes
    crowd = IN_FLIGHT_BYTES / in_flight  # programs needed to cover the latency
    latency = IN_FLIGHT_BYTES / tile_bytes  # the latency itself, in tile times
    partial = 2.0 * min(rows, BLOCK_M) / BLOCK_K  # one fp32 partial over one bf16 tile of B
    best = None
    for want in range(1, min(k_tiles, MAX_SPLITS) + 1):
        per = -(-k_tiles // want)
        splits = -(-k_tiles // per)
        if best is not None and splits == best[1]:
            continue
        programs = tiles * splits
        cost, left, first = 0.0, programs, True
        while left > 0:
            n = min(left, slots)
            cost += per * max(n, crowd) + (latency if first else latency / 4)
            if splits > 1:  # partial stores share the stream; the fix-up reads them from L2
                cost += n * partial + latency / 2 + splits * partial / 4
            left -= n
            first = False
        if best is None or cost < best[0]:
            best = (cost, splits, per)
    return best[1], best[2]


def slots(compile_kernel, device):
    """Programs the GPU holds at once: SMs x how many of the compiled kernel fit one SM
    (threads, registers, shared memory). The CPU interpreter: 4 "SMs" of 2, so small tests
    take the split path."""
    if device.type != "cuda":
        return 8
    compiled = compile_kernel()
    compiled._init_handles()  # loads the binary: n_regs is known from here on
    props = driver.active.utils.get_device_properties(device.index)
    threads = 32 * NUM_WARPS
    regs = -(-max(compiled.n_regs, 1) // 8) * 8 * threads  # allocated 8 per thread at a time
    fits = min(
        2048 // threads,  # sm_80/sm_90: 2048 threads per SM
        props["max_num_regs"] // regs,
        (props["max_shared_mem"] + 1024) // (compiled.metadata.shared + 1024),  # 1 KB/block
        32,
    )
    return props["multiprocessor_count"] * max(1, fits)


_PLANS = {}  # (device, M, N, K) -> (splits, k_tiles_per_split)
_BUFFERS = {}  # (device, tiles, splits) -> (fp32 partial slabs, int32 counters, zero at rest)


def plan(device, M, N, K, elt, compile_kernel, accumulators=1):
    """The split for this shape; `compile_kernel()` compiles the kernel (no launch) when the
    plan needs its occupancy."""
    key = (str(device), M, N, K)
    if key not in _PLANS:
        tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
        k_tiles = triton.cdiv(K, BLOCK_K)
        if SPLIT_K == "auto":
            _PLANS[key] = split_plan(
                tiles, k_tiles, slots(compile_kernel, device), M, elt, accumulators
            )
        else:
            per = triton.cdiv(k_tiles, min(SPLIT_K, k_tiles))
            _PLANS[key] = (triton.cdiv(k_tiles, per), per)
    return _PLANS[key]


def buffers(device, tiles, splits, accumulators=1):
    key = (str(device), tiles, splits)
    if key not in _BUFFERS:
        _BUFFERS[key] = (
            torch.empty(tiles * splits * accumulators * BLOCK_M * BLOCK_N if splits > 1 else 1,
                        dtype=torch.float32, device=device),
            torch.zeros(tiles, dtype=torch.int32, device=device),
        )
    return _BUFFERS[key]
'''.strip()

# A weight-stream module's start: its imports and constants, the fast launch and the split
# plan (this family's, and the two-product streams' of swiglu_gate and qkv_rotary).
STREAM_PRELUDE = (
    """$HEADER

import torch
import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


"""
    + FAST_LAUNCH
    + "\n\n\n"
    + SPLIT_PLAN
)

TEMPLATE = (
    STREAM_PRELUDE
    + "\n\n\n"
    + snippets.TF32_FN
    + "\n\n\n"
    + snippets.EPILOGUE_FN
    + "\n\n\n"
    + WEIGHT_STREAM_KERNEL
    + """


def run(a, b, *rest, out):
"""
    + snippets.OPERAND_VIEWS
    + """
    residual = rest[-1] if HAS_RESIDUAL else out  # any pointer without one; never read
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    strides = (a_view.stride(0), a_view.stride(1), b_view.stride(0), b_view.stride(1),
               out.stride(0), out.stride(1), residual.stride(0), residual.stride(1))
    meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, USE_DOT=MMA == "dot",
                PREFETCH=LOADS == "registers", HAS_BIAS=HAS_BIAS, ACTIVATION=ACTIVATION,
                HAS_RESIDUAL=HAS_RESIDUAL)
    stages = NUM_STAGES if LOADS == "async" else 1  # registers: our own prefetch, no cp.async

    def compile_kernel():  # the binary the launch below will use, compiled without a launch
        ws, count = buffers(out.device, 1, 2)
        return matmul_weight_stream_kernel.warmup(
            a_view, b_view, out, bias, residual, ws, count, M, N, K, 2, 2, *strides, **meta,
            grid=(1,), num_warps=NUM_WARPS, num_stages=stages,
        )

    splits, k_tiles_per_split = plan(out.device, M, N, K, a.element_size(), compile_kernel)
    workspace, counters = buffers(out.device, tiles, splits)
    launch(matmul_weight_stream_kernel, (tiles * splits,),
        a_view, b_view, out, bias, residual, workspace, counters, M, N, K, k_tiles_per_split,
        splits,
        *strides, **meta, num_warps=NUM_WARPS, num_stages=stages,
    )
"""
)


class WeightStreamMatmul(TritonMatmulFamily):
    template = TEMPLATE
    name = "matmul_weight_stream"
    op = "matmul"
    residual = True
    description = (
        "small-M weight stream: each program reads a BLOCK_N strip of B over its K range once, "
        "split K picked per shape and device, fp32 partials summed in fixed order by the last"
    )

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [1, 16, 32, 64],
                "BLOCK_N": [32, 64, 128, 256],
                "BLOCK_K": [32, 64, 128, 256],
                "MMA": ["dot", "fma"],
                "LOADS": ["async", "registers"],
                "SPLIT_K": ["auto", 1, 2, 3, 4, 6, 8, 16],
                "NUM_WARPS": [2, 4, 8],
                "NUM_STAGES": [1, 2, 3, 4, 5, 6],
            },
            constraints=(
                "smem: NUM_STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*elt",
                "fma: BLOCK_M == 1; dot: BLOCK_M >= 16",
                "registers: NUM_STAGES == 1; async: NUM_STAGES >= 2",
            ),
        )

    def default(self, problem: Problem) -> dict[str, Any]:
        m = problem.shape[0]
        block_m = 16 if m <= 16 else 32 if m <= 32 else 64
        return {
            "BLOCK_M": block_m,
            "BLOCK_N": 64 if m <= 16 else 128,
            "BLOCK_K": 128 if m <= 16 else 64,
            "MMA": "dot",
            "LOADS": "async",
            "SPLIT_K": "auto",
            "NUM_WARPS": 4,
            "NUM_STAGES": 4,
        }

    def check(self, problem: Problem, params: Mapping[str, Any]) -> str | None:
        # Family's rule (known names and values); the tile rule of TritonMatmulFamily is
        # replaced below, since the FMA form has no shared-memory tiles.
        if (why := Family.check(self, problem, params)) is not None:
            return why
        p = params
        threads = 32 * p["NUM_WARPS"]
        tile_bytes = (p["BLOCK_M"] + p["BLOCK_N"]) * p["BLOCK_K"] * elt_bytes(problem)
        if p["LOADS"] == "registers":
            if p["NUM_STAGES"] != 1:
                return "register prefetch runs with NUM_STAGES = 1 (no compiler pipelining)"
            if 3 * tile_bytes / (4 * threads) > 96:  # this tile and the two in flight
                return "three live tiles need more than 96 registers per thread"
        elif p["NUM_STAGES"] < 2:
            return "async loads need NUM_STAGES >= 2 to pipeline"
        if p["MMA"] == "fma":
            if p["BLOCK_M"] != 1:
                return "the FMA form keeps one row of A (BLOCK_M = 1)"
            if p["BLOCK_K"] * p["BLOCK_N"] / threads > 64:
                return "the FMA accumulator needs more than 64 registers per thread"
            smem = 0 if p["LOADS"] == "registers" else p["NUM_STAGES"] * tile_bytes
        else:
            if p["BLOCK_M"] < 16:
                return "tl.dot needs BLOCK_M >= 16"
            if p["BLOCK_M"] * p["BLOCK_N"] / threads > 128:
                return "accumulator needs more than 128 registers per thread; use more warps"
            smem = max(1, p["NUM_STAGES"]) * tile_bytes
        if smem > SMEM_LIMIT:
            return f"needs {smem} bytes of shared memory, over {SMEM_LIMIT}"
        return None
