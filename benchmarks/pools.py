"""The simple offline search's starting pools: a few hand-picked points per family and size.

Points are partial: missing parameters come from the family's default. Every point is still
validated by the family's check() before it is rendered. The agents' search (issue 5) replaces
this with something smarter; the pools stay small because each distinct point compiles once.
"""

from __future__ import annotations

from kernels.problem import Problem

# The matmul pools below are the leaders of a wider per-shape search on an H200
# (python -m benchmarks.probes.matmul_search; results/matmul_search_h200.json), plus a few
# untried neighbours (host-side TMA descriptors: no descriptor set-up inside a 30 us kernel).


def _tma(bm, bn, bk, w, s, sub, ws, flat, group=8, desc="device"):
    return (
        "matmul_persistent_tma",
        {
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


def _sk(bm, bn, bk, split, w, s, group=1, desc="device", ws=False):
    return (
        "matmul_splitk_tma",
        {
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


def _tiled(bm, bn, bk, w, s, group=1):
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


_DECODE = [  # weight streaming: BLOCK_M 16, many programs along N, split K where N is short
    _sk(16, 128, 128, 1, 4, 4, desc="host"),
    _sk(16, 128, 128, 1, 4, 3, desc="host"),
    _sk(16, 64, 128, 1, 4, 4, desc="host"),
    _sk(16, 64, 256, 2, 4, 3),
    _sk(16, 64, 256, 2, 4, 3, desc="host"),
    _sk(16, 128, 128, 4, 4, 3),
    _sk(16, 64, 256, 1, 4, 4),
    _sk(16, 64, 128, 4, 4, 3),
]

_TINY = [
    _tiled(*t)
    for t in [
        (32, 32, 128, 4, 2),
        (32, 64, 64, 4, 3),
        (32, 64, 128, 4, 2),
        (64, 32, 128, 4, 2),
        (64, 32, 128, 4, 1),
    ]
]

_SMALL = [
    _tiled(*t, group=8)
    for t in [(64, 32, 128, 4, 3), (64, 64, 128, 4, 3), (64, 64, 128, 4, 4), (32, 64, 128, 4, 3)]
]

_DEEP_K = [  # K >= 4 max(M, N): one wave of 128 programs, by 128x64 tiles or by 2 splits
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

_LARGE = [
    _tma(128, 256, 64, 8, 3, True, True, True),
    _tma(128, 256, 64, 8, 3, True, True, True, desc="host"),
    _tma(128, 256, 64, 8, 4, True, True, True),
    _tma(128, 256, 64, 8, 3, False, True, True),
    _tma(128, 256, 64, 8, 3, False, True, True, desc="host"),
    _tma(128, 256, 64, 8, 3, True, True, True, group=4),
    _tma(128, 128, 64, 8, 4, False, True, True, group=16),
    _tiled(128, 256, 64, 8, 4, group=8),
    _tiled(128, 256, 64, 8, 3, group=8),
    _sk(128, 256, 64, 1, 8, 3, group=8),
    _sk(128, 256, 64, 1, 8, 3, group=8, desc="host"),
    _sk(128, 256, 64, 1, 8, 3, group=8, desc="host", ws=True),
    _sk(128, 256, 64, 1, 8, 4, group=8, desc="host", ws=True),
]


def matmul_pool(problem: Problem) -> list[tuple[str, dict]]:
    m, n, k = problem.shape
    if m <= 64:
        return list(_DECODE)
    if m * n <= 256 * 256:  # tiny: a handful of programs, latency matters most
        return list(_TINY)
    if m * n <= 512 * 512:
        return list(_SMALL)
    if k >= 4 * max(m, n):
        return list(_DEEP_K)
    return list(_LARGE)


def rowwise_pool(problem: Problem) -> list[dict]:
    pool = []
    for warps in (4, 8, 16):
        for rows in (1, 2):
            for evict in (False, True):
                pool.append(
                    {"MODE": "one_pass", "NUM_WARPS": warps, "ROWS": rows, "EVICT_FIRST": evict}
                )
    for block in (1024, 2048, 4096):
        for warps in (4, 8):
            pool.append({"MODE": "two_pass", "BLOCK_N": block, "NUM_WARPS": warps, "ROWS": 1})
    return pool


def rotary_pool(problem: Problem) -> list[dict]:
    return [
        {"TOKENS": t, "BLOCK_H": h, "NUM_WARPS": w}
        for t in (1, 2, 4)
        for h in (8, 16, 32)
        for w in (2, 4, 8)
    ]


def pool_for(op_name: str, problem: Problem) -> list[tuple[str | None, dict]]:
    """(family name or None for the op's only family, partial params) pairs."""
    if op_name == "matmul":
        return list(matmul_pool(problem))
    if op_name == "rotary":
        return [(None, p) for p in rotary_pool(problem)]
    if op_name in ("rmsnorm", "layernorm", "softmax", "cross_entropy", "sum"):
        return [(None, p) for p in rowwise_pool(problem)]
    return [(None, {})]  # defaults only (attention, swiglu, ...)
