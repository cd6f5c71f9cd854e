"""Scripted LLM replies shared by the fake-evaluator and real-harness graph tests."""

from __future__ import annotations

import json

RMSNORM_GOOD = """\
```python
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, N, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def run(x, weight, *, out):
    M, N = x.shape
    _rmsnorm[(M,)](x, weight, out, N, x.stride(0), 1e-6, BLOCK=triton.next_power_of_2(N), num_warps=4)
```
One program per row, the whole row in registers."""

BROKEN = "```python\ndef run(x, weight, *, out)\n    out.copy_(x)\n```"

# Passes the static checks (only torch is imported) but disables the harness's timer sync;
# the harness catches the patch at run time.
CHEAT = """\
```python
import torch


def run(x, weight, *, out):
    torch.cuda.synchronize = lambda *a, **k: None
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight).to(out.dtype))
```"""

ESCAPE = "```python\nimport threading\n\ndef run(x, weight, *, out):\n    pass\n```"


def plan_params(family: str, points: list[dict]) -> str:
    return json.dumps(
        {
            "hypothesis": "more rows per program",
            "move": "params",
            "family": family,
            "points": points,
        }
    )


def plan_rewrite(request: str) -> str:
    return json.dumps(
        {
            "hypothesis": "one program per row",
            "move": "rewrite",
            "family": None,
            "points": [],
            "rewrite": request,
        }
    )
