"""attention_flash: flash attention forward (online softmax over key blocks), a starting point.

One program per (BLOCK_M queries, batch*head); keys and values stream through in BLOCK_N
blocks; the running max and sum rescale the accumulator; causal programs stop at their
diagonal. The head dim is padded to a power of two and masked.
"""

from __future__ import annotations

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
def flash_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, H, S, D, sm_scale,
    stride_b, stride_h, stride_s,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    base = (bh // H).to(tl.int64) * stride_b + (bh % H).to(tl.int64) * stride_h
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < D
    q = tl.load(q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :],
                mask=(offs_m[:, None] < S) & d_ok, other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    stop = tl.minimum(S, start_m + BLOCK_M) if CAUSAL else S
    for start_n in range(0, stop, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols[:, None] < S) & d_ok
        k = tl.load(k_ptr + base + cols[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        valid = cols[None, :] < S
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)  # rows with no key yet
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + cols[:, None] * stride_s + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < S) & d_ok)


def run(q, k, v, *, out):
    B, H, S, D = q.shape
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    launch(
        flash_attention_kernel, grid,
        q, k, v, out, H, S, D, 1.0 / math.sqrt(D),
        q.stride(0), q.stride(1), q.stride(2),
        CAUSAL=CAUSAL, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_D=max(16, triton.next_power_of_2(D)),
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
"""
)


class FlashAttention(Family):
    name = "attention_flash"
    op = "attention"
    description = "flash attention forward: online softmax over key blocks, causal early exit"

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

    def check(self, problem, params):
        if (why := super().check(problem, params)) is not None:
            return why
        d = max(16, 1 << (problem.shape[3] - 1).bit_length())
        per_thread = params["BLOCK_M"] * (params["BLOCK_N"] + d) / (32 * params["NUM_WARPS"])
        if per_thread > 192:
            return "accumulator and scores need too many registers; more warps or smaller blocks"
        return None

    def render(self, problem, params):
        return render_module(
            TEMPLATE,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed={"CAUSAL": problem.layout == "causal"},
            summary=self.description,
        )
