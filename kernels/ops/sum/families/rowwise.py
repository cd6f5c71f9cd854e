"""sum_rowwise: rows per program; one block per row or a chunked loop with lane accumulators."""

from __future__ import annotations

from kernels.render import FAST_LAUNCH
from kernels.rowwise import LAUNCH_HELPER, RowwiseFamily

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


@triton.jit
def sum_kernel(
    x_ptr, y_ptr, M, N, stride_x,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, EVICTION: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    if ONE_PASS:
        mask = row_ok[:, None] & (cols[None, :] < N)
        acc += tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICTION).to(tl.float32)
    else:  # the whole row is read once either way; "two_pass" here means a chunked loop
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            acc += tl.load(x_rows + c[None, :], mask=mask, other=0.0, eviction_policy=EVICTION).to(tl.float32)
    tl.store(y_ptr + rows, tl.sum(acc, axis=1), mask=row_ok)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(x, *, out):
    M, N = x.shape
    mode, block, grid = launch_shape(M, N)
    launch(sum_kernel, grid,
        x, out, M, N, x.stride(0),
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass",
        EVICTION="evict_first" if EVICT_FIRST else "",
        num_warps=NUM_WARPS,
    )
"""
)


class SumRowwise(RowwiseFamily):
    name = "sum_rowwise"
    op = "sum"
    template = TEMPLATE
    summary = "rows per program, whole row or chunked loop, fp32 accumulation"
    description = summary
