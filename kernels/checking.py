"""Closeness of a candidate's output to the reference, as the ops' tolerances define it.

The harness owns the real correctness gate (sandbox, stages, anti-cheat); this is the small
shared rule that kernels' own tests and tuning scripts use, so both agree on what "close" is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels.candidate import load_module
from kernels.problem import Op, Problem, Tolerance


@dataclass(frozen=True)
class Closeness:
    passed: bool
    # max |out-ref| / (atol + rtol*|ref|) over the finite references; <= 1 passes; inf for a
    # shape mismatch, a NaN or an Inf that does not match
    worst_error: float
    detail: str = ""
    unwritten: int = 0  # NaN where the reference is finite: the harness's poison left, or a NaN


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Closeness:
    """Elementwise |out - ref| <= atol + rtol*|ref|, relative to magnitude. The one closeness
    rule: kernels' tests and tuning scripts, the harness's oracle and its screen all use it.

    Non-finite values: a NaN in the reference is an error, never a wildcard (nothing is
    compared); a NaN in `out` where the reference is finite is wrong (the harness poisons `out`
    with NaN, so this is also how an unwritten element shows); an Inf must match an Inf of the
    same sign in the reference, and an Inf in `out` where the reference is finite is wrong.
    """
    if out.shape != ref.shape:
        return Closeness(False, float("inf"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
    got = out.double()
    want = ref.double()
    if torch.isnan(want).any():
        return Closeness(False, float("inf"), "reference has NaN: refusing to compare")
    finite = torch.isfinite(want)
    nan = torch.isnan(got) & finite
    unwritten = int(nan.sum())
    if unwritten:
        index = _first(nan)
        return Closeness(
            False,
            float("inf"),
            f"{unwritten} of {out.numel()} elements are NaN where the reference is finite "
            f"(unwritten poison or a NaN), first at {index}",
            unwritten,
        )
    wrong_inf = (~finite & (got != want)) | (finite & torch.isinf(got))
    if wrong_inf.any():
        index = _first(wrong_inf)
        return Closeness(
            False,
            float("inf"),
            f"at {index}: got {float(got[index]):.6g}, want {float(want[index]):.6g} "
            "(an Inf must match an Inf of the same sign)",
        )
    allowed = tol.atol + tol.rtol * want.abs()
    ratio = torch.where(finite, (got - want).abs() / allowed, torch.zeros_like(want))
    worst = float(ratio.max()) if ratio.numel() else 0.0
    if worst <= 1.0:
        return Closeness(True, worst)
    index = _first(ratio == ratio.max())
    detail = (
        f"error {worst:.3g}x tolerance at {index}: "
        f"got {float(got[index]):.6g}, want {float(want[index]):.6g}"
    )
    return Closeness(False, worst, detail)


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


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
    op: Op,
    problem: Problem,
    source: str,
    *,
    seed: int = 0,
    device: str = "cpu",
    adversarial=True,
    limit: Callable[[tuple[torch.Tensor, ...], torch.Tensor], float] | None = None,
) -> list[str]:
    """Failures (empty when correct) of `source` on random and adversarial inputs. `limit`
    (inputs, reference) -> how far over the tolerance a case may be (1 without it): the
    harness lets a candidate be as far off as the vendor library is on the same inputs."""
    cases = {"random": op.make_inputs(problem, seed=seed, device=device)}
    if adversarial:
        cases.update(op.adversarial_inputs(problem, seed=seed, device=device))
    failures = []
    tol = op.tolerance(problem)
    for name, inputs in cases.items():
        ref = op.reference(problem, *inputs)
        out = run_candidate(op, problem, source, tuple(t.clone() for t in inputs))
        result = compare(out, ref, tol)
        if result.passed:
            continue
        allowed = limit(inputs, ref) if limit is not None else 1.0
        if result.worst_error > allowed:
            over = f" (allowed {allowed:.3g}: the vendor's own error)" if allowed > 1 else ""
            failures.append(
                f"{problem.key} [{name}]: worst {result.worst_error:.3g}{over} {result.detail}"
            )
    return failures
