"""qkv_rotary: the attention input projections in one GEMM, rotary embedding in the epilogue.

    q = rotary(x @ w_q^T), k = rotary(x @ w_k^T), v = x @ w_v^T,  out = [q | k | v]

Shape (M, H, HKV, D, K): x is (M, K) tokens; w_q is (H*D, K), w_k and w_v are (HKV*D, K)
(nn.Linear's layout; HKV < H is grouped-query attention); cos and sin are (M, D/2) per token.
out is (M, (H + 2*HKV) * D): q's heads, then k's, then v's, each head's D values contiguous,
so q, k and v are column slices of it. Rotary is the rotate-half (GPT-NeoX / Llama) form of
kernels/ops/rotary: y[:D/2] = x1 cos - x2 sin, y[D/2:] = x2 cos + x1 sin per head.

Layout "+bias": the three projections have biases b_q (H*D,), b_k and b_v (HKV*D,), added
before the rotation, as nn.Linear(bias=True) does (Qwen2's q/k/v projections).

Fused, x is read once for the three products, and q and k are rotated before they are first
written, instead of written, read, rotated and written again.
"""

from __future__ import annotations

import math

import torch

from kernels.problem import Op, OutputSpec, ProblemError, Tolerance

BIAS = "+bias"


def has_bias(problem) -> bool:
    return problem.layout == BIAS


def rotate_half(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """y (M, heads, D) rotated by per-token cos/sin (M, D/2)."""
    half = y.shape[-1] // 2
    y1, y2 = y[..., :half], y[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([y1 * c - y2 * s, y2 * c + y1 * s], dim=-1)


class QkvRotaryOp(Op):
    name = "qkv_rotary"
    dims = ("M", "H", "HKV", "D", "K")
    dtypes = ("fp16", "bf16")
    layouts = ("", BIAS)
    description = "q/k/v projections in one GEMM, rotary embedding of q and k in the epilogue"

    def validate(self, problem):
        super().validate(problem)
        if problem.shape[3] % 2:
            raise ProblemError(f"D={problem.shape[3]}: the head dim must be even")

    def input_shapes(self, problem):
        m, h, hkv, d, k = problem.shape
        shapes = [(m, k), (h * d, k), (hkv * d, k), (hkv * d, k), (m, d // 2), (m, d // 2)]
        return shapes + [(h * d,), (hkv * d,), (hkv * d,)] if has_bias(problem) else shapes

    def output_spec(self, problem):
        m, h, hkv, d, _ = problem.shape
        return OutputSpec((m, (h + 2 * hkv) * d), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        m, h, hkv, d, k = problem.shape
        dtype = problem.torch_dtype

        def randn(shape, scale):
            return (torch.randn(shape, generator=gen, device=device) * scale).to(dtype)

        pos = torch.arange(m, device=device, dtype=torch.float32)[:, None]
        freq = 10000.0 ** (-torch.arange(d // 2, device=device, dtype=torch.float32) * 2 / d)
        angle = pos * freq[None, :] + torch.rand((1, 1), generator=gen, device=device)
        inputs = (
            randn((m, k), 1.0),
            randn((h * d, k), k**-0.5),
            randn((hkv * d, k), k**-0.5),
            randn((hkv * d, k), k**-0.5),
            angle.cos().to(dtype),
            angle.sin().to(dtype),
        )
        if not has_bias(problem):
            return inputs
        # As large as the products (trained q/k biases are): a bias added after the rotation,
        # or to the wrong head, does not hide under the tolerance.
        return inputs + (randn((h * d,), 1.0), randn((hkv * d,), 1.0), randn((hkv * d,), 1.0))

    def adversarial_inputs(self, problem, *, seed, device):
        x, wq, wk, wv, cos, sin, *biases = self.make_inputs(problem, seed=seed, device=device)
        gen = torch.Generator(device=device).manual_seed(seed + 5)

        def ints(t):  # 0/1 entries: exact sums, any slip in which row feeds which head shows
            return torch.randint(0, 2, t.shape, generator=gen, device=device).to(t.dtype)

        # Distinct weights per projection and per half-head, so a swapped q/k/v or a swapped
        # half is not hidden by symmetric inputs; cos = 0, sin = 1 is a pure swap of halves.
        swap = (torch.zeros_like(cos), torch.ones_like(sin))
        return {
            "zero_one": (ints(x), ints(wq), ints(wk), ints(wv), cos, sin, *map(ints, biases)),
            "swap_halves": (x, wq, wk, wv, *swap, *biases),
        }

    def reference(self, problem, x, w_q, w_k, w_v, cos, sin, *biases):
        m, h, hkv, d, _ = problem.shape
        x = x.double()
        cos, sin = cos.double(), sin.double()
        b_q, b_k, b_v = (b.double() for b in biases) if biases else (0.0, 0.0, 0.0)
        q = rotate_half((x @ w_q.double().T + b_q).view(m, h, d), cos, sin)
        k = rotate_half((x @ w_k.double().T + b_k).view(m, hkv, d), cos, sin)
        v = x @ w_v.double().T + b_v
        return torch.cat([q.reshape(m, -1), k.reshape(m, -1), v], dim=1)

    def baseline(self, problem, x, w_q, w_k, w_v, cos, sin, *biases, out):
        m, h, hkv, d, _ = problem.shape
        b_q, b_k, b_v = biases or (None, None, None)
        linear = torch.nn.functional.linear
        q = rotate_half(linear(x, w_q, b_q).view(m, h, d), cos, sin)
        k = rotate_half(linear(x, w_k, b_k).view(m, hkv, d), cos, sin)
        torch.cat([q.reshape(m, -1), k.reshape(m, -1), linear(x, w_v, b_v)], dim=1, out=out)

    def flops(self, problem):
        m, h, hkv, d, k = problem.shape
        return 2 * m * (h + 2 * hkv) * d * k

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        shapes = self.input_shapes(problem) + [self.output_spec(problem).shape]
        return elt * sum(math.prod(s) for s in shapes)

    def unfused_bytes(self, problem):
        # The rotary over q and k (reads and writes each); v is the GEMM's output as it is.
        m, h, hkv, d, _ = problem.shape
        return 2 * m * (h + hkv) * d * problem.torch_dtype.itemsize

    def tolerance(self, problem):
        # A GEMM's rounding, then a rotation whose two products PyTorch rounds separately.
        if problem.dtype == "bf16":
            return Tolerance(rtol=2.4e-2, atol=1.6e-2)
        return Tolerance(rtol=6e-3, atol=3e-3)

    def sweep(self, problem):
        m, h, hkv, d, k = problem.shape
        shapes = [
            (1, 1, 1, 2, 1),
            (3, 2, 1, 6, 7),  # odd sizes, D/2 = 3 below any tile, GQA
            (17, 3, 3, 16, 65),
            (1, h, hkv, d, k),  # a decode row against the workload's weights
            (max(1, m - 1), h, hkv, d, k + 3),  # odd M, unaligned K
            (m, h, hkv, d, k),
        ]
        return [problem.with_shape(*s) for s in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.qkv_rotary.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        # The dual-GEMM grid for the problem's regime (kernels/dual_gemm.py); not measured
        # yet: the model job's screen times them on the GPU.
        return [(f.name, p) for f in self.families() for p in f.starting_points(problem)]
