"""layernorm_rowwise: one-pass (row in registers) or two-pass with a chunked Welford merge."""

from __future__ import annotations

from kernels.ops.layernorm.op import EPS
from kernels.render import FAST_LAUNCH
from kernels.rowwise import LAUNCH_HELPER, RowwiseFamily

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


@triton.jit
def welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # Chan et al.'s merge of two partial (mean, sum of squared deviations, count) triples.
    n = n_a + n_b
    w_b = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    delta = mean_b - mean_a
    return mean_a + delta * w_b, m2_a + m2_b + delta * delta * n_a * w_b, n


@triton.jit
def layernorm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_x, stride_y, eps,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr, EVICTION: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:  # mean, then the variance of the centred row: exact even for large means
        mask = row_ok[:, None] & (cols[None, :] < N)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICTION)
        x = x.to(tl.float32)
        mean = tl.sum(x, axis=1) / N
        centred = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(centred * centred, axis=1) / N + eps)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = centred * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:  # per-lane Welford over chunks, lanes merged at the end; then a second read
        mean_acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        m2_acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        n_acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            n_new = n_acc + tl.where(mask, 1.0, 0.0)
            delta = tl.where(mask, x - mean_acc, 0.0)
            mean_acc += delta / tl.maximum(n_new, 1.0)
            m2_acc += delta * tl.where(mask, x - mean_acc, 0.0)
            n_acc = n_new
        mean, m2, _ = tl.reduce((mean_acc, m2_acc, n_acc), 1, welford_combine)
        rstd = tl.rsqrt(m2 / N + eps)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + c, mask=c < N, other=0.0).to(tl.float32)
            y = (x.to(tl.float32) - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
            tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(x, weight, bias, *, out):
    M, N = x.shape
    mode, block, grid = launch_shape(M, N)
    launch(layernorm_kernel, grid,
        x, weight, bias, out, M, N, x.stride(0), out.stride(0), EPS,
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass",
        EVICTION="evict_first" if EVICT_FIRST else "",
        num_warps=NUM_WARPS,
    )
"""
)


class LayernormRowwise(RowwiseFamily):
    name = "layernorm_rowwise"
    op = "layernorm"
    template = TEMPLATE
    summary = "rows per program, one-pass or two-pass (chunked Welford), fp32 statistics"
    description = summary

    def fixed(self, problem):
        return {"EPS": EPS, **super().fixed(problem)}
