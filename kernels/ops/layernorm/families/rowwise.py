"""layernorm_rowwise: one-pass (row in registers) or two-pass with a chunked Welford merge;
ROWS rows per program, optionally a persistent grid that prefetches the next row block."""

from __future__ import annotations

from kernels.ops.layernorm.op import LayernormOp
from kernels.render import FAST_LAUNCH
from kernels.rowwise_grid import LAUNCH_HELPER, GridRowwiseFamily

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
def load_rows(x_ptr, tile, M, N, stride_x,
              ROWS: tl.constexpr, BLOCK: tl.constexpr, EVICTION: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :]
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICTION)


@triton.jit
def normalize_rows(x, w, b, y_ptr, tile, M, N, stride_y, eps,
                   ROWS: tl.constexpr, BLOCK: tl.constexpr, STORE_MOD: tl.constexpr):
    # Mean, then the variance of the centred row: exact even for large means.
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = x.to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    centred = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(centred * centred, axis=1) / N + eps)
    y = centred * rstd[:, None] * w[None, :] + b[None, :]
    ptrs = y_ptr + rows.to(tl.int64)[:, None] * stride_y + cols[None, :]
    tl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=STORE_MOD)


@triton.jit
def two_pass_rows(x_ptr, w_ptr, b_ptr, y_ptr, tile, M, N, stride_x, stride_y, eps,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr, STORE_MOD: tl.constexpr):
    # Per-lane Welford over chunks, lanes merged at the end; then a second read (mostly L2).
    rows = tile * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK)
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
        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask,
                 cache_modifier=STORE_MOD)


@triton.jit
def layernorm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_x, stride_y, eps, n_tiles,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr,
    PERSISTENT: tl.constexpr, EVICTION: tl.constexpr, STORE_MOD: tl.constexpr,
):
    pid = tl.program_id(0)
    if ONE_PASS:
        cols = tl.arange(0, BLOCK)
        if PERSISTENT:  # load block i+1 before reducing and writing block i
            step = tl.num_programs(0)
            x = load_rows(x_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            for tile in tl.range(pid, n_tiles, step):
                x_next = load_rows(x_ptr, tile + step, M, N, stride_x, ROWS, BLOCK, EVICTION)
                normalize_rows(x, w, b, y_ptr, tile, M, N, stride_y, eps, ROWS, BLOCK, STORE_MOD)
                x = x_next
        else:  # the row's loads first, weight and bias (L2 hits) behind them
            x = load_rows(x_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            normalize_rows(x, w, b, y_ptr, pid, M, N, stride_y, eps, ROWS, BLOCK, STORE_MOD)
    else:
        if PERSISTENT:
            for tile in tl.range(pid, n_tiles, tl.num_programs(0)):
                two_pass_rows(x_ptr, w_ptr, b_ptr, y_ptr, tile, M, N, stride_x, stride_y, eps,
                              ROWS, BLOCK, STORE_MOD)
        else:
            two_pass_rows(x_ptr, w_ptr, b_ptr, y_ptr, pid, M, N, stride_x, stride_y, eps,
                          ROWS, BLOCK, STORE_MOD)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(x, weight, bias, *, out):
    M, N = x.shape
    mode, block, tiles, grid = launch_shape(x, M, N)
    launch(layernorm_kernel, grid,
        x, weight, bias, out, M, N, x.stride(0), out.stride(0), EPS, tiles,
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass", PERSISTENT=PROGRAMS_PER_SM > 0,
        EVICTION="evict_first" if EVICT_FIRST else "",
        STORE_MOD=".cs" if STREAM_STORE else "",
        num_warps=NUM_WARPS,
    )
"""
)


class LayernormRowwise(GridRowwiseFamily):
    name = "layernorm_rowwise"
    op = "layernorm"
    template = TEMPLATE
    summary = "rows per program, one-pass or two-pass Welford, persistent or not, fp32 stats"
    description = summary

    def fixed(self, problem):
        return {"EPS": LayernormOp().eps(problem), **super().fixed(problem)}

    def default(self, problem):
        params = super().default(problem)
        if params["MODE"] == "one_pass" and problem.shape[-1] >= 4096:
            # Two rows per program halve the per-row L2 reads of the parameter vector(s),
            # which are as wide as the row: best or tied-best at N = 4096 and 8192 on an H200
            # (benchmarks/results/membound_probe_h200.json).
            params["ROWS"] = 2
        return params
