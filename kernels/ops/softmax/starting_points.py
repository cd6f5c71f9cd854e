"""softmax's starting points: the measured leaders by row width, then the shared row-wise grid."""

from __future__ import annotations

from typing import Any

from kernels.problem import Problem
from kernels.rowwise_points import leaders_then_grid

# Winners of the H200 row-wise probe, 8192 rows (4096 for cross-entropy vocabularies) in bf16
# (benchmarks/results/membound_probe_h200.json, made by a probe since retired).
LEADERS: dict[int, dict[str, Any]] = {
    4096: {
        "MODE": "one_pass",
        "BLOCK_N": 1024,
        "ROWS": 2,
        "NUM_WARPS": 8,
        "EVICT_FIRST": False,
        "PROGRAMS_PER_SM": 0,
        "STREAM_STORE": False,
    },
    8192: {
        "MODE": "one_pass",
        "BLOCK_N": 1024,
        "ROWS": 1,
        "NUM_WARPS": 16,
        "EVICT_FIRST": False,
        "PROGRAMS_PER_SM": 0,
        "STREAM_STORE": False,
    },
}


def starting_points(problem: Problem) -> list[tuple[str, dict[str, Any]]]:
    return leaders_then_grid("softmax_rowwise", LEADERS, problem)
