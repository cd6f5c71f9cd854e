"""attention: out = softmax(q @ k^T / sqrt(D) [+ causal mask]) @ v, per batch and head.

Shape (B, H, S, D): q, k, v and out are (B, H, S, D). Layout "" is full attention,
"causal" masks keys after the query's position.
"""

from __future__ import annotations

import math

import torch

from kernels.problem import Op, OutputSpec, Tolerance


class AttentionOp(Op):
    name = "attention"
    dims = ("B", "H", "S", "D")
    dtypes = ("fp16", "bf16")
    layouts = ("", "causal")
    description = "attention forward (flash attention), optional causal mask"

    def input_shapes(self, problem):
        return [tuple(problem.shape)] * 3

    def output_spec(self, problem):
        return OutputSpec(tuple(problem.shape), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(
            torch.randn(problem.shape, generator=gen, device=device).to(problem.torch_dtype)
            for _ in range(3)
        )

    def adversarial_inputs(self, problem, *, seed, device):
        q, k, v = self.make_inputs(problem, seed=seed, device=device)
        # Large logits: a naive exp overflows; the online max must be right.
        return {"peaked_scores": ((4 * q.float()).to(q.dtype), (4 * k.float()).to(k.dtype), v)}

    def reference(self, problem, q, k, v):
        d = problem.shape[3]
        out = torch.empty(problem.shape, dtype=torch.float64, device=q.device)
        s = problem.shape[2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device)
        if problem.layout == "causal":
            mask = torch.tril(mask)
        for b in range(problem.shape[0]):  # per batch: keeps the fp64 score matrix small
            scores = q[b].double() @ k[b].double().transpose(-1, -2) / math.sqrt(d)
            scores = scores.masked_fill(~mask, float("-inf"))
            out[b] = torch.softmax(scores, dim=-1) @ v[b].double()
        return out

    def baseline(self, problem, q, k, v, *, out):
        causal = problem.layout == "causal"
        out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))

    def flops(self, problem):
        b, h, s, d = problem.shape
        full = 4 * b * h * s * s * d
        return full // 2 if problem.layout == "causal" else full

    def bytes_moved(self, problem):
        return 4 * math.prod(problem.shape) * problem.torch_dtype.itemsize

    def tolerance(self, problem):
        # P is rounded to the input dtype before the second product, as flash attention does.
        if problem.dtype == "bf16":
            return Tolerance(rtol=2e-2, atol=2e-2)
        return Tolerance(rtol=5e-3, atol=5e-3)

    def sweep(self, problem):
        b, h, s, d = problem.shape
        shapes = [(1, 1, 1, 16), (1, 2, 7, 16), (2, 3, 33, 64), (1, 2, 130, 128), (b, h, s, d)]
        return [problem.with_shape(*x) for x in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.attention.families import FAMILIES

        return list(FAMILIES)
