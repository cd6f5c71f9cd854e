"""The simple offline search's starting pools: a few hand-picked points per family and size.

Points are partial: missing parameters come from the family's default. Every point is still
validated by the family's check() before it is rendered. The agents' search (issue 5) replaces
this with something smarter; the pools stay small because each distinct point compiles once.
"""

from __future__ import annotations

from kernels.problem import Problem

_TMA_TILES = [
    {
        "BLOCK_M": 128,
        "BLOCK_N": 256,
        "BLOCK_K": 64,
        "NUM_WARPS": 8,
        "NUM_STAGES": 3,
        "EPILOGUE_SUBTILE": True,
    },
    {
        "BLOCK_M": 128,
        "BLOCK_N": 256,
        "BLOCK_K": 64,
        "NUM_WARPS": 8,
        "NUM_STAGES": 4,
        "EPILOGUE_SUBTILE": True,
    },
    {
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "NUM_WARPS": 8,
        "NUM_STAGES": 4,
        "EPILOGUE_SUBTILE": False,
    },
    {
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "NUM_WARPS": 4,
        "NUM_STAGES": 4,
        "EPILOGUE_SUBTILE": False,
    },
    {
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 128,
        "NUM_WARPS": 8,
        "NUM_STAGES": 3,
        "EPILOGUE_SUBTILE": False,
    },
    {
        "BLOCK_M": 256,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "NUM_WARPS": 8,
        "NUM_STAGES": 3,
        "EPILOGUE_SUBTILE": True,
    },
    {
        "BLOCK_M": 128,
        "BLOCK_N": 64,
        "BLOCK_K": 64,
        "NUM_WARPS": 4,
        "NUM_STAGES": 5,
        "EPILOGUE_SUBTILE": False,
    },
    {
        "BLOCK_M": 64,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "NUM_WARPS": 4,
        "NUM_STAGES": 5,
        "EPILOGUE_SUBTILE": False,
    },
]

_SPLITK_SMALL_M = [  # decode: stream the weight with as many bytes in flight as fit
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "NUM_WARPS": 2, "NUM_STAGES": 4},
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "NUM_WARPS": 4, "NUM_STAGES": 5},
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 512, "NUM_WARPS": 4, "NUM_STAGES": 3},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "NUM_WARPS": 4, "NUM_STAGES": 4},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 512, "NUM_WARPS": 4, "NUM_STAGES": 3},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "NUM_WARPS": 4, "NUM_STAGES": 6},
    {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "NUM_WARPS": 4, "NUM_STAGES": 5},
    {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 256, "NUM_WARPS": 8, "NUM_STAGES": 4},
]

_SPLITK_DEEP = [
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_WARPS": 8, "NUM_STAGES": 4, "GROUP": 8},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_WARPS": 4, "NUM_STAGES": 4, "GROUP": 8},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_WARPS": 8, "NUM_STAGES": 3, "GROUP": 8},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_WARPS": 4, "NUM_STAGES": 5, "GROUP": 8},
]


def matmul_pool(problem: Problem) -> list[tuple[str, dict]]:
    m, n, k = problem.shape
    pool: list[tuple[str, dict]] = []
    if m <= 64:
        for tile in _SPLITK_SMALL_M:
            for split in (1, 2, 4):
                pool.append(("matmul_splitk", dict(tile, SPLIT_K=split, GROUP=1)))
        return pool
    if m * n <= 256 * 256:  # tiny: a handful of programs, latency matters most
        for bm, bn, bk, w, s in [
            (64, 64, 64, 4, 2),
            (64, 32, 128, 4, 2),
            (32, 64, 64, 4, 3),
            (128, 128, 64, 8, 2),
            (64, 64, 128, 4, 1),
            (32, 32, 128, 4, 2),
            (128, 128, 128, 8, 1),
        ]:
            pool.append(
                (
                    "matmul_tiled",
                    {
                        "BLOCK_M": bm,
                        "BLOCK_N": bn,
                        "BLOCK_K": bk,
                        "NUM_WARPS": w,
                        "NUM_STAGES": s,
                        "GROUP": 1,
                    },
                )
            )
            pool.append(
                (
                    "matmul_splitk",
                    {
                        "BLOCK_M": bm,
                        "BLOCK_N": bn,
                        "BLOCK_K": bk,
                        "NUM_WARPS": w,
                        "NUM_STAGES": s,
                        "GROUP": 1,
                        "SPLIT_K": 2,
                    },
                )
            )
        return pool
    for tile in _TMA_TILES:
        for ws in (False, True):
            for desc in ("device",):  # host descriptors cost ~20 us more host time per call
                for group in (8, 16) if m * n >= 4096 * 4096 else (8,):
                    pool.append(
                        (
                            "matmul_persistent_tma",
                            dict(tile, WARP_SPECIALIZE=ws, GROUP=group, DESCRIPTORS=desc),
                        )
                    )
    pool.append(
        (
            "matmul_tiled",
            {
                "BLOCK_M": 128,
                "BLOCK_N": 256,
                "BLOCK_K": 64,
                "NUM_WARPS": 8,
                "NUM_STAGES": 3,
                "GROUP": 8,
            },
        )
    )
    pool.append(
        (
            "matmul_tiled",
            {
                "BLOCK_M": 128,
                "BLOCK_N": 128,
                "BLOCK_K": 64,
                "NUM_WARPS": 4,
                "NUM_STAGES": 4,
                "GROUP": 8,
            },
        )
    )
    tiles_128 = -(-m // 128) * -(-n // 128)
    if k >= 4 * max(m, n) or tiles_128 < 132:  # too few tiles to fill the SMs: split K
        for tile in _SPLITK_DEEP:
            for split in (2, 3, 4):
                pool.append(("matmul_splitk", dict(tile, SPLIT_K=split)))
    return pool


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
