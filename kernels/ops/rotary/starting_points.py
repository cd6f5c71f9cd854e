"""rotary's starting points: the measured leader first, then a small grid of launch shapes."""

from __future__ import annotations

from typing import Any

from kernels.problem import Problem

# The benchmark winner on an H100 at 4096 tokens x 32 heads x 128 bf16
# (results/membound_h100.json); rotary was not re-run on the H200 (the device-time cap).
LEADER: dict[str, Any] = {"TOKENS": 2, "BLOCK_H": 32, "NUM_WARPS": 8}


def starting_points(problem: Problem) -> list[tuple[str, dict[str, Any]]]:
    grid = [
        {"TOKENS": t, "BLOCK_H": h, "NUM_WARPS": w}
        for t in (1, 2, 4)
        for h in (8, 16, 32)
        for w in (2, 4, 8)
    ]
    return [("rotary_heads", p) for p in [LEADER, *(p for p in grid if p != LEADER)]]
