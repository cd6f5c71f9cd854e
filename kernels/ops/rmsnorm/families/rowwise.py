"""rmsnorm_rowwise: one program per ROWS rows; one-pass (row in registers) or two-pass."""

from __future__ import annotations

from kernels.ops.rmsnorm.op import EPS
from kernels.render import FAST_LAUNCH
from kernels.rowwise import LAUNCH_HELPER, RowwiseFamily

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


@triton.jit
def rmsnorm_kernel(
    x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, EVICTION: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:  # the whole row in registers: one read, one write
        mask = row_ok[:, None] & (cols[None, :] < N)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICTION)
        x = x.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:  # stream the row twice: sum of squares, then scale (second read mostly from L2)
        acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + eps)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
            y = x.to(tl.float32) * rstd[:, None] * w[None, :]
            tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(x, weight, *, out):
    M, N = x.shape
    mode, block, grid = launch_shape(M, N)
    launch(rmsnorm_kernel, grid,
        x, weight, out, M, N, x.stride(0), out.stride(0), EPS,
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass",
        EVICTION="evict_first" if EVICT_FIRST else "",
        num_warps=NUM_WARPS,
    )
"""
)


class RmsnormRowwise(RowwiseFamily):
    name = "rmsnorm_rowwise"
    op = "rmsnorm"
    template = TEMPLATE
    summary = "rows per program, one-pass or two-pass, fp32 statistics"
    description = summary

    def fixed(self, problem):
        return {"EPS": EPS, **super().fixed(problem)}
