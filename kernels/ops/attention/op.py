"""attention: out = softmax(q @ k^T / sqrt(D) [+ causal mask]) @ v, per batch and head: a
prefill's (or an encoder's) attention, every query against every key of its sequence.

Shape (B, H, S, D): q and out are (B, H, S, D); k and v are (B, HKV, S, D). Layout "" is full
attention (an encoder's, ViT's), "causal" masks keys after the query's position (a decoder's
prefill: scaled_dot_product_attention(is_causal=True)). Either may go on with
"+kv_heads=<HKV>" (kernels/gqa.py), grouped-query attention: H / HKV query heads share each
key/value head, read once for all of them, where model code copies them for SDPA first
(Qwen2's repeat_interleave, HF's repeat_kv). A few new queries against a cache are
decode_attention's.
"""

from __future__ import annotations

import math

import torch

from kernels import gqa
from kernels.problem import MeasuredBest, Op, OutputSpec, ProblemError, Tolerance

CAUSAL = "causal"
# Hopper, where PyTorch's SDPA runs cuDNN's warp-specialized wgmma kernel: attention_flash's
# best starting point took 1.12-1.6x its time at Qwen2, GPT-J, llama_block and ViT's prefill
# shapes (H200, 2026-12-02), 0.89x at best. Triton 3.6 warp-specializes loops on Blackwell only.
HOPPER = ("H100", "H200", "H800", "H20")
ON_HOPPER = MeasuredBest(0.89, "benchmarks/results/sdpa_backends_h200.json")


def is_causal(layout: str) -> bool:
    return layout.split("+")[0] == CAUSAL


def layout_for(causal: bool, heads: int, cached_heads: int) -> str:
    """ "causal+kv_heads=4" and the like: the mask, then the grouped heads."""
    parts = [CAUSAL if causal else "", gqa.layout_part(heads, cached_heads)]
    return "+".join(p for p in parts if p)


def kv_heads(problem) -> int:
    return gqa.cached_heads(problem.layout, problem.shape[1])


class AttentionOp(Op):
    name = "attention"
    dims = ("B", "H", "S", "D")
    dtypes = ("fp16", "bf16")
    layouts = ("", CAUSAL)
    description = "attention forward (flash attention), optional causal mask, grouped-query heads"

    def layout_note(self) -> str:
        return "either may end in +kv_heads=<n> for grouped-query attention (n divides H)"

    def layout_error(self, layout: str) -> str | None:
        parts = layout.split("+") if layout else []
        if parts[:1] == [CAUSAL]:
            parts = parts[1:]
        if not parts or (len(parts) == 1 and gqa.part_error(parts[0]) is None):
            return None
        return (
            f"{self.name} takes no layout (full attention), causal, kv_heads=<n> or "
            f"causal+kv_heads=<n>, not {layout!r}"
        )

    def validate(self, problem):
        super().validate(problem)
        if gqa.KV_HEADS in problem.layout:
            instead = CAUSAL if is_causal(problem.layout) else "no layout"
            if why := gqa.heads_error(problem.shape[1], kv_heads(problem), instead):
                raise ProblemError(why)

    def fixed_dims(self, problem):
        # kv_heads=<n> must divide H: fewer query heads could leave a group short.
        return frozenset({"H"}) if gqa.KV_HEADS in problem.layout else frozenset()

    def input_shapes(self, problem):
        b, h, s, d = problem.shape
        kv = (b, kv_heads(problem), s, d)
        return [(b, h, s, d), kv, kv]

    def output_spec(self, problem):
        return OutputSpec(tuple(problem.shape), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(
            torch.randn(shape, generator=gen, device=device).to(problem.torch_dtype)
            for shape in self.input_shapes(problem)
        )

    def adversarial_inputs(self, problem, *, seed, device):
        q, k, v = self.make_inputs(problem, seed=seed, device=device)
        # Large logits: a naive exp overflows; the online max must be right. One hot key per
        # key/value head, matched to the last query of its group's first head: a kernel that
        # pairs a query head with the wrong key/value head misses it.
        peaked = ((4 * q.float()).to(q.dtype), (4 * k.float()).to(k.dtype), v)
        return {"peaked_scores": peaked, "one_hot_key": (q, gqa.one_hot_key(q, k), v)}

    def reference(self, problem, q, k, v):
        b, h, s, d = problem.shape
        out = torch.empty(problem.shape, dtype=torch.float64, device=q.device)
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device)
        if is_causal(problem.layout):
            mask = torch.tril(mask)
        for i in range(b):  # per batch: keeps the fp64 score matrix small
            keys = gqa.repeat_heads(k[i : i + 1].double(), h)[0]
            values = gqa.repeat_heads(v[i : i + 1].double(), h)[0]
            scores = q[i].double() @ keys.transpose(-1, -2) / math.sqrt(d)
            scores = scores.masked_fill(~mask, float("-inf"))
            out[i] = torch.softmax(scores, dim=-1) @ values
        return out

    def baseline(self, problem, q, k, v, *, out):
        # SDPA groups the heads itself (enable_gqa): each key/value head is read once, with no
        # repeated copy. Its dispatcher picks cuDNN's kernel on an H200, 1.4-1.8x its flash
        # kernel at the models' shapes (benchmarks/results/sdpa_backends_h200.json).
        grouped = kv_heads(problem) != problem.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=is_causal(problem.layout), enable_gqa=grouped
        )

    def measured_best(self, device_name):
        return ON_HOPPER if any(name in device_name for name in HOPPER) else None

    def flops(self, problem):
        b, h, s, d = problem.shape
        full = 4 * b * h * s * s * d
        return full // 2 if is_causal(problem.layout) else full

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        shapes = self.input_shapes(problem) + [self.output_spec(problem).shape]
        return elt * sum(math.prod(x) for x in shapes)

    def tolerance(self, problem):
        # P is rounded to the input dtype before the second product, as flash attention does.
        if problem.dtype == "bf16":
            return Tolerance(rtol=2e-2, atol=2e-2)
        return Tolerance(rtol=5e-3, atol=5e-3)

    def sweep(self, problem):
        b, h, s, d = problem.shape
        # Head counts of the small shapes; grouped, each keeps H (the layout fixes HKV).
        h1, h2, h3 = (1, 2, 3) if kv_heads(problem) == h else (h, h, h)
        shapes = [
            (1, h1, 1, 16),
            (1, h2, 7, 16),  # S below a key block
            (2, h3, 33, 64),  # one past a power of two
            (1, h2, 130, 128),  # a tail block, queries past the last key block's edge
            (b, h, s, d),
        ]
        return [problem.with_shape(*x) for x in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.attention.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        return [(f.name, p) for f in self.families_for(problem) for p in f.starting_points(problem)]
