"""The parameter space shared by the dual-accumulator GEMM families (swiglu_gate, qkv_rotary).

Both compute two products of one x tile per K step (gate and up; the first and second halves
of each rotary head) and combine them in the epilogue, so they share one rule for what fits:
the shared-memory ring holds x's tile and two weight tiles per stage, and the two fp32
accumulators live in registers. The starting points cover the two regimes a model has: few
rows (decode: stream the weights, many narrow programs, deep K steps) and many (prefill:
large tiles, grouped order so x tiles are reused from L2).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from kernels.problem import Family, ParamSpace, Problem
from kernels.render import render_module

SMEM_BYTES = 232_448  # H100/H200 per-block maximum
MAX_ACC_REGS = 128  # fp32 accumulator registers per thread, both accumulators together
SMALL_M = 16  # at most this many rows: the weight-streaming regime


# The weight-stream forms (few rows, K split over programs) share their main loop and the
# reduction of their two accumulators. stream_pair: this split's range of K tiles, x's rows
# against two weight strips (each column's row pointer, w1_rows / w2_rows), read once with
# evict-first loads. reduce_split_pair: each split stores its two fp32 partials to its own slab
# and counts itself in on the tile's counter; the last to arrive sums every split's partials in
# split order 0, 1, 2, ... (not arrival order: bit-identical results call to call) and alone
# goes on to the epilogue. The counters re-arm to zero. The slabs are (tiles, splits, 2,
# BLOCK_M, BLOCK_N).
STREAM_PAIR_FN = """
@triton.jit
def reduce_split_pair(acc1, acc2, ws_ptr, count_ptr, tile, split, splits, mask_m,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    last = splits == 1
    if splits > 1:
        tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        slab = ws_ptr + (tile * splits).to(tl.int64) * (2 * BLOCK_M * BLOCK_N) + tile_offs
        # Rows past M are never stored or read: at M = 1 the partials are one row, not 16.
        mine = slab + split * (2 * BLOCK_M * BLOCK_N)
        tl.store(mine, acc1, mask=mask_m[:, None])
        tl.store(mine + BLOCK_M * BLOCK_N, acc2, mask=mask_m[:, None])
        tl.debug_barrier()  # every thread's partials are written before the count goes up
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        last = arrived == splits - 1
        if last:
            acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(0, splits):  # .cg: the other SMs' partials from L2, never stale L1
                theirs = slab + s * (2 * BLOCK_M * BLOCK_N)
                acc1 += tl.load(theirs, mask=mask_m[:, None], other=0.0, cache_modifier=".cg")
                acc2 += tl.load(
                    theirs + BLOCK_M * BLOCK_N, mask=mask_m[:, None], other=0.0,
                    cache_modifier=".cg",
                )
            tl.atomic_xchg(count_ptr + tile, 0)  # re-armed for the next call
    return acc1, acc2, last


@triton.jit
def stream_pair(
    x_ptr, w1_rows, w2_rows, ws_ptr, count_ptr, offs_m, mask_m, K, tile, split, splits,
    k_tiles_per_split, stride_xm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    offs_k = tl.max_contiguous(tl.multiple_of(tl.arange(0, BLOCK_K), BLOCK_K), BLOCK_K)
    k_first = split * k_tiles_per_split
    k_last = tl.minimum(k_first + k_tiles_per_split, tl.cdiv(K, BLOCK_K))
    k0 = k_first * BLOCK_K
    # 64-bit offsets: a weight may hold up to 2**34 elements.
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + (k0 + offs_k)[None, :]
    w1_ptrs = w1_rows[None, :] + (k0 + offs_k)[:, None]  # (BLOCK_K, BLOCK_N): the W^T tiles
    w2_ptrs = w2_rows[None, :] + (k0 + offs_k)[:, None]
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_first, k_last):
        k_ok = offs_k < K - ki * BLOCK_K
        x = tl.load(x_ptrs, mask=mask_m[:, None] & k_ok[None, :], other=0.0)
        # The weights are read exactly once: evict them first, so they do not push out of L2
        # what others left there.
        w1 = tl.load(w1_ptrs, mask=k_ok[:, None], other=0.0, eviction_policy="evict_first")
        w2 = tl.load(w2_ptrs, mask=k_ok[:, None], other=0.0, eviction_policy="evict_first")
        acc1 = tl.dot(x, w1, acc1)
        acc2 = tl.dot(x, w2, acc2)
        x_ptrs += BLOCK_K
        w1_ptrs += BLOCK_K
        w2_ptrs += BLOCK_K
    return reduce_split_pair(
        acc1, acc2, ws_ptr, count_ptr, tile, split, splits, mask_m, BLOCK_M, BLOCK_N
    )
""".strip()


class DualGemmFamily(Family):
    """space/check/default/starting points; subclasses render their own kernel."""

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [16, 32, 64, 128],
                "BLOCK_N": [16, 32, 64, 128],  # columns per accumulator
                "BLOCK_K": [32, 64, 128, 256],
                "GROUP": [1, 8],
                "NUM_WARPS": [2, 4, 8],
                "NUM_STAGES": [2, 3, 4, 5, 6],
            },
            constraints=(
                "smem: NUM_STAGES*(BLOCK_M + 2*BLOCK_N)*BLOCK_K*elt",
                "registers: 2*BLOCK_M*BLOCK_N/(32*NUM_WARPS)",
            ),
        )

    def small(self, problem: Problem) -> bool:
        return problem.shape[0] <= SMALL_M

    def default(self, problem: Problem) -> dict[str, Any]:
        return dict(self.starting_points(problem)[0])

    def starting_points(self, problem: Problem) -> list[dict[str, Any]]:
        """The default first, then a small grid for the problem's regime, most promising
        first (the model job's screen times them on the GPU and keeps the fastest). Few rows:
        narrow programs streaming deep K steps, enough of them to keep every SM's loads in
        flight. Many rows: 128-row tiles, two 128-wide accumulators (a 128 x 256 tile's
        registers), grouped order so x tiles are reused from L2."""
        keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP", "NUM_WARPS", "NUM_STAGES")
        if self.small(problem):
            # H100, 2026-11-24 (results/model_llama_decode_h100.json, screen): swiglu_gate
            # 8x11008x4096 best (16, 32, 256, 4, 3) 75.3 us, then (16, 64, 128, 8, 3) 77.9;
            # qkv_rotary 8x32x32x128x4096 best (16, 64, 128, 8, 3) 50.4 us; (16, 16, 256, 8,
            # 5) was slowest on both. The rest are neighbours not yet measured.
            grid = [(16, 32, 256, 1, 4, 3), (16, 64, 128, 1, 8, 3), (16, 32, 256, 1, 8, 3),
                    (16, 64, 256, 1, 8, 2), (16, 32, 128, 1, 4, 4), (16, 16, 256, 1, 4, 4)]  # fmt: skip
        else:
            # H100 (same run): swiglu_gate 16384x2816x1024 best (128, 128, 64, 8, 8, 3)
            # 335 us, (128, 64, 64, 8, 8, 4) 416 us; qkv_rotary 16384x16x16x64x1024 lost to
            # PyTorch at every point (1045-1375 us against 570).
            grid = [(128, 128, 64, 8, 8, 3), (128, 64, 64, 8, 8, 4), (128, 128, 64, 8, 8, 4),
                    (128, 64, 64, 8, 4, 3), (64, 128, 64, 8, 4, 4), (128, 128, 32, 8, 8, 4)]  # fmt: skip
        points = [dict(zip(keys, values, strict=True)) for values in grid]
        return [p for p in points if self.check(problem, p) is None]

    def check(self, problem: Problem, params) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        p = params
        elt = problem.torch_dtype.itemsize
        smem = p["NUM_STAGES"] * (p["BLOCK_M"] + 2 * p["BLOCK_N"]) * p["BLOCK_K"] * elt
        if smem > SMEM_BYTES:
            return f"needs {smem} bytes of shared memory (at most {SMEM_BYTES})"
        regs = 2 * p["BLOCK_M"] * p["BLOCK_N"] / (32 * p["NUM_WARPS"])
        if regs > MAX_ACC_REGS:
            return f"two accumulators need {regs:.0f} registers per thread; more warps"
        return None


# Where a weight stream starts (few rows), best first: the neighbours of matmul_weight_stream's
# decode leaders (kernels/ops/matmul/starting_points.py), with BLOCK_N halved since each K step
# streams two strips of it. H100, 2026-12-06 (results/decode_streams_probe_h100.json): the first
# led swiglu_gate 8x11008x4096 (65.6 us; 4 stages 65.5), the second qkv_rotary 8x32x32x128x4096
# (40.3 us); 2 or 8 warps and BLOCK_N 16 lost (up to 80.8 us).
SMALL_M_GRID = (  # (BLOCK_N, BLOCK_K, NUM_STAGES, NUM_WARPS)
    (32, 256, 3, 4),
    (64, 128, 4, 4),
    (64, 64, 6, 4),
    (32, 128, 6, 4),
    (64, 128, 3, 8),
    (16, 256, 4, 4),
)
MAX_STREAM_M = 64  # more rows than this are a GEMM's regime, not a stream's


class DualStreamFamily(DualGemmFamily):
    """The weight-stream forms' space and starting points (few rows: a decode step): each
    program streams a BLOCK_N strip of both weights over its range of K tiles, SPLIT_K "auto"
    splits K per shape and device at run time (matmul_weight_stream's split plan), and the
    splits' partials meet in STREAM_PAIR_FN. What fits is DualGemmFamily's rule. Subclasses give
    their own kernel: `template`, with the module constants the problem sets (`fixed`)."""

    template: str  # the candidate module's text ($HEADER, $CONSTANTS: kernels.render)

    @abc.abstractmethod
    def fixed(self, problem: Problem) -> dict[str, Any]:
        """The module constants the problem sets (its layout's), not searched."""

    def render(self, problem: Problem, params: Mapping[str, Any]) -> str:
        return render_module(
            self.template,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed=self.fixed(problem),
            summary=self.description,
        )

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [16, 32, 64],
                "BLOCK_N": [16, 32, 64, 128],  # outputs: a strip of each weight this wide
                "BLOCK_K": [32, 64, 128, 256],
                "SPLIT_K": ["auto", 1, 2, 4, 8, 16],
                "NUM_WARPS": [2, 4, 8],
                "NUM_STAGES": [2, 3, 4, 5, 6],
            },
            constraints=(
                "smem: NUM_STAGES*(BLOCK_M + 2*BLOCK_N)*BLOCK_K*elt",
                "registers: 2*BLOCK_M*BLOCK_N/(32*NUM_WARPS)",
            ),
        )

    def default(self, problem: Problem) -> dict[str, Any]:
        """The grid's first point (valid at every BLOCK_M)."""
        return self._point(problem, *SMALL_M_GRID[0])

    def _point(self, problem: Problem, n: int, k: int, stages: int, warps: int) -> dict[str, Any]:
        m = problem.shape[0]
        return {
            "BLOCK_M": 16 if m <= 16 else 32 if m <= 32 else 64,  # the whole M in one tile
            "BLOCK_N": n,
            "BLOCK_K": k,
            "SPLIT_K": "auto",
            "NUM_WARPS": warps,
            "NUM_STAGES": stages,
        }

    def starting_points(self, problem: Problem) -> list[dict[str, Any]]:
        """The few-row grid (none beyond MAX_STREAM_M rows: a GEMM's regime)."""
        if problem.shape[0] > MAX_STREAM_M:
            return []
        points = [self._point(problem, *row) for row in SMALL_M_GRID]
        return [p for p in points if self.check(problem, p) is None]
