"""Closeness of a candidate's output to the reference, as the ops' tolerances define it.

The harness owns the real correctness gate (sandbox, stages, anti-cheat); this is the small
shared rule that kernels' own tests and tuning scripts use, so both agree on what "close" is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.candidate import load_module
from kernels.problem import Op, Problem, Tolerance


@dataclass(frozen=True)
class Closeness:
    passed: bool
    worst_error: float  # max |out-ref| / (atol + rtol*|ref|); <= 1 passes, inf for NaN
    detail: str = ""


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Closeness:
    """Elementwise |out - ref| <= atol + rtol*|ref|; NaN anywhere in `out` fails."""
    if out.shape != ref.shape:
        return Closeness(False, float("inf"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
    got = out.double()
    want = ref.double()
    if not torch.isfinite(got).all() and torch.isfinite(want).all():
        bad = (~torch.isfinite(got)).nonzero()[0].tolist()
        return Closeness(False, float("inf"), f"non-finite output at index {bad}")
    allowed = tol.atol + tol.rtol * want.abs()
    ratio = (got - want).abs() / allowed
    ratio = torch.where(torch.isnan(ratio), torch.zeros_like(ratio), ratio)  # inf-inf matches
    worst = float(ratio.max()) if ratio.numel() else 0.0
    if worst <= 1.0:
        return Closeness(True, worst)
    index = tuple(int(i) for i in torch.nonzero(ratio == ratio.max())[0])
    detail = f"at {index}: got {float(got[index]):.6g}, want {float(want[index]):.6g}"
    return Closeness(False, worst, detail)


def run_candidate(
    op: Op, problem: Problem, source: str, inputs: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """Import `source`, call prepare/run with a NaN-poisoned `out`, return `out`."""
    module = load_module(source)
    spec = op.output_spec(problem)
    out = torch.empty(spec.shape, dtype=spec.dtype, device=inputs[0].device)
    out.fill_(float("nan") if spec.dtype.is_floating_point else -1)
    if hasattr(module, "prepare"):
        module.prepare(*inputs)
    module.run(*inputs, out=out)
    return out


def check_source(
    op: Op, problem: Problem, source: str, *, seed: int = 0, device: str = "cpu", adversarial=True
) -> list[str]:
    """Failures (empty when correct) of `source` on random and adversarial inputs."""
    cases = {"random": op.make_inputs(problem, seed=seed, device=device)}
    if adversarial:
        cases.update(op.adversarial_inputs(problem, seed=seed, device=device))
    failures = []
    tol = op.tolerance(problem)
    for name, inputs in cases.items():
        ref = op.reference(problem, *inputs)
        out = run_candidate(op, problem, source, tuple(t.clone() for t in inputs))
        result = compare(out, ref, tol)
        if not result.passed:
            failures.append(
                f"{problem.key} [{name}]: worst {result.worst_error:.3g} {result.detail}"
            )
    return failures
