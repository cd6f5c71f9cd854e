"""matmul's starting points: per shape class, the points that led a wider search, best first.

Points are partial: missing parameters come from the family's default, and every point is
still validated by the family's check() before it is rendered. The lists stay short because
each distinct point compiles once (the benchmark tries all of a class; the agents' first
planned step tries the first few).
"""

from __future__ import annotations

from typing import Any

from kernels.problem import Problem

Point = tuple[str, dict[str, Any]]

# The points below are the leaders of a wider per-shape search on an H200
# (benchmarks/results/matmul_search_h200_round*.json, by a probe since retired), plus a few
# untried neighbours (host-side TMA descriptors: no descriptor set-up inside a 30 us kernel).


def tma_point(bm, bn, bk, w, s, sub, ws, flat, group=8, desc="device", order=None) -> Point:
    extra = {"TILE_ORDER": order} if order else {}  # else the family's default order
    return (
        "matmul_persistent_tma",
        {
            **extra,
            "BLOCK_M": bm,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "NUM_WARPS": w,
            "NUM_STAGES": s,
            "EPILOGUE_SUBTILE": sub,
            "WARP_SPECIALIZE": ws,
            "FLATTEN": flat,
            "GROUP": group,
            "DESCRIPTORS": desc,
        },
    )


def splitk_tma_point(
    bm, bn, bk, split, w, s, group=1, desc="device", ws=False, order=None
) -> Point:
    extra = {"TILE_ORDER": order} if order else {}
    return (
        "matmul_splitk_tma",
        {
            **extra,
            "BLOCK_M": bm,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "SPLIT_K": split,
            "NUM_WARPS": w,
            "NUM_STAGES": s,
            "GROUP": group,
            "DESCRIPTORS": desc,
            "WARP_SPECIALIZE": ws,
        },
    )


def tiled_point(bm, bn, bk, w, s, group=1) -> Point:
    return (
        "matmul_tiled",
        {
            "BLOCK_M": bm,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "NUM_WARPS": w,
            "NUM_STAGES": s,
            "GROUP": group,
        },
    )


_tma, _sk, _tiled = tma_point, splitk_tma_point, tiled_point

DECODE = [  # weight streaming: BLOCK_M 16, many programs along N, split K where N is short
    _sk(16, 128, 128, 1, 4, 4, desc="host"),
    _sk(16, 128, 128, 1, 4, 3, desc="host"),
    _sk(16, 64, 128, 1, 4, 4, desc="host"),
    _sk(16, 64, 256, 2, 4, 3),
    _sk(16, 64, 256, 2, 4, 3, desc="host"),
    _sk(16, 128, 128, 4, 4, 3),
    _sk(16, 64, 256, 1, 4, 4),
    _sk(16, 64, 128, 4, 4, 3),
]

TINY = [
    _tiled(*t)
    for t in [
        (32, 32, 128, 4, 2),
        (32, 64, 64, 4, 3),
        (32, 64, 128, 4, 2),
        (64, 32, 128, 4, 2),
        (64, 32, 128, 4, 1),
    ]
]

SMALL = [
    _tiled(*t, group=8)
    for t in [(64, 32, 128, 4, 3), (64, 64, 128, 4, 3), (64, 64, 128, 4, 4), (32, 64, 128, 4, 3)]
]

DEEP_K = [  # K >= 4 max(M, N): one wave of 128 programs, by 128x64 tiles or by 2 splits
    # cuBLAS (ncu, 1024x1024x8192) runs 128 tiles of 128x64, no split, 2-CTA clusters.
    _sk(128, 64, 64, 1, 4, 6, group=8),
    _sk(128, 64, 64, 1, 8, 6, group=8, ws=True),
    _sk(128, 64, 64, 1, 8, 6, group=8, desc="host", ws=True),
    _sk(128, 64, 128, 1, 4, 4, group=8),
    _sk(128, 64, 128, 1, 8, 4, group=8, ws=True),
    _sk(128, 128, 64, 2, 8, 4, group=8),
    _sk(128, 128, 128, 2, 8, 3, group=8),
    _sk(128, 128, 64, 2, 4, 4, group=8),
    _sk(128, 128, 64, 2, 8, 4, group=8, desc="host"),
    _sk(128, 128, 128, 2, 8, 3, group=8, desc="host"),
    _sk(128, 128, 64, 2, 8, 4, group=8, desc="host", ws=True),
    _sk(128, 128, 64, 2, 8, 3, group=8, desc="host", ws=True),
    _sk(256, 128, 64, 4, 8, 3, group=8, desc="host", ws=True),
    _sk(128, 256, 64, 4, 8, 3, group=8, desc="host", ws=True),
]

LARGE = [
    _tma(128, 256, 64, 8, 3, True, True, True),
    _tma(128, 256, 64, 8, 3, True, True, True, desc="host"),
    _tma(128, 256, 64, 8, 4, True, True, True),
    _tma(128, 256, 64, 8, 3, False, True, True),
    _tma(128, 256, 64, 8, 3, False, True, True, desc="host"),
    _tma(128, 256, 64, 8, 3, True, True, True, group=4),
    _tma(128, 128, 64, 8, 4, False, True, True, group=16),
    # No stream-K point: on the H200 (2026-11-22, results/streamk_probe_h200.json) every one
    # lost to the persistent leader, 4096^3 207 vs 185 us, 2048^3 40 vs 30 us.
    _tiled(128, 256, 64, 8, 4, group=8),
    _tiled(128, 256, 64, 8, 3, group=8),
    _sk(128, 256, 64, 1, 8, 3, group=8),
    _sk(128, 256, 64, 1, 8, 3, group=8, desc="host"),
    _sk(128, 256, 64, 1, 8, 3, group=8, desc="host", ws=True),
    _sk(128, 256, 64, 1, 8, 4, group=8, desc="host", ws=True),
]


# --- Weight streaming (M <= 64), matmul_weight_stream ------------------------------------
# Kept in its own block: each M class gets the family's points for its BLOCK_M (the whole M in
# one tile), then the split-K TMA leaders above. SPLIT_K "auto" picks the split per shape and
# device at run time (the family's split_plan), so these points carry no per-shape tables.
# Where measured: H100, 2026-11-24, on the unseen set's ten M <= 64 shapes themselves
# (results/matmul_unseen_h100.json, results/matmul_unseen_h100_m64_round2.json and
# results/weight_stream_h100.json): so the *order* below saw those shapes; the points are per
# class, and the benchmark's bounded search tries all of a class's points anyway.
# Async (cp.async, compiler-pipelined) points lead: 79-103 % of the copy roof with a clean L2
# on every shape of >= 32 MiB but one. Register prefetch (evict-first B) is slower with a
# clean L2 and wins only where the L2 flush left dirty lines to write back (1x4096x14336:
# 51.8 vs 57.3 us for torch dirty, 46.5 vs 44.3 us clean), so it comes last. The timing's
# flush leaves a clean L2 since kf-timing-v2 (harness.timing.L2Flush).


def weight_stream_point(bm, bn, bk, s, w, split="auto", mma="dot", loads="async") -> Point:
    return (
        "matmul_weight_stream",
        {
            "BLOCK_M": bm,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "MMA": mma,
            "LOADS": loads,
            "SPLIT_K": split,
            "NUM_WARPS": w,
            "NUM_STAGES": s,
        },
    )


def _ws(bm, bn, bk, s, w, **kw) -> Point:
    return weight_stream_point(bm, bn, bk, s, w, **kw)


def _wr(bm, bn, bk, w, **kw) -> Point:  # register prefetch: keeps the L2 evict-first hint
    return weight_stream_point(bm, bn, bk, 1, w, loads="registers", **kw)


WEIGHT_STREAM = {  # BLOCK_M -> points, best first
    16: [
        _ws(16, 64, 256, 3, 4),
        _ws(16, 128, 128, 4, 4),
        _ws(16, 128, 64, 6, 4),
        _ws(16, 64, 128, 6, 4),
        _wr(16, 128, 64, 8),
        _wr(16, 64, 64, 4),
    ],
    32: [
        _ws(32, 64, 256, 3, 4),
        _ws(32, 128, 64, 6, 4),
        _ws(32, 64, 128, 4, 4),
        _wr(32, 64, 64, 4),
    ],
    64: [
        _ws(64, 64, 128, 4, 4),
        _ws(64, 128, 64, 4, 8),
        _ws(64, 128, 64, 4, 4),
        _wr(64, 64, 64, 8),
    ],
}

# One row of A: the FMA form (no tensor cores) next to the padded tl.dot: with register
# prefetch it streamed 1x128256x4096 at 101.6 % of the copy roof (clean L2), but 1x6144x4096
# at 68 % (tl.dot, async: 80 %).
WEIGHT_STREAM_M1 = [_wr(1, 128, 32, 4, mma="fma")]


def weight_stream_points(problem: Problem) -> list[Point]:
    m = problem.shape[0]
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    return WEIGHT_STREAM[block_m] + (WEIGHT_STREAM_M1 if m == 1 else [])


# --- end of the weight-streaming block ------------------------------------------------------


def shape_class(problem: Problem) -> str:
    """decode, tiny, small, deep_k or large: the classes the H200 search ranked separately."""
    m, n, k = problem.shape
    if m <= 64:
        return "decode"
    if m * n <= 256 * 256:  # tiny: a handful of programs, latency matters most
        return "tiny"
    if m * n <= 512 * 512:
        return "small"
    if k >= 4 * max(m, n):
        return "deep_k"
    return "large"


_BY_CLASS: dict[str, list[Point]] = {
    "decode": DECODE,
    "tiny": TINY,
    "small": SMALL,
    "deep_k": DEEP_K,
    "large": LARGE,
}


# CUTLASS 3.x Hopper points (matmul_cutlass_sm90), measured on an H100 against torch.matmul on
# the unseen set plus 4096^3 (a probe since retired, two rounds:
# results/cutlass_probe_h100_round1.json, results/cutlass_probe_h100.json). On every shape
# there with M > 64 they beat what the Triton families reached on the same shapes (issue 13's
# measurements: 0.43-0.70x on the worst), so they come first in the classes they cover; where
# they still trail torch.matmul (noted per point) the benchmark's gate falls back to torch.


def cutlass_point(
    tm,
    tn,
    cm,
    cn,
    schedule="cooperative",
    scheduler="persistent",
    raster="heuristic",
    swizzle=1,
    splits=1,
    decomposition=None,
) -> Point:
    default_decomposition = {"persistent": "data_parallel", "streamk": "streamk"}
    return (
        "matmul_cutlass_sm90",
        {
            "TILE_M": tm,
            "TILE_N": tn,
            "TILE_K": 64,
            "CLUSTER_M": cm,
            "CLUSTER_N": cn,
            "SCHEDULE": schedule,
            "SCHEDULER": scheduler,
            "STAGES": 0,
            "RASTER": raster,
            "SWIZZLE": swizzle,
            "SPLITS": splits,
            "DECOMPOSITION": decomposition or default_decomposition.get(scheduler, "splitk"),
        },
    )


_cl = cutlass_point

CUTLASS_LARGE = [  # both sides >= ~1000: whole waves of 128x256 tiles
    # 4096^3 0.99x (ncu: 179 vs cuBLAS's 175 us, the same 132-CTA 2-CTA-cluster shape),
    # 8192^3 1.01-1.04x, prefill 2048x6144x4096 / 2048x14336x4096 0.99x.
    _cl(128, 256, 2, 1, raster="along_n", swizzle=8),
    # Stream-K evens out the last partial wave: 2048x32000x4096 1.02x, 4096x3584x18944 1.05x.
    _cl(128, 256, 2, 1, scheduler="streamk"),
    _cl(128, 256, 1, 1),  # 2048x8192x28672 1.00x, 2048x6144x4096 0.995x
    # 8192^3 on a power-throttled H100 (torch 691 TFLOP/s): 1.04x, ahead of 128x256.
    _cl(128, 128, 2, 1, "pingpong", raster="along_n", swizzle=8),
    _cl(128, 128, 2, 2, "pingpong", raster="along_n", swizzle=4),  # 3000^3 0.89x (best)
    _cl(128, 192, 1, 1, scheduler="streamk"),  # 4096x576x7168 0.94x (best): N = 3 x 192
]

CUTLASS_DEEP_K = [  # K >= 4 max(M, N)
    _cl(128, 256, 2, 1, scheduler="streamk"),  # 4096x3584x18944 1.05x
    # 512x512x32768 0.98x: 16 tiles x 8 K-slices, fp32 partials summed in order.
    _cl(128, 128, 1, 1, scheduler="batched_splitk", splits=8, decomposition="splitk"),
    _cl(64, 128, 1, 1, "pingpong", "batched_splitk", splits=4, decomposition="splitk"),
]

CUTLASS_FEW_TILES = [  # fewer 128x128 tiles than SMs (M 128-512 against N of 1-3 K): split K
    # 128x1536x7168 0.83x, 256x2048x7168 0.94x (kernel time by ncu at 128x1536x7168: 13.1 + 4.4
    # us against cuBLAS's 13.4 + 4.8; the protocol's 22.8 vs 18.9 us is outside the kernels).
    _cl(64, 128, 1, 1, "pingpong", "batched_splitk", splits=4, decomposition="splitk"),
    _cl(64, 128, 1, 1, "pingpong", "batched_splitk", splits=2, decomposition="splitk"),
    _cl(128, 128, 1, 1, scheduler="batched_splitk", splits=8, decomposition="splitk"),
    _cl(64, 128, 1, 1, "pingpong"),  # 128x1408x2048 0.72-0.85x, 77x3072x768 0.77-0.90x
]


def cutlass_points(problem: Problem) -> list[Point]:
    """The CUTLASS points for this problem, or none: decode (M <= 64, weight streaming) and
    tiny problems are not covered, nor shapes whose rows TMA cannot take (they would time
    the family's padded fallback: check() refuses them)."""
    from kernels.ops.matmul.families.cutlass_sm90 import CutlassSm90Matmul

    if shape_class(problem) in ("decode", "tiny"):
        return []
    if CutlassSm90Matmul().shape_blocker(problem) is not None:
        return []
    m, n, k = problem.shape
    if -(-m // 128) * -(-n // 128) < 132:
        # Measured with K >= 2048 only; below that a split has little to share.
        return CUTLASS_FEW_TILES if k >= 2048 else []
    if k >= 4 * max(m, n):
        return CUTLASS_DEEP_K
    return CUTLASS_LARGE


def starting_points(problem: Problem) -> list[Point]:
    cls = shape_class(problem)
    points = _BY_CLASS[cls]
    if cls == "decode":
        points = weight_stream_points(problem) + DECODE[:3]
    # CUTLASS leads the classes it covers (none for decode: weight streaming leads there).
    points = cutlass_points(problem) + points
    return [(family, dict(params)) for family, params in points]
