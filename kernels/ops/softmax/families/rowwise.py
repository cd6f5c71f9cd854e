"""softmax_rowwise: one-pass (row in registers) or two-pass (online max and sum, then write),
ROWS rows per program, optionally a persistent grid that prefetches the next row block."""

from __future__ import annotations

from kernels.render import FAST_LAUNCH
from kernels.rowwise_grid import LAUNCH_HELPER, GridRowwiseFamily

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS

# A finite stand-in for -inf on masked lanes: exp(NEG - max) is 0, and NEG - NEG is not NaN.
NEG = tl.constexpr(-3.0e38)


@triton.jit
def load_rows(x_ptr, tile, M, N, stride_x,
              ROWS: tl.constexpr, BLOCK: tl.constexpr, EVICTION: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :]
    return tl.load(ptrs, mask=mask, other=NEG, eviction_policy=EVICTION)


@triton.jit
def softmax_rows(x, y_ptr, tile, M, N, stride_y,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr, STORE_MOD: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = x.to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    # One reciprocal per row, then a multiply: a divide per element costs a second SFU op.
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    ptrs = y_ptr + rows.to(tl.int64)[:, None] * stride_y + cols[None, :]
    tl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=STORE_MOD)


@triton.jit
def two_pass_rows(x_ptr, y_ptr, tile, M, N, stride_x, stride_y,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr, STORE_MOD: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK)
    # Online max and sum per lane with one exp per element: exp(-|x - m|) is the rescale
    # factor of the old sum when x is the new max, and x's own term otherwise.
    m_acc = tl.full((ROWS, BLOCK), NEG, dtype=tl.float32)
    s_acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < N)
        x = tl.load(x_rows + c[None, :], mask=mask, other=NEG).to(tl.float32)
        d = x - m_acc
        e = tl.exp(-tl.abs(d))
        s_acc = tl.where(d > 0, s_acc * e + 1.0, s_acc + e)
        m_acc = tl.maximum(m_acc, x)
    row_max = tl.max(m_acc, axis=1)
    inv_sum = 1.0 / tl.sum(s_acc * tl.exp(m_acc - row_max[:, None]), axis=1)
    for start in range(0, N, BLOCK):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < N)
        x = tl.load(x_rows + c[None, :], mask=mask, other=NEG, eviction_policy="evict_first")
        y = tl.exp(x.to(tl.float32) - row_max[:, None]) * inv_sum[:, None]
        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask,
                 cache_modifier=STORE_MOD)


@triton.jit
def softmax_kernel(
    x_ptr, y_ptr, M, N, stride_x, stride_y, n_tiles,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr,
    PERSISTENT: tl.constexpr, EVICTION: tl.constexpr, STORE_MOD: tl.constexpr,
):
    pid = tl.program_id(0)
    if ONE_PASS:
        if PERSISTENT:  # load block i+1 before reducing and writing block i
            step = tl.num_programs(0)
            x = load_rows(x_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            for tile in tl.range(pid, n_tiles, step):
                x_next = load_rows(x_ptr, tile + step, M, N, stride_x, ROWS, BLOCK, EVICTION)
                softmax_rows(x, y_ptr, tile, M, N, stride_y, ROWS, BLOCK, STORE_MOD)
                x = x_next
        else:
            x = load_rows(x_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            softmax_rows(x, y_ptr, pid, M, N, stride_y, ROWS, BLOCK, STORE_MOD)
    else:
        if PERSISTENT:
            for tile in tl.range(pid, n_tiles, tl.num_programs(0)):
                two_pass_rows(x_ptr, y_ptr, tile, M, N, stride_x, stride_y,
                              ROWS, BLOCK, STORE_MOD)
        else:
            two_pass_rows(x_ptr, y_ptr, pid, M, N, stride_x, stride_y, ROWS, BLOCK, STORE_MOD)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(x, *, out):
    M, N = x.shape
    mode, block, tiles, grid = launch_shape(x, M, N)
    launch(softmax_kernel, grid,
        x, out, M, N, x.stride(0), out.stride(0), tiles,
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass", PERSISTENT=PROGRAMS_PER_SM > 0,
        EVICTION="evict_first" if EVICT_FIRST else "",
        STORE_MOD=".cs" if STREAM_STORE else "",
        num_warps=NUM_WARPS,
    )
"""
)


class SoftmaxRowwise(GridRowwiseFamily):
    name = "softmax_rowwise"
    op = "softmax"
    template = TEMPLATE
    summary = "rows per program, one-pass or two-pass (online max/sum), persistent or not"
    description = summary
