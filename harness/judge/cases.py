"""The correctness cases of one evaluation, rebuilt identically from secret seeds.

Only trusted processes build cases: the oracle builds them once to hand the inputs to the
candidate, and again after the candidate has exited to compute the references. Seeds never
reach the candidate's process (R1.2); it only sees the input values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.plan import GUARD_ELEMENTS
from kernels import get_op
from kernels.problem import Op, Problem

INTERPRETER_MAX_DIM = 128  # the Triton interpreter runs numpy per program: keep shapes tiny
QUICK_SWEEP_SHAPES = 3
__all__ = ["GUARD_ELEMENTS", "Case", "build_cases", "case_problems", "timed_problem"]


@dataclass
class Case:
    name: str
    stage: str
    problem: Problem
    inputs: tuple[torch.Tensor, ...]
    guard_seed: int
    runs: int = 1  # 2 for the determinism case: run twice, with other memory state between
    exact_limit: float | None = None  # 0/1 exact GEMM check: compare exactly where |ref| <= this


def resized(problem: Problem, size: Callable[[int], int]) -> Problem:
    """The problem with `size` applied to each dim but the op's fixed ones (heads its layout
    names), which stay as they are."""
    op = get_op(problem.op)
    fixed = op.fixed_dims(problem)
    dims = zip(op.dims, problem.shape, strict=True)
    return problem.with_shape(*[s if name in fixed else size(s) for name, s in dims])


def shrink(problem: Problem, limit: int = 64) -> Problem:
    """A small version of the problem for the interpreter; odd sizes stay odd."""
    return resized(problem, lambda s: s if s <= limit else limit - 1 if s % 2 else limit)


def fits_interpreter(problem: Problem) -> bool:
    return max(problem.shape) <= INTERPRETER_MAX_DIM


def pick_sweep(op: Op, problem: Problem, *, quick: bool, interpreter: bool) -> list[Problem]:
    sweep = [p for p in op.sweep(problem) if p != problem]
    if interpreter:
        sweep = [p for p in sweep if fits_interpreter(p)]
        if not sweep:  # the op's sweep is all large: make odd and non-power-of-two ones
            small = shrink(problem)
            sweep = [resized(small, lambda s: max(1, s - 1) if s > 2 else s)]
            sweep.append(resized(small, lambda s: max(1, (s * 3) // 5)))
    if quick and len(sweep) > QUICK_SWEEP_SHAPES:
        odd = [p for p in sweep if any(s % 2 for s in p.shape)]
        chosen = [sweep[0], odd[0] if odd else sweep[len(sweep) // 2], sweep[-1]]
        sweep = list(dict.fromkeys(chosen))
    return sweep


def _exact_01_inputs(
    op: Op, problem: Problem, seed: int, device: str
) -> tuple[tuple[torch.Tensor, ...], float]:
    """0/1-valued inputs whose GEMM is exact in the output dtype (CUDA-L2's exact check)."""
    limit = {"fp16": 2048.0, "bf16": 256.0, "fp32": float(2**24)}[problem.dtype]
    k = op.size(problem, "K")
    # Expected dot product K*p^2 = limit/4 keeps most entries exactly representable.
    p = min(0.5, math.sqrt(limit / 4 / max(k, 1)))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    inputs = tuple(
        (torch.rand(shape, generator=gen) < p).to(problem.torch_dtype).to(device)
        for shape in op.input_shapes(problem)
    )
    return inputs, limit


def timed_problem(problem: Problem, *, interpreter: bool) -> Problem:
    """The shape the judge times: the problem's own, or under the interpreter the same small
    workload its cases run at. Interpreter timings are labelled and never ranked, and at a real
    model's size one timed call takes minutes (8x28672x4096 outran the judge's 300 s on this
    CPU box, 2026-11-28: every CPU job on that shape ended in an infrastructure error)."""
    return shrink(problem) if interpreter and not fits_interpreter(problem) else problem


def case_problems(
    op: Op, problem: Problem, *, quick: bool, interpreter: bool, dtypes: tuple[str, ...] = ()
) -> list[Problem]:
    """The distinct shapes build_cases calls the candidate at (no tensors made)."""
    workload = timed_problem(problem, interpreter=interpreter)
    shapes = [workload, *pick_sweep(op, problem, quick=quick, interpreter=interpreter)]
    for dtype in dtypes:
        if dtype != problem.dtype and dtype in op.dtypes:
            shapes.append(Problem(workload.op, workload.shape, dtype, workload.layout))
    return list(dict.fromkeys(shapes))


def build_cases(
    op: Op,
    problem: Problem,
    seeds: list[int],
    device: str,
    *,
    quick: bool,
    interpreter: bool,
    dtypes: tuple[str, ...] = (),
) -> list[Case]:
    """Every correctness case, in a fixed order; `seeds` must hold at least 64 values."""
    seed = iter(seeds)
    workload = timed_problem(problem, interpreter=interpreter)
    cases = [
        Case(
            "smoke",
            "smoke",
            workload,
            op.make_inputs(workload, seed=next(seed), device=device),
            next(seed),
            runs=2,
        )
    ]
    for p in pick_sweep(op, problem, quick=quick, interpreter=interpreter):
        cases.append(
            Case(
                f"shape {'x'.join(map(str, p.shape))}",
                "shape_sweep",
                p,
                op.make_inputs(p, seed=next(seed), device=device),
                next(seed),
            )
        )
    for dtype in dtypes:
        if dtype == problem.dtype or dtype not in op.dtypes:
            continue
        p = Problem(workload.op, workload.shape, dtype, workload.layout)
        cases.append(
            Case(
                f"dtype {dtype}",
                "dtypes",
                p,
                op.make_inputs(p, seed=next(seed), device=device),
                next(seed),
            )
        )
    adversarial = op.adversarial_inputs(workload, seed=next(seed), device=device)
    for name, inputs in adversarial.items():
        cases.append(Case(f"adversarial {name}", "adversarial", workload, inputs, next(seed)))
    if op.name == "matmul":
        inputs, limit = _exact_01_inputs(op, workload, next(seed), device)
        cases.append(Case("exact 0/1", "exact_01", workload, inputs, next(seed), exact_limit=limit))
    return cases


def load_tensors(path):
    """Tensors another phase wrote (maybe a candidate's): weights_only, so loading runs no code."""
    return torch.load(path, map_location="cpu", weights_only=True)


def guard_pattern(n: int, dtype: torch.dtype, seed: int, device: str) -> torch.Tensor:
    """The random values either side of an output buffer; any change there is an OOB write."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(2 * n, generator=gen).to(dtype).to(device)
