"""Starting points shared by the row-wise ops: the measured leader of the nearest row width,
the other measured leaders, then a small hand-picked grid (one-pass vs two-pass, warps, rows,
eviction) that the benchmark searches too. Each op names its leaders in its own
kernels/ops/<name>/starting_points.py, with where they were measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.problem import Problem


def grid() -> list[dict[str, Any]]:
    """Partial points (the rest from the family's default), not ranked by any measurement."""
    pool: list[dict[str, Any]] = []
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


def leaders_then_grid(
    family: str, leaders: Mapping[int, Mapping[str, Any]], problem: Problem
) -> list[tuple[str, dict[str, Any]]]:
    """`leaders` maps a measured row width to its winning point; the nearest width at or
    above this problem's row (else the widest) goes first: the best launch shape depends on
    the row width far more than on the number of rows."""
    widths = sorted(leaders)
    n = problem.shape[-1]
    near = next((w for w in widths if w >= n), widths[-1]) if widths else None
    ordered = [leaders[near]] if near is not None else []
    ordered += [leaders[w] for w in widths if w != near]
    points: list[tuple[str, dict[str, Any]]] = []
    for params in [*ordered, *grid()]:
        if all(p != params for _, p in points):
            points.append((family, dict(params)))
    return points
