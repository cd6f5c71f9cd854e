"""decode_attention: out = softmax(q k^T / sqrt(D) + mask) v for T new queries against S cached
keys (the new tokens' own keys are the last T), causal from the end: query i sees keys
0 .. S - T + i. That is a decode step (T = 1: every key) or a speculative draft being
verified (T of a few), the mask a model passes to scaled_dot_product_attention as a bool
tensor, and what is_causal=True does not mean (its causal is aligned at the top left).

Shape (B, H, T, S, D): q is (B, H, T, D), k and v are (B, HKV, S, D), out is (B, H, T, D).
Layout "" is multi-head attention (HKV = H); "kv_heads=<HKV>" is grouped-query attention:
H / HKV query heads share each cached head (Llama-3, Qwen2, Mistral), which the model would
otherwise copy H / HKV times (repeat_kv, repeat_interleave) before attending. The layout
(not a sixth dim) keeps every MHA problem's key as it was.
With few queries the time is the time to read the cache once; kernels split the keys over
many programs (flash-decoding) to read it with every SM, and read each cached head once for
all the query heads of its group.
"""

from __future__ import annotations

import math

import torch

from kernels import gqa
from kernels.problem import Op, OutputSpec, ProblemError, Tolerance


def causal_from_end(t: int, s: int, device=None) -> torch.Tensor:
    """(t, s) bool: query i sees keys 0 .. s - t + i."""
    return (
        torch.arange(s, device=device)[None, :] <= (s - t) + torch.arange(t, device=device)[:, None]
    )


def kv_heads(problem) -> int:
    """The cached heads (HKV): the layout's, or H (multi-head attention)."""
    return gqa.cached_heads(problem.layout, problem.shape[1])


def layout_for(heads: int, cached_heads: int) -> str:
    """The layout of H query heads over HKV cached ones ("" when they are the same)."""
    return gqa.layout_part(heads, cached_heads)


def repeat_kv(problem, x: torch.Tensor) -> torch.Tensor:
    """k or v with each cached head repeated for its query heads: (B, H, S, D)."""
    return gqa.repeat_heads(x, problem.shape[1])


class DecodeAttentionOp(Op):
    name = "decode_attention"
    dims = ("B", "H", "T", "S", "D")
    dtypes = ("fp16", "bf16")
    description = "few queries against a KV cache, causal from the end (flash-decoding, GQA)"

    def layout_note(self) -> str:
        return "kv_heads=<n> for grouped-query attention (n cached heads, n divides H)"

    def layout_error(self, layout: str) -> str | None:
        if layout == "" or gqa.part_error(layout) is None:
            return None
        return (
            f"{self.name} takes no layout (as many cached heads as query heads) or "
            f"kv_heads=<n> (grouped-query attention), not {layout!r}"
        )

    def validate(self, problem):
        super().validate(problem)
        _b, h, t, s, _d = problem.shape
        if t > s:
            raise ProblemError(f"T={t} new queries but only S={s} keys: the keys include them")
        if t > 64:
            raise ProblemError(f"T={t}: decode attention is for a few new tokens (at most 64)")
        if problem.layout and (why := gqa.heads_error(h, kv_heads(problem), "no layout")):
            raise ProblemError(why)

    def fixed_dims(self, problem):
        # kv_heads=<n> must divide H: fewer query heads could leave a group short.
        return frozenset({"H"}) if problem.layout else frozenset()

    def input_shapes(self, problem):
        b, h, t, s, d = problem.shape
        hkv = kv_heads(problem)
        return [(b, h, t, d), (b, hkv, s, d), (b, hkv, s, d)]

    def output_spec(self, problem):
        b, h, t, _s, d = problem.shape
        return OutputSpec((b, h, t, d), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(
            torch.randn(shape, generator=gen, device=device).to(problem.torch_dtype)
            for shape in self.input_shapes(problem)
        )

    def adversarial_inputs(self, problem, *, seed, device):
        q, k, v = self.make_inputs(problem, seed=seed, device=device)
        # Large logits: a naive exp overflows and the splits' maxima differ widely; one hot
        # key far from the end: a split that sees only masked keys must not contribute.
        peaked = ((4 * q.float()).to(q.dtype), (4 * k.float()).to(k.dtype), v)
        return {"peaked_scores": peaked, "one_hot_key": (q, gqa.one_hot_key(q, k), v)}

    def reference(self, problem, q, k, v):
        b, h, t, s, d = problem.shape
        mask = causal_from_end(t, s, q.device)
        k, v = repeat_kv(problem, k.double()), repeat_kv(problem, v.double())
        scores = q.double() @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    def baseline(self, problem, q, k, v, *, out):
        _b, _h, t, s, _d = problem.shape
        mask = causal_from_end(t, s, q.device)
        # As model code does it (repeat_kv, then SDPA): enable_gqa=True with a mask leaves
        # only SDPA's math backend on a GPU.
        k, v = repeat_kv(problem, k), repeat_kv(problem, v)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def flops(self, problem):
        b, h, t, s, d = problem.shape
        return 4 * b * h * t * s * d

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
        b, h, t, s, d = problem.shape
        # Head counts of the small shapes; grouped, each keeps H (the layout fixes HKV).
        h1, h2, h3 = (1, 2, 3) if kv_heads(problem) == h else (h, h, h)
        shapes = [
            (1, h1, 1, 1, 16),
            (1, h2, 3, 7, 16),  # S below a key block
            (2, h3, 5, 130, 64),  # odd S: a tail block, splits of unequal length
            (1, h, 1, s, d),  # one new token
            (b, h, t, s, d),
        ]
        return [problem.with_shape(*x) for x in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.decode_attention.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        # Not measured yet: the model job's screen times them on the GPU.
        return [(f.name, p) for f in self.families() for p in f.starting_points(problem)]
