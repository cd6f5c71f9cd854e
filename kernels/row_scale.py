"""An RMSNorm folded into the GEMM after it: the per-row scale it leaves (layouts "+rowscale" of
swiglu_gate and qkv_rotary).

rmsnorm(h) = (h * s) * g with s = rsqrt(mean(h^2) + eps) per row and g the norm's weight, so
rmsnorm(h) @ w^T = s * (h @ (w * g)^T): the weight times g is one constant made at load time,
and the GEMM takes h and s, a float32 (M,) input it applies to each output row in its epilogue.
s is a reduction over h that torch.compile computes in the kernel that writes h (the residual
add before the norm), so the normalized rows are never written or read again: 8.5 us a norm
on llama_block, 3.8 on Qwen2-7B (benchmarks/results/rmsnorm_fold_probe_h200.json).
"""

from __future__ import annotations

import torch

TAG = "rowscale"  # the layouts' part that says an RMSNorm is folded in
TOP = 6  # powers_of_two's largest scale is 2**TOP unless a caller lowers it


def rms_scale(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """rsqrt(mean(x^2) + eps) per row of x, in float32: what an RMSNorm multiplies each row by
    before its weight (HF's LlamaRMSNorm and Qwen2RMSNorm compute it in float32)."""
    return torch.rsqrt(x.float().pow(2).mean(-1) + eps)


def scaled_rows(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x's rows times their scale, in x's dtype: the norm's last pass, as a baseline runs it."""
    return (x * scale[:, None]).to(x.dtype)


def spread_rows(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """x with its rows 0.1x to 10x apart, as a residual stream's are: their scales differ, so a
    scale applied to the wrong row (or not at all) shows."""
    spread = 10.0 ** (torch.rand((x.shape[0], 1), generator=gen, device=x.device) * 2 - 1)
    return (x.float() * spread).to(x.dtype)


def powers_of_two(rows: int, gen: torch.Generator, device, *, top: int = TOP) -> torch.Tensor:
    """Row scales 1/64 to 2**top, powers of two: exact products, so any row's slip shows."""
    return 2.0 ** torch.randint(-6, top + 1, (rows,), generator=gen, device=device).float()
