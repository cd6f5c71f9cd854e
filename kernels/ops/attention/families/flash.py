"""attention_flash: flash attention forward (online softmax over key blocks).

One program per (BLOCK_M queries, batch*head); keys and values stream through in BLOCK_N
blocks; the running max and sum rescale the accumulator. The key blocks a tile sees in full
(below its diagonal, or before the sequence's last partial block) run without a mask; only
the diagonal and the tail are masked. Causal tiles run longest first, so the last wave is
the short ones. Grouped-query heads (layout +kv_heads=<n>) read their key/value head at
h // (H / n): each is read once per query tile, never repeated. q, k, v and out may be
strided views (a model's transposed heads): only the head dim must be contiguous. The head
dim is padded to a power of two and masked.
"""

from __future__ import annotations

from kernels.ops.attention.op import is_causal
from kernels.problem import Family, ParamSpace
from kernels.render import FAST_LAUNCH, render_module

TEMPLATE = (
    """$HEADER

import math

import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


"""
    + FAST_LAUNCH
    + """


@triton.jit
def attend(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n, offs_d, S, D,
           stride_ks, stride_vs, qk_scale,
           MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr):
    cols = start_n + offs_n
    # K^T as a (BLOCK_D, BLOCK_N) tile: q @ k^T without a transpose in registers.
    k_ptrs = k_base + cols[None, :].to(tl.int64) * stride_ks + offs_d[:, None]
    v_ptrs = v_base + cols[:, None].to(tl.int64) * stride_vs + offs_d[None, :]
    if MASKED:
        k = tl.load(k_ptrs, mask=(cols[None, :] < S) & (offs_d[:, None] < D), other=0.0)
    elif EVEN_D:
        k = tl.load(k_ptrs)
    else:
        k = tl.load(k_ptrs, mask=offs_d[:, None] < D, other=0.0)
    s = tl.dot(q, k) * qk_scale
    if MASKED:
        valid = cols[None, :] < S
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)  # a row that has seen no key yet
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if MASKED:
        v = tl.load(v_ptrs, mask=(cols[:, None] < S) & (offs_d[None, :] < D), other=0.0)
    elif EVEN_D:
        v = tl.load(v_ptrs)
    else:
        v = tl.load(v_ptrs, mask=offs_d[None, :] < D, other=0.0)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def flash_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, H, S, D, GROUPS, qk_scale,
    stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
    CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    if CAUSAL:  # the longest rows first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    kv = h // GROUPS
    k_base = k_ptr + b * stride_kb + kv * stride_kh
    v_base = v_ptr + b * stride_vb + kv * stride_vh
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    rows_ok = (offs_m[:, None] < S) & (offs_d[None, :] < D)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None].to(tl.int64) * stride_qs
                + offs_d[None, :], mask=rows_ok, other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    if CAUSAL:  # every key before the tile's first query is seen by all its rows
        full = (start_m // BLOCK_N) * BLOCK_N
        stop = tl.minimum(S, start_m + BLOCK_M)
    else:
        full = (S // BLOCK_N) * BLOCK_N
        stop = S
    for start_n in range(0, full, BLOCK_N):
        acc, l_i, m_i = attend(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n,
                               offs_d, S, D, stride_ks, stride_vs, qk_scale,
                               False, CAUSAL, EVEN_D)
    for start_n in range(full, stop, BLOCK_N):
        acc, l_i, m_i = attend(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n,
                               offs_d, S, D, stride_ks, stride_vs, qk_scale,
                               True, CAUSAL, EVEN_D)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None].to(tl.int64) * stride_os
             + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=rows_ok)


def run(q, k, v, *, out):
    B, H, S, D = q.shape
    block_d = max(16, triton.next_power_of_2(D))
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    launch(
        flash_attention_kernel, grid,
        q, k, v, out, H, S, D, H // k.shape[1], 1.4426950408889634 / math.sqrt(D),
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        CAUSAL=CAUSAL, EVEN_D=block_d == D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=block_d,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


SHARED_MEMORY_BYTES = 220_000  # of an H100's or H200's 227 KB a block


def _head_dim(problem) -> int:
    """The head dim as the kernel pads it: a power of two, at least 16."""
    return max(16, 1 << (problem.shape[3] - 1).bit_length())


class FlashAttention(Family):
    name = "attention_flash"
    op = "attention"
    description = (
        "flash attention forward: online softmax over key blocks, masks only on the diagonal "
        "and the tail, grouped-query heads read once"
    )

    def space(self, problem):
        return ParamSpace(
            {
                "BLOCK_M": [16, 32, 64, 128],
                "BLOCK_N": [16, 32, 64, 128],
                "NUM_WARPS": [4, 8],
                "NUM_STAGES": [1, 2, 3, 4],
            },
            constraints=("regs: BLOCK_M*(BLOCK_N + head_dim)/threads",),
        )

    def default(self, problem):
        return {"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 8, "NUM_STAGES": 3}

    def starting_points(self, problem) -> list[dict]:
        """Tiles by head dim (Triton's fused-attention tutorial's grid, narrowed), not measured
        yet: the model job's screen times them on the GPU."""
        keys = ("BLOCK_M", "BLOCK_N", "NUM_WARPS", "NUM_STAGES")
        d = _head_dim(problem)
        if d <= 64:
            grid = [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 4)]
        elif d <= 128:
            grid = [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 4, 3)]
        else:
            grid = [(64, 64, 4, 2), (64, 32, 4, 3), (128, 32, 8, 2), (64, 64, 8, 2)]
        points = [dict(zip(keys, values, strict=True)) for values in grid]
        return [p for p in points if self.check(problem, p) is None]

    def check(self, problem, params):
        if (why := super().check(problem, params)) is not None:
            return why
        d = _head_dim(problem)
        per_thread = params["BLOCK_M"] * (params["BLOCK_N"] + d) / (32 * params["NUM_WARPS"])
        if per_thread > 192:
            return "accumulator and scores need too many registers; more warps or smaller blocks"
        # q's tile, and K and V's per pipeline stage.
        elt = problem.torch_dtype.itemsize
        smem = (params["BLOCK_M"] + 2 * params["NUM_STAGES"] * params["BLOCK_N"]) * d * elt
        if smem > SHARED_MEMORY_BYTES:
            return f"needs about {smem} bytes of shared memory"
        return None

    def render(self, problem, params):
        return render_module(
            TEMPLATE,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed={"CAUSAL": is_causal(problem.layout)},
            summary=self.description,
        )
