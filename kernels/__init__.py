"""kernels/: what a problem is. One folder per op under kernels/ops/, each exposing `OP`."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from kernels.problem import Family, Op, Problem, ProblemError, canonical_dtype

__all__ = ["Family", "Op", "Problem", "ProblemError", "all_ops", "get_op", "parse_problem"]


@cache
def all_ops() -> dict[str, Op]:
    """Every op folder under kernels/ops/, by name (discovered, so adding an op is a copy)."""
    from kernels import ops

    found: dict[str, Op] = {}
    for info in pkgutil.iter_modules(ops.__path__):
        if info.ispkg:
            module = importlib.import_module(f"kernels.ops.{info.name}")
            op = module.OP
            found[op.name] = op
    return dict(sorted(found.items()))


def get_op(name: str) -> Op:
    ops = all_ops()
    if name not in ops:
        raise ProblemError(f"unknown op {name!r}; known ops: {', '.join(ops)}")
    return ops[name]


def parse_problem(
    op: str, shape: str | list[int] | tuple[int, ...], dtype: str, layout: str = ""
) -> Problem:
    """Build and validate a Problem from user text such as ("matmul", "4096x4096x4096", "bf16")."""
    if isinstance(shape, str):
        parts = shape.lower().replace("*", "x").replace(",", "x").split("x")
        try:
            sizes = tuple(int(p.strip()) for p in parts if p.strip())
        except ValueError:
            raise ProblemError(f"shape {shape!r} is not sizes separated by 'x'") from None
    else:
        sizes = tuple(int(s) for s in shape)
    problem = Problem(
        op=op.strip(), shape=sizes, dtype=canonical_dtype(dtype), layout=layout.strip()
    )
    get_op(problem.op).validate(problem)
    return problem
