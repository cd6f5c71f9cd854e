"""cross_entropy_rowwise: row in registers, or an online log-sum-exp over chunks (one read);
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
def load_rows(x_ptr, t_ptr, tile, M, N, stride_x,
              ROWS: tl.constexpr, BLOCK: tl.constexpr, EVICTION: tl.constexpr):
    # The target's logit first, then the row block. (Measured on an H200, 8192x8192 bf16:
    # issuing the row first and the dependent target -> logit pair behind it ran 7 % slower,
    # 41.2 vs 38.6 us: benchmarks/results/membound_probe_h200.json vs its _run1 twin.)
    rows = tile * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK)
    x_rows = x_ptr + rows.to(tl.int64) * stride_x
    targets = tl.load(t_ptr + rows, mask=row_ok, other=0)
    picked = tl.load(x_rows + targets, mask=row_ok, other=0.0)
    mask = row_ok[:, None] & (cols < N)[None, :]
    x = tl.load(x_rows[:, None] + cols[None, :], mask=mask, other=NEG, eviction_policy=EVICTION)
    return x, picked


@triton.jit
def loss_rows(x, picked, loss_ptr, tile, M, ROWS: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    x = x.to(tl.float32)
    row_max = tl.max(x, axis=1)
    row_sum = tl.sum(tl.exp(x - row_max[:, None]), axis=1)
    loss = row_max + tl.log(row_sum) - picked.to(tl.float32)
    tl.store(loss_ptr + rows, loss, mask=rows < M)


@triton.jit
def chunked_rows(x_ptr, t_ptr, loss_ptr, tile, M, N, stride_x,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr, EVICTION: tl.constexpr,
                 PREFETCH: tl.constexpr):
    # Online log-sum-exp per lane, one exp per element: exp(-|x - m|) is the rescale factor
    # of the old sum when x is the new max, and x's own term otherwise. One read of the row.
    rows = tile * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    cols = tl.arange(0, BLOCK)
    m_acc = tl.full((ROWS, BLOCK), NEG, dtype=tl.float32)
    s_acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    if PREFETCH:  # chunk i+1 is in flight while chunk i is reduced
        mask = row_ok[:, None] & (cols[None, :] < N)
        x_next = tl.load(x_rows + cols[None, :], mask=mask, other=NEG, eviction_policy=EVICTION)
    targets = tl.load(t_ptr + rows, mask=row_ok, other=0)  # independent: arrives meanwhile
    for start in range(0, N, BLOCK):
        if PREFETCH:
            x = x_next
            c = start + BLOCK + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x_next = tl.load(x_rows + c[None, :], mask=mask, other=NEG, eviction_policy=EVICTION)
        else:
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < N)
            x = tl.load(x_rows + c[None, :], mask=mask, other=NEG, eviction_policy=EVICTION)
        x = x.to(tl.float32)
        d = x - m_acc
        e = tl.exp(-tl.abs(d))
        s_acc = tl.where(d > 0, s_acc * e + 1.0, s_acc + e)
        m_acc = tl.maximum(m_acc, x)
    # The target's logit last: its one dependent load no longer delays the row's stream.
    picked = tl.load(x_ptr + rows.to(tl.int64) * stride_x + targets, mask=row_ok, other=0.0)
    row_max = tl.max(m_acc, axis=1)
    row_sum = tl.sum(s_acc * tl.exp(m_acc - row_max[:, None]), axis=1)
    loss = row_max + tl.log(row_sum) - picked.to(tl.float32)
    tl.store(loss_ptr + rows, loss, mask=row_ok)


@triton.jit
def cross_entropy_kernel(
    x_ptr, t_ptr, loss_ptr, M, N, stride_x, n_tiles,
    ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr,
    PERSISTENT: tl.constexpr, EVICTION: tl.constexpr, PREFETCH: tl.constexpr,
):
    pid = tl.program_id(0)
    if ONE_PASS:
        if PERSISTENT:  # load block i+1 before reducing block i
            step = tl.num_programs(0)
            x, picked = load_rows(x_ptr, t_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            for tile in tl.range(pid, n_tiles, step):
                x_next, picked_next = load_rows(
                    x_ptr, t_ptr, tile + step, M, N, stride_x, ROWS, BLOCK, EVICTION
                )
                loss_rows(x, picked, loss_ptr, tile, M, ROWS)
                x = x_next
                picked = picked_next
        else:
            x, picked = load_rows(x_ptr, t_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION)
            loss_rows(x, picked, loss_ptr, pid, M, ROWS)
    else:
        if PERSISTENT:
            for tile in tl.range(pid, n_tiles, tl.num_programs(0)):
                chunked_rows(
                    x_ptr, t_ptr, loss_ptr, tile, M, N, stride_x, ROWS, BLOCK, EVICTION, PREFETCH
                )
        else:
            chunked_rows(
                x_ptr, t_ptr, loss_ptr, pid, M, N, stride_x, ROWS, BLOCK, EVICTION, PREFETCH
            )


"""
    + FAST_LAUNCH
    + """


"""
    + LAUNCH_HELPER
    + """


def run(logits, targets, *, out):
    M, N = logits.shape
    mode, block, tiles, grid = launch_shape(logits, M, N)
    # STREAM_STORE has nothing to act on here: the output is one float per row.
    launch(cross_entropy_kernel, grid,
        logits, targets, out, M, N, logits.stride(0), tiles,
        ROWS=ROWS, BLOCK=block, ONE_PASS=mode == "one_pass", PERSISTENT=PROGRAMS_PER_SM > 0,
        EVICTION="evict_first" if EVICT_FIRST else "", PREFETCH=PREFETCH,
        num_warps=NUM_WARPS,
    )
"""
)


class CrossEntropyRowwise(GridRowwiseFamily):
    name = "cross_entropy_rowwise"
    op = "cross_entropy"
    template = TEMPLATE
    summary = "rows per program, whole row or online log-sum-exp over chunks, persistent or not"
    description = summary

    def space(self, problem):
        space = super().space(problem)
        return type(space)(
            {
                **space.choices,
                "STREAM_STORE": [False],  # nothing large is written
                # chunked mode: load chunk i+1 before reducing chunk i (registers x2)
                "PREFETCH": [False, True],
            },
            constraints=space.constraints,
        )

    def default(self, problem):
        params = {**super().default(problem), "PREFETCH": False, "EVICT_FIRST": True}
        if params["MODE"] == "one_pass":
            # Nothing is written back, so short programs win: 4 warps for an 8192-wide row
            # (38.6 us vs 51 us with 16 warps on an H200; membound_probe_h200_run1.json).
            width = max(16, 1 << (problem.shape[-1] - 1).bit_length())
            params["NUM_WARPS"] = max(1, min(16, width // 2048))
        return params
