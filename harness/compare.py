"""Closeness as the harness judges it (trusted processes only), and its other output checks.

Closeness itself, with its NaN/Inf rule, is kernels.checking.compare (one rule and one
Closeness for the oracle, the screen and kernels' own tests); the harness is stricter on two
points. A reference with any NaN or Inf is refused (RELIABILITY R1.2: the oracle's expected
output must be finite; kernels' own tests may match an Inf with the same Inf). An all-zero
output against a reference that is not fails, which atol alone would let pass where the
reference is tiny.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernels.checking import Closeness, compare
from kernels.problem import Op, Problem, Tolerance


def closeness(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Closeness:
    """kernels.checking.compare on a finite reference, then the all-zero check (where compare
    found no NaN or Inf): its infinite error also keeps an all-zero vendor output from raising
    `vendor_limit`."""
    if out.shape == ref.shape and not bool(torch.isfinite(ref).all()):
        return Closeness(False, float("inf"), "reference is not finite: refusing to compare")
    c = compare(out, ref, tol)
    zeros = out.numel() and float(out.abs().max()) == 0 and float(ref.abs().max()) > 0
    if zeros and c.worst_error != float("inf"):
        return Closeness(False, float("inf"), "output is all zeros, reference is not")
    return c


def vendor_limit(vendor_error: float) -> float:
    """How far over the op's tolerance a candidate may be where the vendor library itself is:
    cuBLAS fp16 (reduced-precision split-K) misses the tolerance on some adversarial cases, and
    a candidate as accurate as cuBLAS must not fail there (the oracle and the screen both)."""
    return max(1.0, 1.5 * vendor_error) if vendor_error != float("inf") else 1.0


def as_far_as_the_vendor(op: Op, problem: Problem) -> Callable[..., float]:
    """`vendor_limit` as a `kernels.checking.check_source` limit, for trusted tuning and
    benchmark gates: a case may be as far over the tolerance as the op's baseline is on the
    same inputs, as the oracle and the screen judge. Deep-K dynamic_range cases fail the plain
    tolerance with every kernel that sums K in order on the tensor cores, where IEEE fp32 sums
    pass it (benchmarks/results/deep_k_accumulation_*.json); TF32 rounds every input."""

    def limit(inputs: tuple[torch.Tensor, ...], ref: torch.Tensor) -> float:
        spec = op.output_spec(problem)
        out = torch.empty(spec.shape, dtype=spec.dtype, device=ref.device)
        out = op.baseline_output(problem, *(t.clone() for t in inputs), out=out)
        return vendor_limit(closeness(out, ref, op.tolerance(problem)).worst_error)

    return limit


def exact_mismatches(out: torch.Tensor, ref: torch.Tensor, limit: float) -> tuple[int, int]:
    """(mismatches, compared) for the exact 0/1 GEMM check, where |ref| <= limit."""
    ref64, out64 = ref.to(torch.float64), out.to(torch.float64)
    mask = ref64.abs() <= limit
    bad = (out64 != ref64) & mask
    return int(bad.sum()), int(mask.sum())


def max_abs_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    d = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    return float(torch.nan_to_num(d, nan=float("inf")).max()) if d.numel() else 0.0
