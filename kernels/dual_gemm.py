"""The parameter space shared by the dual-accumulator GEMM families (swiglu_gate, qkv_rotary).

Both compute two products of one x tile per K step (gate and up; the first and second halves
of each rotary head) and combine them in the epilogue, so they share one rule for what fits:
the shared-memory ring holds x's tile and two weight tiles per stage, and the two fp32
accumulators live in registers. The starting points cover the two regimes a model has: few
rows (decode: stream the weights, many narrow programs, deep K steps) and many (prefill:
large tiles, grouped order so x tiles are reused from L2).
"""

from __future__ import annotations

from typing import Any

from kernels.problem import Family, ParamSpace, Problem

SMEM_BYTES = 232_448  # H100/H200 per-block maximum
MAX_ACC_REGS = 128  # fp32 accumulator registers per thread, both accumulators together
SMALL_M = 16  # at most this many rows: the weight-streaming regime


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
