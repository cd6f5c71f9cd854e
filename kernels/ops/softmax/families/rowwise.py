"""softmax_rowwise: one-pass (row in registers) or two-pass (online max and sum, then write)."""

from __future__ import annotations

from kernels.render import FAST_LAUNCH
from kernels.rowwise import LAUNCH_HELPER, RowwiseFamily

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS

# A finite stand-in for -inf on masked lanes: exp(NEG - max) is 0, and NEG - NEG is not NaN.
NEG = tl.constexpr(-3.0e38)


@triton.jit
def softmax_kernel(
    x_ptr, y_ptr, M, N, stride_x, stride_y,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, EVICTION: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = row_ok[:, None] & (cols[None, :] < N)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=NEG, eviction_policy=EVICTION)
        x = x.to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e / tl.sum(e, axis=1)[:, None]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:  # online softmax per lane: running max and rescaled running sum
        m_acc = tl.full((ROWS, BLOCK), NEG, dtype=tl.float32)
        s_acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=NEG).to(tl.float32)
            m_new = tl.maximum(m_acc, x)
            s_acc = s_acc * tl.exp(m_acc - m_new) + tl.exp(x - m_new)
            m_acc = m_new
        row_max = tl.max(m_acc, axis=1)
        row_sum = tl.sum(s_acc * tl.exp(m_acc - row_max[:, None]), axis=1)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=NEG, eviction_policy="evict_first")
            y = tl.exp(x.to(tl.float32) - row_max[:, None]) / row_sum[:, None]
            tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(x, *, out):
    M, N = x.shape
    mode, block, grid = launch_shape(M, N)
    launch(softmax_kernel, grid,
        x, out, M, N, x.stride(0), out.stride(0),
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass",
        EVICTION="evict_first" if EVICT_FIRST else "",
        num_warps=NUM_WARPS,
    )
"""
)


class SoftmaxRowwise(RowwiseFamily):
    name = "softmax_rowwise"
    op = "softmax"
    template = TEMPLATE
    summary = "rows per program, one-pass or two-pass (online max/sum), fp32 math"
    description = summary
