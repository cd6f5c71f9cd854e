"""sum's starting points: the measured leaders by row width, then the shared row-wise grid."""

from __future__ import annotations

from typing import Any

from kernels.problem import Problem
from kernels.rowwise_points import leaders_then_grid

# The benchmark winner on an H100 at 8192x8192 bf16 (results/membound_h100.json); sum was not
# re-run on the H200 (membound_h200.json says why: the device-time cap).
LEADERS: dict[int, dict[str, Any]] = {
    8192: {"MODE": "one_pass", "BLOCK_N": 1024, "ROWS": 1, "NUM_WARPS": 16, "EVICT_FIRST": True}
}


def starting_points(problem: Problem) -> list[tuple[str, dict[str, Any]]]:
    return leaders_then_grid("sum_rowwise", LEADERS, problem)
