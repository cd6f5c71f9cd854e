"""cross_entropy_rowwise: row in registers, or an online log-sum-exp over chunks (one read)."""

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
def cross_entropy_kernel(
    x_ptr, t_ptr, loss_ptr, M, N, stride_x,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, EVICTION: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    cols = tl.arange(0, BLOCK)
    # The target's logit first: its two dependent loads then overlap the row's stream.
    targets = tl.load(t_ptr + rows, mask=row_ok, other=0)
    picked = tl.load(x_ptr + rows.to(tl.int64) * stride_x + targets, mask=row_ok, other=0.0)
    if ONE_PASS:
        mask = row_ok[:, None] & (cols[None, :] < N)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=NEG, eviction_policy=EVICTION)
        x = x.to(tl.float32)
        row_max = tl.max(x, axis=1)
        row_sum = tl.sum(tl.exp(x - row_max[:, None]), axis=1)
    else:  # online log-sum-exp per lane; the logits are read exactly once either way
        m_acc = tl.full((ROWS, BLOCK), NEG, dtype=tl.float32)
        s_acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=NEG, eviction_policy=EVICTION)
            x = x.to(tl.float32)
            m_new = tl.maximum(m_acc, x)
            s_acc = s_acc * tl.exp(m_acc - m_new) + tl.exp(x - m_new)
            m_acc = m_new
        row_max = tl.max(m_acc, axis=1)
        row_sum = tl.sum(s_acc * tl.exp(m_acc - row_max[:, None]), axis=1)
    loss = row_max + tl.log(row_sum) - picked.to(tl.float32)
    tl.store(loss_ptr + rows, loss, mask=row_ok)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(logits, targets, *, out):
    M, N = logits.shape
    mode, block, grid = launch_shape(M, N)
    launch(cross_entropy_kernel, grid,
        logits, targets, out, M, N, logits.stride(0),
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass",
        EVICTION="evict_first" if EVICT_FIRST else "",
        num_warps=NUM_WARPS,
    )
"""
)


class CrossEntropyRowwise(RowwiseFamily):
    name = "cross_entropy_rowwise"
    op = "cross_entropy"
    template = TEMPLATE
    summary = "rows per program, whole row or online log-sum-exp over chunks, fp32 loss"
    description = summary
