"""rmsnorm_rowwise: ROWS rows per program, one-pass or two-pass, optionally persistent."""

from __future__ import annotations

from kernels.ops.rmsnorm.op import RmsnormOp
from kernels.render import FAST_LAUNCH
from kernels.rowwise_grid import LAUNCH_HELPER, GridRowwiseFamily

TEMPLATE = (
    """$HEADER

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


@triton.jit
def load_rows(x_ptr, tile, M, N, stride_x,
              ROWS: tl.constexpr, BLOCK: tl.constexpr, EVICTION: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :]
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICTION)


@triton.jit
def normalize_rows(x, w, y_ptr, tile, M, N, stride_y, eps,
                   ROWS: tl.constexpr, BLOCK: tl.constexpr, STORE_MOD: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None] * w[None, :]
    ptrs = y_ptr + rows.to(tl.int64)[:, None] * stride_y + cols[None, :]
    tl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=STORE_MOD)


@triton.jit
def two_pass_rows(x_ptr, w_ptr, y_ptr, tile, M, N, stride_x, stride_y, eps,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr, STORE_MOD: tl.constexpr):
    # Stream the row twice: sum of squares, then scale (the second read mostly hits L2).
    rows = tile * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK)
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
        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask,
                 cache_modifier=STORE_MOD)


@triton.jit
def rmsnorm_kernel(
    x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps, n_tiles,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr,
    PERSISTENT: tl.constexpr, EVICTION: tl.constexpr, STORE_MOD: tl.constexpr,
):
    pid = tl.program_id(0)
    if ONE_PASS:  # the whole row in registers: one read, one write
        cols = tl.arange(0, BLOCK)
        if PERSISTENT:  # load block i+1 before reducing and writing block i
            step = tl.num_programs(0)
            x = load_rows(x_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            for tile in tl.range(pid, n_tiles, step):
                x_next = load_rows(x_ptr, tile + step, M, N, stride_x, ROWS, BLOCK, EVICTION)
                normalize_rows(x, w, y_ptr, tile, M, N, stride_y, eps, ROWS, BLOCK, STORE_MOD)
                x = x_next
        else:  # the row's loads first, the weight (an L2 hit) behind them
            x = load_rows(x_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            normalize_rows(x, w, y_ptr, pid, M, N, stride_y, eps, ROWS, BLOCK, STORE_MOD)
    else:
        if PERSISTENT:
            for tile in tl.range(pid, n_tiles, tl.num_programs(0)):
                two_pass_rows(x_ptr, w_ptr, y_ptr, tile, M, N, stride_x, stride_y, eps,
                              ROWS, BLOCK, STORE_MOD)
        else:
            two_pass_rows(x_ptr, w_ptr, y_ptr, pid, M, N, stride_x, stride_y, eps,
                          ROWS, BLOCK, STORE_MOD)


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(x, weight, *, out):
    M, N = x.shape
    mode, block, tiles, grid = launch_shape(x, M, N)
    launch(rmsnorm_kernel, grid,
        x, weight, out, M, N, x.stride(0), out.stride(0), EPS, tiles,
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass", PERSISTENT=PROGRAMS_PER_SM > 0,
        EVICTION="evict_first" if EVICT_FIRST else "",
        STORE_MOD=".cs" if STREAM_STORE else "",
        num_warps=NUM_WARPS,
    )
"""
)


class RmsnormRowwise(GridRowwiseFamily):
    name = "rmsnorm_rowwise"
    op = "rmsnorm"
    template = TEMPLATE
    summary = "rows per program, one-pass or two-pass, persistent or not, fp32 statistics"
    description = summary

    def fixed(self, problem):
        return {"EPS": RmsnormOp().eps(problem), **super().fixed(problem)}

    def default(self, problem):
        params = super().default(problem)
        if params["MODE"] == "one_pass" and problem.shape[-1] >= 4096:
            # Two rows per program halve the per-row L2 reads of the parameter vector(s),
            # which are as wide as the row: best or tied-best at N = 4096 and 8192 on an H200
            # (benchmarks/results/membound_probe_h200.json).
            params["ROWS"] = 2
        return params
