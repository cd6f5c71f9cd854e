"""decode_attention_split: flash-decoding. The keys of each (batch, cached head) are split over
enough programs to give every SM some of the cache to read (the split is picked at run time
from the shape and the SM count: PROGRAMS_PER_SM programs per SM in all); each program runs
online softmax over its keys for all the queries that read them at once (one tl.dot per key
block: the T queries of each of the H / HKV query heads of the group, so grouped-query
attention reads each cached key once, not once per query head) and writes its running max,
sum and unnormalized output in fp32; a second kernel combines the splits.
q, k and v may be strided views (a slice of a cache buffer): only the head dim must be
contiguous.
"""

from __future__ import annotations

from typing import Any

from kernels.ops.decode_attention.op import kv_heads
from kernels.problem import Family, ParamSpace, Problem
from kernels.render import FAST_LAUNCH, render_module

# Values a thread may keep in registers (of 255) before the kernel spills: the rest are
# addresses, masks and the loop's state.
REGISTERS_PER_THREAD = 160

KERNELS = """
@triton.jit
def decode_partial_kernel(
    q_ptr, k_ptr, v_ptr, m_ptr, l_ptr, acc_ptr,
    H, HKV, T, S, D, chunk, scale,
    sq_b, sq_h, sq_t, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s,
    BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    bkv = tl.program_id(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    b = bkv // HKV
    kv = bkv % HKV
    group = H // HKV
    # Row r: query t = r % T of query head kv * group + r // T.
    offs_r = tl.arange(0, BLOCK_R)
    offs_t = offs_r % T
    heads = kv * group + offs_r // T
    rows_in = offs_r < group * T
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    q_ptrs = (q_ptr + b.to(tl.int64) * sq_b + heads[:, None].to(tl.int64) * sq_h
              + offs_t[:, None] * sq_t + offs_d[None, :])
    q = tl.load(q_ptrs, mask=rows_in[:, None] & (offs_d[None, :] < D), other=0.0)
    k_base = k_ptr + b.to(tl.int64) * sk_b + kv.to(tl.int64) * sk_h
    v_base = v_ptr + b.to(tl.int64) * sv_b + kv.to(tl.int64) * sv_h
    last = S - T + offs_t  # the last key each query sees
    start = split * chunk
    end = tl.minimum(start + chunk, S)
    m_i = tl.full((BLOCK_R,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_R,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_D), dtype=tl.float32)
    for s0 in range(start, end, BLOCK_S):
        keys = s0 + offs_s
        in_range = keys < end
        k = tl.load(
            k_base + keys[None, :].to(tl.int64) * sk_s + offs_d[:, None],
            mask=in_range[None, :] & (offs_d[:, None] < D), other=0.0,
        )  # (BLOCK_D, BLOCK_S)
        scores = tl.dot(q, k) * scale
        seen = (keys[None, :] <= last[:, None]) & in_range[None, :]
        scores = tl.where(seen, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(scores - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + keys[:, None].to(tl.int64) * sv_s + offs_d[None, :],
            mask=in_range[:, None] & (offs_d[None, :] < D), other=0.0,
        )  # (BLOCK_S, BLOCK_D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    row = ((b * H + heads) * splits + split) * T + offs_t  # the combine's (b, h, split, t)
    tl.store(m_ptr + row, m_i, mask=rows_in)
    tl.store(l_ptr + row, l_i, mask=rows_in)
    acc_ptrs = acc_ptr + row[:, None].to(tl.int64) * D + offs_d[None, :]
    tl.store(acc_ptrs, acc, mask=rows_in[:, None] & (offs_d[None, :] < D))


@triton.jit
def decode_combine_kernel(
    m_ptr, l_ptr, acc_ptr, out_ptr, H, T, D, splits,
    so_b, so_h, so_t,
    BLOCK_SPLIT: tl.constexpr, BLOCK_D: tl.constexpr,
):
    bh = tl.program_id(0)
    t = tl.program_id(1)
    sp = tl.arange(0, BLOCK_SPLIT)
    offs_d = tl.arange(0, BLOCK_D)
    row = (bh * splits + sp) * T + t
    m = tl.load(m_ptr + row, mask=sp < splits, other=float("-inf"))
    l = tl.load(l_ptr + row, mask=sp < splits, other=0.0)
    top = tl.max(m, 0)
    w = tl.where(m == float("-inf"), 0.0, tl.exp(m - top))  # a split that saw no key: 0
    acc = tl.load(
        acc_ptr + row[:, None].to(tl.int64) * D + offs_d[None, :],
        mask=(sp[:, None] < splits) & (offs_d[None, :] < D), other=0.0,
    )
    out = tl.sum(w[:, None] * acc, 0) / tl.sum(w * l, 0)
    b = bh // H
    h = bh % H
    o_ptrs = out_ptr + b.to(tl.int64) * so_b + h * so_h + t * so_t + offs_d
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=offs_d < D)
""".strip()

TEMPLATE = (
    """$HEADER

import math

import torch
import triton
import triton.language as tl
from triton.runtime import driver

$CONSTANTS


"""
    + FAST_LAUNCH
    + "\n\n\n"
    + KERNELS
    + """


_SMS = {}  # device index -> multiprocessor count


def split_plan(bh, keys, device):
    \"\"\"(splits, keys per split): about PROGRAMS_PER_SM programs per SM in all, whole key blocks
    per split, no split without keys.\"\"\"
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in _SMS:
            _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
        sms = _SMS[index]
    else:
        sms = 4  # the CPU interpreter: a few splits, so the combine is exercised
    blocks = triton.cdiv(keys, BLOCK_S)
    splits = max(1, min(blocks, triton.cdiv(sms * PROGRAMS_PER_SM, bh)))
    chunk = triton.cdiv(blocks, splits) * BLOCK_S
    return triton.cdiv(keys, chunk), chunk


def run(q, k, v, *, out):
    B, H, T, D = q.shape
    HKV, S = k.shape[1], k.shape[2]
    splits, chunk = split_plan(B * HKV, S, q.device)
    m = torch.empty((B * H * splits * T,), dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    acc = torch.empty((B * H * splits * T, D), dtype=torch.float32, device=q.device)
    block_r = max(16, triton.next_power_of_2(H // HKV * T))
    block_d = max(16, triton.next_power_of_2(D))
    launch(
        decode_partial_kernel, (B * HKV, splits),
        q, k, v, m, l, acc, H, HKV, T, S, D, chunk, 1.0 / math.sqrt(D),
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        BLOCK_R=block_r, BLOCK_S=BLOCK_S, BLOCK_D=block_d,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    launch(
        decode_combine_kernel, (B * H, T),
        m, l, acc, out, H, T, D, splits, out.stride(0), out.stride(1), out.stride(2),
        BLOCK_SPLIT=max(2, triton.next_power_of_2(splits)), BLOCK_D=block_d,
        num_warps=4, num_stages=1,
    )
"""
)


class SplitDecodeAttention(Family):
    name = "decode_attention_split"
    op = "decode_attention"
    description = "keys split over programs (flash-decoding), online softmax, then a combine"

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_S": [16, 32, 64, 128],
                "PROGRAMS_PER_SM": [1, 2, 4, 8],
                "NUM_WARPS": [2, 4, 8],
                "NUM_STAGES": [1, 2, 3, 4],
            },
            constraints=("smem: NUM_STAGES*2*BLOCK_S*BLOCK_D*elt",),
        )

    def starting_points(self, problem: Problem) -> list[dict[str, Any]]:
        keys = ("BLOCK_S", "PROGRAMS_PER_SM", "NUM_WARPS", "NUM_STAGES")
        grid = [(64, 2, 4, 2), (64, 4, 4, 2), (32, 4, 4, 3), (128, 2, 8, 2), (64, 1, 4, 3)]
        points = [dict(zip(keys, values, strict=True)) for values in grid]
        return [p for p in points if self.check(problem, p) is None]

    def default(self, problem: Problem) -> dict[str, Any]:
        return {"BLOCK_S": 64, "PROGRAMS_PER_SM": 2, "NUM_WARPS": 4, "NUM_STAGES": 2}

    def check(self, problem: Problem, params) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        d = max(16, 1 << (problem.shape[4] - 1).bit_length())
        smem = params["NUM_STAGES"] * 2 * params["BLOCK_S"] * d * problem.torch_dtype.itemsize
        if smem > 200_000:
            return f"needs about {smem} bytes of shared memory"
        # A program holds every query row of its group: the fp32 output and scores, q.
        _b, h, t, _s, _d = problem.shape
        rows = max(16, 1 << (h // kv_heads(problem) * t - 1).bit_length())
        per_thread = rows * (d + params["BLOCK_S"] + d // 2) // (32 * params["NUM_WARPS"])
        if per_thread > REGISTERS_PER_THREAD:
            return f"{rows} query rows need about {per_thread} registers a thread"
        return None

    def render(self, problem: Problem, params) -> str:
        return render_module(
            TEMPLATE,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            summary=self.description,
        )
