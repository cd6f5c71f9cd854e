"""Closeness of an output to the reference, relative to magnitude (trusted processes only)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.problem import Tolerance


@dataclass
class Closeness:
    ok: bool
    worst: float  # max |out-ref| / (atol + rtol*|ref|); <= 1 passes; inf for NaN/unwritten
    detail: str = ""
    unwritten: int = 0  # NaN (the poison) left where the reference is finite


def closeness(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Closeness:
    if out.shape != ref.shape:
        return Closeness(False, float("inf"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
    ref64 = ref.to(torch.float64)
    if not torch.isfinite(ref64).all():
        # A NaN/Inf in the expected output is an error, never a wildcard (R1.2).
        return Closeness(False, float("inf"), "reference is not finite: refusing to compare")
    out64 = out.to(torch.float64)
    nan = torch.isnan(out64)
    unwritten = int(nan.sum())
    if unwritten:
        idx = tuple(int(i) for i in nan.nonzero()[0])
        return Closeness(
            False,
            float("inf"),
            f"{unwritten} of {out.numel()} elements are NaN (unwritten poison or NaN), first at {idx}",
            unwritten,
        )
    if not torch.isfinite(out64).all():
        return Closeness(False, float("inf"), "output has Inf where the reference is finite")
    if ref64.abs().max() > 0 and out64.abs().max() == 0:
        return Closeness(False, float("inf"), "output is all zeros, reference is not")
    err = (out64 - ref64).abs() / (tol.atol + tol.rtol * ref64.abs())
    worst = float(err.max()) if err.numel() else 0.0
    if worst <= 1.0:
        return Closeness(True, worst)
    idx = tuple(int(i) for i in (err == err.max()).nonzero()[0])
    return Closeness(
        False,
        worst,
        f"error {worst:.3g}x tolerance at {idx}: got {float(out64[idx]):.6g}, want {float(ref64[idx]):.6g}",
    )


def vendor_limit(vendor_error: float) -> float:
    """How far over the op's tolerance a candidate may be where the vendor library itself is:
    cuBLAS fp16 (reduced-precision split-K) misses the tolerance on some adversarial cases, and
    a candidate as accurate as cuBLAS must not fail there (the oracle and the screen both)."""
    return max(1.0, 1.5 * vendor_error) if vendor_error != float("inf") else 1.0


def exact_mismatches(out: torch.Tensor, ref: torch.Tensor, limit: float) -> tuple[int, int]:
    """(mismatches, compared) for the exact 0/1 GEMM check, where |ref| <= limit."""
    ref64, out64 = ref.to(torch.float64), out.to(torch.float64)
    mask = ref64.abs() <= limit
    bad = (out64 != ref64) & mask
    return int(bad.sum()), int(mask.sum())


def max_abs_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    d = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    return float(torch.nan_to_num(d, nan=float("inf")).max()) if d.numel() else 0.0
