"""rotary_heads: one program per (TOKENS tokens, BLOCK_H heads); cos/sin loaded once per token."""

from __future__ import annotations

from kernels.problem import Family, ParamSpace
from kernels.render import FAST_LAUNCH, render_module

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


"""
    + FAST_LAUNCH
    + """


@triton.jit
def rotary_kernel(
    x_ptr, cos_ptr, sin_ptr, y_ptr, T, H, HALF,
    stride_xt, stride_xh, stride_yt, stride_yh, stride_ct,
    TOKENS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = tl.arange(0, BLOCK_HALF)
    mask = (heads[:, None] < H) & (cols[None, :] < HALF)
    for i in tl.static_range(TOKENS):
        t = tl.program_id(0) * TOKENS + i
        if t < T:
            c = tl.load(cos_ptr + t * stride_ct + cols, mask=cols < HALF, other=0.0).to(tl.float32)
            s = tl.load(sin_ptr + t * stride_ct + cols, mask=cols < HALF, other=0.0).to(tl.float32)
            x_base = x_ptr + t.to(tl.int64) * stride_xt + heads[:, None] * stride_xh + cols[None, :]
            y_base = y_ptr + t.to(tl.int64) * stride_yt + heads[:, None] * stride_yh + cols[None, :]
            x1 = tl.load(x_base, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(x_base + HALF, mask=mask, other=0.0).to(tl.float32)
            y1 = x1 * c[None, :] - x2 * s[None, :]
            y2 = x2 * c[None, :] + x1 * s[None, :]
            tl.store(y_base, y1.to(y_ptr.dtype.element_ty), mask=mask)
            tl.store(y_base + HALF, y2.to(y_ptr.dtype.element_ty), mask=mask)


def run(x, cos, sin, *, out):
    T, H, D = x.shape
    half = D // 2
    grid = (triton.cdiv(T, TOKENS), triton.cdiv(H, BLOCK_H))
    launch(rotary_kernel, grid,
        x, cos, sin, out, T, H, half,
        x.stride(0), x.stride(1), out.stride(0), out.stride(1), cos.stride(0),
        TOKENS=TOKENS, BLOCK_H=BLOCK_H, BLOCK_HALF=max(2, triton.next_power_of_2(half)),
        num_warps=NUM_WARPS,
    )
"""
)


class RotaryHeads(Family):
    name = "rotary_heads"
    op = "rotary"
    description = "TOKENS tokens x BLOCK_H heads per program; cos/sin read once per token"

    def space(self, problem):
        return ParamSpace(
            {
                "TOKENS": [1, 2, 4, 8],
                "BLOCK_H": [1, 2, 4, 8, 16, 32],
                "NUM_WARPS": [1, 2, 4, 8],
            },
            constraints=("regs: BLOCK_H*D/(32*NUM_WARPS) elements per thread",),
        )

    def default(self, problem):
        return {"TOKENS": 1, "BLOCK_H": 8, "NUM_WARPS": 4}

    def check(self, problem, params):
        if (why := super().check(problem, params)) is not None:
            return why
        d = problem.shape[2]
        if params["BLOCK_H"] * d / (32 * params["NUM_WARPS"]) > 128:
            return "too many elements per thread; more warps or fewer heads"
        return None

    def render(self, problem, params):
        ordered = {k: params[k] for k in self.space(problem).choices}
        return render_module(
            TEMPLATE, family=self.name, problem=problem, params=ordered, summary=self.description
        )
