"""The simple offline search's pools: the op's starting points for the problem's shape class.

The points live with the kernels (Op.starting_points, kernels/ops/<name>/starting_points.py,
with where each was measured: the matmul ones are the leaders of the H200 search,
results/matmul_search_h200_round*.json), so the benchmark and the agents start from the same
places.
Points are partial: missing parameters come from the family's default, and every point is
still validated by the family's check() before it is rendered (benchmarks/run.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from kernels import get_op
from kernels.problem import Family, Op, Problem


def pool_for(
    op_name: str, problem: Problem, limit: int | None = None, *, library: bool = False
) -> list[tuple[str | None, dict]]:
    """(family name or None for the op's first family, partial params) pairs; with `limit`,
    only the first `limit` (the starting points are best first): a bounded search. With
    `library`, then every built point of this machine's kernel library that fits the problem
    (harness/library.py: loaded, not compiled; the brute force issue 24 holds the agent to)."""
    points: list[tuple[str | None, dict]] = list(get_op(op_name).starting_points(problem))
    points = (points or [(None, {})])[:limit]  # defaults only (attention, swiglu, ...)
    if library:
        from harness import library as machine_library

        points += [(p["family"], p["params"]) for p in machine_library.points_for(problem)]
    return points


def family_of(op: Op, name: str | None) -> Family:
    """The op's family of that name (None: its first)."""
    families = op.families()
    return families[0] if name is None else next(f for f in families if f.name == name)


def valid_points(
    problem: Problem, points: Iterable[tuple[str | None, dict]]
) -> list[tuple[Family, dict]]:
    """Each (family name, partial params) pair completed with the family's defaults, kept once
    and only where the family's check() accepts the problem."""
    op = get_op(problem.op)
    out: list[tuple[Family, dict]] = []
    seen = set()
    for name, partial in points:
        family = family_of(op, name)
        params = {**family.default(problem), **partial}
        key = (family.name, tuple(sorted(params.items(), key=str)))
        if key not in seen and family.check(problem, params) is None:
            seen.add(key)
            out.append((family, params))
    return out
