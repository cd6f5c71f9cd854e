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
# (python -m benchmarks.probes.matmul_search; results/matmul_search_h200.json), plus a few
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
# Where measured: H100, 2026-11-24, results/matmul_unseen_h100_round1.json (the async points,
# ranked on the unseen set's M <= 64 rows: so their order, not their choice, saw those shapes)
# and results/weight_stream_h100.json (register prefetch vs async, two L2 states).


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
        _wr(16, 64, 64, 4),
        _wr(16, 128, 64, 8),
        _wr(16, 64, 128, 8),
        _ws(16, 64, 256, 3, 4),
        _ws(16, 64, 128, 6, 4),
        _ws(16, 128, 64, 6, 4),
        _ws(16, 128, 128, 4, 4),
    ],
    32: [
        _wr(32, 64, 64, 4),
        _wr(32, 128, 64, 8),
        _ws(32, 64, 256, 3, 4),
        _ws(32, 64, 128, 4, 4),
        _ws(32, 128, 64, 6, 4),
    ],
    64: [
        _wr(64, 64, 64, 8),
        _wr(64, 128, 64, 8),
        _ws(64, 64, 128, 4, 4),
        _ws(64, 128, 64, 4, 4),
        _ws(64, 128, 64, 4, 8),
    ],
}

# One row of A: the FMA form (no tensor cores) next to the padded tl.dot. Round 1 (async loads)
# ran it 8-14 % slower than tl.dot at 1x6144x4096 and 1x128256x4096; with register prefetch
# its loads keep the evict-first hint too.
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


def starting_points(problem: Problem) -> list[Point]:
    points = _BY_CLASS[shape_class(problem)]
    if shape_class(problem) == "decode":
        points = weight_stream_points(problem) + DECODE[:3]
    return [(family, dict(params)) for family, params in points]
