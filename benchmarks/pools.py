"""The simple offline search's pools: the op's starting points for the problem's shape class.

The points live with the kernels (Op.starting_points, kernels/ops/<name>/starting_points.py,
with where each was measured: the matmul ones are the leaders of the H200 search,
results/matmul_search_h200_round*.json), so the benchmark and the agents start from the same
places.
Points are partial: missing parameters come from the family's default, and every point is
still validated by the family's check() before it is rendered (benchmarks/run.py).
"""

from __future__ import annotations

from kernels import get_op
from kernels.problem import Problem


def pool_for(
    op_name: str, problem: Problem, limit: int | None = None
) -> list[tuple[str | None, dict]]:
    """(family name or None for the op's first family, partial params) pairs; with `limit`,
    only the first `limit` (the starting points are best first): a bounded search."""
    points: list[tuple[str | None, dict]] = list(get_op(op_name).starting_points(problem))
    return (points or [(None, {})])[:limit]  # defaults only (attention, swiglu, ...)
